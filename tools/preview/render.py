"""Offline preview of a stack: the plan, policy verdicts, figures and artifacts, without credentials.

`python -m tools.preview --stack dev` (what `make preview` runs):
1. reads `Pulumi.<stack>.yaml` as the engine would and validates it (every bad key at once);
2. starts the policy pack's analyzer process (in parallel with step 3: it is the slow start-up);
3. runs `__main__.py` under the mock runtime (`tools.preview.mockrun`), recording every registration;
4. serves the pack over the analyzer protocol on those resources (`tools.preview.analyzer`);
5. prints the component tree, the verdicts and key figures, and writes `build/preview/<stack>/`:
   resources.json, report.json, manifests/, graph.dot, graph.svg, summary.md.

Exit status: 0 fine, 1 mandatory policy violation, 2 config error (stack or policy config),
3 program error, 4 policy pack failed to run.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional

# The wire format's marker keys (secrets, unknowns, resource refs), for turning inputs into plain JSON.
from pulumi.runtime import rpc

from tools.cli import ROOT

EXIT_OK, EXIT_VIOLATION, EXIT_CONFIG, EXIT_PROGRAM, EXIT_POLICY = 0, 1, 2, 3, 4

SECRET = "[secret]"
UNKNOWN = "[unknown until apply]"


class PreviewError(Exception):
    """An expected failure: printed as a message (no traceback) with its exit code."""

    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class PreviewResult:
    stack: str
    region: str
    out: Path
    run: Any  # tools.preview.mockrun.ProgramRun
    verdicts: list[Any]  # tools.preview.analyzer.Verdict
    pack: dict[str, Any]
    figures: dict[str, Any]
    resources: list[dict[str, Any]]  # what resources.json holds
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def mandatory(self) -> list[Any]:
        return [v for v in self.verdicts if v.enforcement == "mandatory"]

    @property
    def exit_code(self) -> int:
        return EXIT_VIOLATION if self.mandatory else EXIT_OK


def _stderr_progress(message: str) -> None:
    print(f"[preview] {message}", file=sys.stderr, flush=True)


# -- inputs as plain JSON ------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """Wire-format value -> JSON: secrets "[secret]", unknowns marked, resource refs as URNs."""
    if isinstance(value, dict):
        sig = value.get(rpc._special_sig_key)
        if sig == rpc._special_secret_sig:
            return SECRET
        if sig == rpc._special_resource_sig:
            return value.get("urn", "")
        if sig == rpc._special_output_value_sig:
            if value.get("secret"):
                return SECRET
            return plain(value["value"]) if "value" in value else UNKNOWN
        if sig == rpc._special_asset_sig or sig == rpc._special_archive_sig:
            return {k: plain(v) for k, v in value.items() if k != rpc._special_sig_key}
        return {k: plain(value[k]) for k in sorted(value)}  # wire maps are unordered: sort, for stable diffs
    if isinstance(value, list):
        return [plain(v) for v in value]
    if value == rpc.UNKNOWN:
        return UNKNOWN
    if isinstance(value, float) and value.is_integer():
        return int(value)  # protobuf carries every number as a double
    return value


def resource_records(run: Any) -> list[dict[str, Any]]:
    """Every registration as resources.json holds it, sorted by URN (registration order is async)."""
    from google.protobuf import json_format

    records = []
    for r in sorted(run.resources, key=lambda r: r.urn):
        records.append(
            {
                "urn": r.urn,
                "type": r.type,
                "name": r.name,
                "parent": r.parent,
                "custom": r.custom,
                "protect": r.protect,
                "provider": r.provider,
                "dependencies": sorted(r.dependencies),
                "property_dependencies": {k: sorted(v) for k, v in sorted(r.property_dependencies.items())},
                "inputs": plain(json_format.MessageToDict(r.inputs_struct)),
            }
        )
    return records


# -- config --------------------------------------------------------------------------------------
def _use_root(root: Path) -> None:
    """Make `root`'s `components` the importable one; refuse to mix two checkouts in one process."""
    loaded_from = getattr(sys.modules.get("components"), "__file__", None)
    if loaded_from:
        where = Path(loaded_from).resolve().parent.parent
        if where != root.resolve():
            raise PreviewError(
                EXIT_PROGRAM,
                f"this process already imported components from {where}; preview {root} in a fresh process",
            )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


def read_config(stack: str, root: Path) -> tuple[dict[str, str], list[str], Any]:
    """(engine config, secret keys, validated StackConfig) for the stack; PreviewError if bad."""
    from tools.preview import mockrun

    try:
        engine_config, secret_keys = mockrun.load_stack_config(stack, root)
    except FileNotFoundError as error:
        raise PreviewError(EXIT_CONFIG, str(error)) from None
    except Exception as error:  # unreadable YAML
        raise PreviewError(EXIT_CONFIG, f"{mockrun.stack_file(stack, root).name}: {error}") from None
    try:
        from components import config as model
    except ImportError as error:
        raise PreviewError(EXIT_PROGRAM, f"{root} has no usable components/config.py: {error}") from None

    try:
        if hasattr(model, "validate_engine_config"):  # the one entry point for config in the engine's form
            config = model.validate_engine_config(engine_config, secret_keys)
        else:  # an older revision's config model (preview-diff), from before validate_engine_config
            prefix = f"{model.PROJECT}:"
            values = {k[len(prefix) :]: v for k, v in engine_config.items() if k.startswith(prefix)}
            if "secret_keys" in inspect.signature(model.validate_stack_config).parameters:
                config = model.validate_stack_config(values, engine_config.get("aws:region"), secret_keys)
            else:  # ... and from before secret-only keys existed
                config = model.validate_stack_config(values, engine_config.get("aws:region"))
    except model.ConfigError as error:
        problems = "\n".join(f"  - {p}" for p in error.problems)
        raise PreviewError(
            EXIT_CONFIG,
            f"{mockrun.stack_file(stack, root).name}: {len(error.problems)} problem(s) in the stack config:"
            f"\n{problems}",
        ) from None
    return engine_config, secret_keys, config


# -- policy pack ---------------------------------------------------------------------------------
class _PackStarter:
    """Starts the analyzer process on a thread, so its start-up overlaps running the program."""

    def __init__(self, pack_dir: Path):
        from tools.preview.analyzer import PolicyPackServer

        self.server = PolicyPackServer(pack_dir=pack_dir)
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._start, name="policy-pack-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            self.server.start()
        except BaseException as error:  # reported by ready()
            self.error = error

    def ready(self) -> Any:
        self._thread.join()
        if self.error is not None:
            raise PreviewError(EXIT_POLICY, f"policy pack did not start: {self.error}")
        return self.server

    def close(self) -> None:
        self._thread.join()
        self.server.close()


def _program_error(error: BaseException, root: Path) -> PreviewError:
    """The program's exception as a message; frames inside the checkout (not the SDK) as context."""
    import pulumi

    if isinstance(error, pulumi.RunError):
        return PreviewError(EXIT_PROGRAM, f"the program failed: {error}")
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if f.filename.startswith(str(root)) and "/.venv/" not in f.filename
    ]
    where = "".join(f"\n    {Path(f.filename).relative_to(root)}:{f.lineno} in {f.name}: {f.line}" for f in frames[-4:])
    return PreviewError(EXIT_PROGRAM, f"the program failed: {type(error).__name__}: {error}{where}")


# -- the preview ---------------------------------------------------------------------------------
def preview(
    stack: str,
    root: Path = ROOT,
    out: Optional[Path] = None,
    policy_config: Optional[dict[str, Any]] = None,
    run: Any = None,
    progress: Callable[[str], None] = _stderr_progress,
) -> PreviewResult:
    """Run the whole preview and write its artifacts. Raises PreviewError on expected failures.

    `run` reuses an existing ProgramRun of the same stack and root (tests share one per stack).
    """
    root = Path(root).resolve()
    out = Path(out) if out is not None else root / "build" / "preview" / stack
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    _use_root(root)
    progress(f"reading {stack} config (Pulumi.{stack}.yaml)…")
    engine_config, secret_keys, config = read_config(stack, root)
    timings["config"] = time.perf_counter() - t0

    pack_dir = root / "policies"
    starter = None
    if (pack_dir / "PulumiPolicy.yaml").exists():
        progress("starting the policy pack (analyzer plugin) in the background…")
        starter = _PackStarter(pack_dir)
    try:
        if run is None:
            progress("running the program under the mock runtime…")
            from tools.preview.mockrun import run_program

            t = time.perf_counter()
            try:
                run = run_program(stack, engine_config, secret_keys, root=root)
            except Exception as error:
                raise _program_error(error, root) from None
            timings["program"] = time.perf_counter() - t
        progress(f"recorded {len(run.resources)} registrations")

        verdicts: list[Any] = []
        pack: dict[str, Any] = {"name": None, "policies": 0, "status": "no policy pack in this checkout"}
        if starter is not None:
            progress("serving the policy pack over the analyzer protocol…")
            t = time.perf_counter()
            server = starter.ready()
            from tools.preview.analyzer import analyze_run

            try:
                verdicts = analyze_run(run, policy_config, server=server)
            except ValueError as error:  # a policy config the pack refuses
                raise PreviewError(EXIT_CONFIG, f"policy config: {error}") from None
            except Exception as error:
                raise PreviewError(EXIT_POLICY, f"policy pack failed: {error}\n{server.stderr}") from None
            info = server.info()
            pack = {"name": info.name, "version": info.version, "policies": len(info.policies), "status": "ran"}
            timings["policies"] = time.perf_counter() - t
    finally:
        if starter is not None:
            starter.close()

    progress("computing figures and writing artifacts…")
    from tools.preview.figures import key_figures

    t = time.perf_counter()
    figures = key_figures(run, config, config.region)
    result = PreviewResult(stack, config.region, out, run, verdicts, pack, figures, resource_records(run), timings)
    write_artifacts(result)
    timings["artifacts"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    return result


# -- rendering -----------------------------------------------------------------------------------
def _count_types(regs: list[Any]) -> str:
    from tools.preview.graph import short_type

    counts = Counter(short_type(r.type) for r in regs)
    return ", ".join(f"{t} ×{n}" if n > 1 else t for t, n in sorted(counts.items()))


def component_rows(run: Any) -> list[tuple[int, Any, list[Any]]]:
    """(depth, component, its descendants that are not themselves containers) in tree order."""
    from tools.preview.graph import children_by_parent, parents_with_children, top_level

    containers = parents_with_children(run)
    children = children_by_parent(run)

    def descendants(urn: str) -> list[Any]:
        found = []
        for c in children.get(urn, []):
            if c.urn not in containers:
                found.append(c)
            found.extend(descendants(c.urn))
        return found

    rows: list[tuple[int, Any, list[Any]]] = []

    def walk(r: Any, depth: int) -> None:
        rows.append((depth, r, descendants(r.urn) if r.urn in containers else [r]))
        for c in sorted(children.get(r.urn, []), key=lambda c: c.name):
            if c.urn in containers:
                walk(c, depth + 1)

    for r in top_level(run):
        walk(r, 0)
    return rows


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def figure_lines(figures: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs shared by the terminal report and summary.md."""
    rows: list[tuple[str, str]] = []
    gpu = figures.get("gpu")
    if gpu:
        n = gpu["nodes"]
        rows.append(("GPU availability zone", ", ".join(gpu["availability_zones"]) or "?"))
        rows.append(("GPU nodes", f"{n['desired']} × {gpu['instance_type']} (min {n['min']}, max {n['max']})"))
        rows.append(("EFA interfaces per GPU node", str(gpu["efa_interfaces_per_node"])))
    else:
        rows.append(("GPU nodes", "none in the plan"))
    others = [g for g in figures["node_groups"] if not g["gpu"]]
    for g in others:
        rows.append(
            (
                f"node group {g['name']}",
                f"{g['desired_size']} × {g['instance_type']} (min {g['min_size']}, max {g['max_size']})",
            )
        )
    rows.append(("NAT gateways", str(figures["nat_gateways"])))
    cost = figures["cost"]
    if cost["lines"]:
        detail = " + ".join(f"{line['quantity']}×{line['item']}" for line in cost["lines"])
        missing = f"; no price for {', '.join(cost['missing'])}" if cost["missing"] else ""
        rows.append(
            (
                "Estimated cost",
                f"{_money(cost['hourly'])}/hour · {_money(cost['monthly'])}/month "
                f"({detail}; {_money(cost['at_max_size_hourly'])}/hour at max size){missing}",
            )
        )
        rows.append(
            (
                "",
                f"approximate public on-demand list prices, {cost['region']}, as of {cost['prices_as_of']} "
                "(tools/data/prices.json); excludes EBS, data transfer, public IPv4",
            )
        )
    else:
        rows.append(("Estimated cost", f"n/a (no price for {', '.join(cost['missing'])})"))
    kv = figures["kv_transfer"]
    if kv["status"] == "ok":
        rows.append(
            (
                "KV-cache transfer",
                f"{kv['model_id']}, {kv['tokens']:,} tokens, kv_cache_dtype={kv['kv_cache_dtype']}: "
                f"{_bytes(kv['bytes'])} per request",
            )
        )
        rows.append(
            (
                "",
                f"EFA {kv['efa_gbps']:g} Gbit/s: {_ms(kv['efa_seconds'])} · single-flow TCP "
                f"{kv['tcp_gbps']:g} Gbit/s: {_ms(kv['tcp_seconds'])} ({kv['speedup']:.0f}× slower)",
            )
        )
    else:
        rows.append(("KV-cache transfer", f"n/a ({kv['reason']})"))
    return rows


def _resource_label(urn: str, by_urn: dict[str, Any]) -> str:
    r = by_urn.get(urn)
    if r is None:
        return urn or "(stack)"
    return f"{r.name} ({r.type})"


def render_text(result: PreviewResult) -> str:
    run = result.run
    by_urn = {r.urn: r for r in run.resources}
    protected = sum(1 for r in run.resources if r.protect)
    rows = component_rows(run)
    parents = {x.parent for x in run.resources}
    lines = [
        f"Offline preview of stack {result.stack} ({result.region}) — mock runtime, no cloud calls",
        "",
        f"Plan: {len(run.resources)} registrations, {sum(1 for _, r, _ in rows if r.urn in parents)} "
        f"components, {protected} protected",
        f"  {run.stack_outputs.get('clusterName', result.stack)} (stack)",
    ]
    for i, (depth, comp, members) in enumerate(rows):
        later = [d for d, _, _ in rows[i + 1 :]]
        last = next((d for d in later if d <= depth), -1) < depth  # no later sibling at this depth
        branch = "└─" if last else "├─"
        indent = "  " + "   " * depth
        kind = comp.type.split(":")[-1]
        lines.append(f"{indent}{branch} {comp.name} [{kind}] {len(members)}: {_count_types(members)}")
    lines.append("")
    pack = result.pack
    if pack["status"] != "ran":
        lines.append(f"Policy verdicts: n/a ({pack['status']})")
    elif not result.verdicts:
        lines.append(f"Policy verdicts: none — {pack['name']} ({pack['policies']} policies) passed")
    else:
        lines.append(
            f"Policy verdicts ({pack['name']}, {pack['policies']} policies): "
            f"{len(result.mandatory)} mandatory, {len(result.verdicts) - len(result.mandatory)} other"
        )
        for v in sorted(result.verdicts, key=lambda v: (v.enforcement != "mandatory", v.policy, v.urn)):
            lines.append(f"  {v.enforcement.upper():<10} {v.policy}: {_resource_label(v.urn, by_urn)}")
            for part in v.message.strip().splitlines():
                lines.append(f"             {part}")
    lines.append("")
    lines.append("Key figures")
    for label, value in figure_lines(result.figures):
        lines.append(f"  {label:<28} {value}")
    lines.append("")
    lines.append(
        f"Artifacts in {_display(result.out)}: "
        "resources.json, report.json, manifests/, graph.dot, graph.svg, summary.md"
    )
    if result.mandatory:
        lines.append(f"RESULT: FAILED — {len(result.mandatory)} mandatory policy violation(s)")
    else:
        lines.append("RESULT: OK — no mandatory policy violations")
    return "\n".join(lines) + "\n"


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def render_summary(result: PreviewResult) -> str:
    """Markdown fit for a pull-request comment."""
    run = result.run
    by_urn = {r.urn: r for r in run.resources}
    status = (
        f"❌ **{len(result.mandatory)} mandatory policy violation(s)**"
        if result.mandatory
        else "✅ **no mandatory policy violations**"
    )
    out = [f"### Offline preview: stack `{result.stack}` ({result.region})", "", status, "", "| | |", "|---|---|"]
    out.append(
        f"| Resources | {len(run.resources)} registrations, {sum(1 for r in run.resources if r.protect)} protected |"
    )
    for label, value in figure_lines(result.figures):
        out.append(f"| {_md(label)} | {_md(value)} |")
    out += ["", "#### Policy verdicts", ""]
    if result.pack["status"] != "ran":
        out.append(f"n/a ({result.pack['status']})")
    elif not result.verdicts:
        out.append(f"None: `{result.pack['name']}` ({result.pack['policies']} policies) passed.")
    else:
        out += ["| Enforcement | Policy | Resource | Message |", "|---|---|---|---|"]
        for v in sorted(result.verdicts, key=lambda v: (v.enforcement != "mandatory", v.policy, v.urn)):
            out.append(
                f"| {v.enforcement} | `{v.policy}` | {_md(_resource_label(v.urn, by_urn))} | {_md(v.message.strip())} |"
            )
    out += ["", "#### Components", "", "| Component | Type | Resources |", "|---|---|---|"]
    for depth, comp, members in component_rows(run):
        out.append(
            f"| {'&nbsp;&nbsp;' * depth}{comp.name} | `{comp.type}` | {len(members)}: {_md(_count_types(members))} |"
        )
    out += [
        "",
        f"<details><summary>All {len(run.resources)} registrations</summary>",
        "",
        "| Name | Type | Parent | Protect |",
        "|---|---|---|---|",
    ]
    for rec in result.resources:
        parent = by_urn[rec["parent"]].name if rec["parent"] in by_urn else "(stack)"
        out.append(f"| {rec['name']} | `{rec['type']}` | {parent} | {'yes' if rec['protect'] else ''} |")
    out += [
        "",
        "</details>",
        "",
        "_Generated by `make preview` (mock runtime: no credentials, no cloud calls). Artifacts: "
        "resources.json, report.json, manifests/, graph.dot, graph.svg._",
        "",
    ]
    return "\n".join(out)


# -- artifacts -----------------------------------------------------------------------------------
def _yaml_dump(data: Any, **kwargs: Any) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> Any:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, **kwargs)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-").lower()


def manifests(records: list[dict[str, Any]]) -> dict[str, str]:
    """file name -> YAML for every `kubernetes:*` resource; a RayService's serveConfigV2 on its own."""
    files: dict[str, str] = {}
    for rec in records:
        if not rec["type"].startswith("kubernetes:"):
            continue
        inputs = rec["inputs"]
        if "apiVersion" in inputs and "kind" in inputs:
            doc = {k: inputs[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in inputs}
            doc.update({k: v for k, v in inputs.items() if k not in doc})
            base = f"{_slug(inputs['kind'])}-{_slug(rec['name'])}"
            files[f"{base}.yaml"] = f"# {rec['urn']}\n" + _yaml_dump(doc)
            serve = (inputs.get("spec") or {}).get("serveConfigV2") if isinstance(inputs.get("spec"), dict) else None
            if serve is not None:
                files[f"{base}.serve-config.yaml"] = f"# spec.serveConfigV2 of {rec['urn']}\n" + (
                    serve if isinstance(serve, str) else _yaml_dump(serve)
                )
        else:  # e.g. a Helm chart: its chart, version, repository and values
            files[f"{_slug(rec['type'].split(':')[-1])}-{_slug(rec['name'])}.yaml"] = (
                f"# {rec['urn']}\n# {rec['type']} inputs\n" + _yaml_dump(inputs)
            )
    return files


def write_artifacts(result: PreviewResult) -> None:
    from tools.preview.graph import to_dot, to_svg

    out = result.out
    if out.exists():
        shutil.rmtree(out)
    (out / "manifests").mkdir(parents=True)
    (out / "resources.json").write_text(json.dumps(result.resources, indent=2) + "\n")
    report = {
        "stack": result.stack,
        "region": result.region,
        "pack": result.pack,
        "verdicts": [asdict(v) for v in result.verdicts],
        "figures": result.figures,
        "resource_count": len(result.resources),
        "stack_outputs": plain(result.run.stack_outputs),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    docs = manifests(result.resources)
    for name, text in docs.items():
        (out / "manifests" / name).write_text(text)
    whole = [text for name, text in sorted(docs.items()) if not name.endswith(".serve-config.yaml")]
    (out / "manifests" / "all.yaml").write_text("---\n".join(whole))
    (out / "graph.dot").write_text(to_dot(result.run))
    (out / "graph.svg").write_text(to_svg(result.run))
    (out / "summary.md").write_text(render_summary(result))


# -- command line --------------------------------------------------------------------------------
def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.preview", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to preview (default: this one)")
    parser.add_argument("--out", type=Path, help="artifact directory (default: <root>/build/preview/<stack>)")
    parser.add_argument(
        "--policy-config", type=Path, help="JSON policy config, as `pulumi preview --policy-pack-config`"
    )
    parser.add_argument("--mermaid", action="store_true", help="print only the component diagram (README)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    progress = (lambda _m: None) if args.quiet else _stderr_progress
    try:
        policy_config = None
        if args.policy_config:
            try:
                policy_config = json.loads(args.policy_config.read_text())
            except (OSError, ValueError) as error:
                raise PreviewError(EXIT_CONFIG, f"policy config {args.policy_config}: {error}") from None
        if args.mermaid:
            from tools.preview.graph import component_mermaid
            from tools.preview.mockrun import run_program

            root = args.root.resolve()
            _use_root(root)
            engine_config, secret_keys, _ = read_config(args.stack, root)
            print(component_mermaid(run_program(args.stack, engine_config, secret_keys, root=root)), end="")
            return EXIT_OK
        result = preview(args.stack, args.root, args.out, policy_config, progress=progress)
    except PreviewError as error:
        print(f"error: {error}", file=sys.stderr)
        print(f"RESULT: FAILED (exit {error.exit_code})", file=sys.stderr)
        return error.exit_code
    print(render_text(result), end="")
    progress("done in " + ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items()))
    return result.exit_code


def run_and_exit(argv: Optional[list[str]] = None) -> NoReturn:
    """`main` as a process of its own: `python -m tools.preview`, and each side of `tools.preview_diff`."""
    import gc

    # The preview allocates hundreds of thousands of objects importing the provider SDKs and never
    # frees much; the cyclic collector only costs time here (~20% of a run), so it is switched off.
    gc.disable()
    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown (tens of thousands of SDK objects, and asyncio loop finalisers that
    # complain once gc is off): everything is written and the policy process is already closed.
    os._exit(code)


if __name__ == "__main__":
    run_and_exit()
