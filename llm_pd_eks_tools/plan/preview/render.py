"""What a preview shows people: the terminal report, summary.md (the PR comment), manifests/, graph.dot.

Everything here renders a finished `PreviewResult` (llm_pd_eks_tools.plan.preview.harness); numbers and text go
through `llm_pd_eks_tools.plan.preview.fmt`, so the terminal, summary.md and the diff say the same thing the same way.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_pd_eks_tools.core.io_safety import atomic_write
from llm_pd_eks_tools.plan.preview import fmt, left_behind
from llm_pd_eks_tools.plan.preview.fmt import MOCK_PREFIX
from llm_pd_eks_tools.plan.preview.report import Figures, PreviewResult

if TYPE_CHECKING:  # pragma: no cover
    from llm_pd_eks_tools.core.cli import ToolError
    from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration

ARTIFACT_LIST = "resources.json, report.json, manifests/, graph.dot, graphs/, summary.md"


# -- rendering -----------------------------------------------------------------------------------
def _count_types(regs: list["Registration"]) -> str:
    from llm_pd_eks_tools.plan.preview.graph import short_type

    counts = Counter(short_type(r.type) for r in regs)
    return ", ".join(f"{t} ×{n}" if n > 1 else t for t, n in sorted(counts.items()))


def component_rows(run: "ProgramRun") -> list[tuple[int, "Registration", list["Registration"]]]:
    """(depth, component, its descendants that are not themselves containers) in tree order."""
    from llm_pd_eks_tools.plan.preview.graph import children_by_parent, parents_with_children, top_level

    containers = parents_with_children(run)
    children = children_by_parent(run)

    def descendants(urn: str) -> list["Registration"]:
        found = []
        for c in children.get(urn, []):
            if c.urn not in containers:
                found.append(c)
            found.extend(descendants(c.urn))
        return found

    rows: list[tuple[int, "Registration", list["Registration"]]] = []

    def walk(r: "Registration", depth: int) -> None:
        rows.append((depth, r, descendants(r.urn) if r.urn in containers else [r]))
        for c in sorted(children.get(r.urn, []), key=lambda c: c.name):
            if c.urn in containers:
                walk(c, depth + 1)

    for r in top_level(run):
        walk(r, 0)
    return rows


def figure_lines(figures: Figures) -> list[tuple[str, str]]:
    """(label, value) pairs shared by the terminal report and summary.md."""
    rows = _node_rows(figures) + _cost_rows(figures) + _kv_rows(figures)
    if figures.routing:
        rows.append(("Request routing", figures.routing.removeprefix("routing: ")))
    return rows + _weights_rows(figures)


def _node_rows(figures: Figures) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    gpu = figures.gpu
    if gpu:
        rows.append(("GPU availability zone", ", ".join(gpu.availability_zones) or "?"))
        rows.append(
            (
                "GPU nodes",
                f"{gpu.desired_size} × {gpu.instance_type} (min {gpu.min_size}, max {gpu.max_size})",
            )
        )
        rows.append(("EFA interfaces per GPU node", str(gpu.efa_interfaces)))
    else:
        rows.append(("GPU nodes", "none in the plan"))
    for g in figures.node_groups:
        if g.gpu:
            continue
        rows.append(
            (
                f"node group {g.name}",
                f"{g.desired_size} × {g.instance_type} (min {g.min_size}, max {g.max_size})",
            )
        )
    rows.append(("NAT gateways", str(figures.nat_gateways)))
    return rows


def _cost_rows(figures: Figures) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    cost = figures.cost
    if cost.priced:
        detail = " + ".join(f"{line.quantity}×{line.item}" for line in cost.lines)
        missing = f"; no price for {', '.join(cost.missing)}" if cost.missing else ""
        rows.append(
            (
                "Estimated cost",
                f"{fmt.money(cost.hourly)}/hour · {fmt.money(cost.monthly)}/month "
                f"({detail}; {fmt.money(cost.at_max_size_hourly)}/hour at max size){missing}",
            )
        )
        rows.append(
            (
                "",
                f"approximate public on-demand list prices, {cost.region}, as of {cost.prices_as_of} "
                "(llm_pd_eks/data/prices.json); excludes EBS, data transfer, public IPv4",
            )
        )
        sized = figures.sized
        if sized.get("status") == "ok" and sized.get("usd_per_mtok") is not None:
            rows.append(
                (
                    "",
                    f"{fmt.money(sized['usd_per_mtok'])} per million output tokens at the sized throughput "
                    f"({sized['output_tokens_s']:,.0f} tokens/s, {sized['workload']}) with the GPU nodes as configured"
                    + (f"; make size: {sized['sized_nodes']} GPU node(s)" if sized.get("sized_nodes") else ""),
                )
            )
            rec = sized.get("recommended")
            if rec and rec.get("usd_per_mtok") is not None:  # the layout make size recommends, priced beside it
                rows.append(
                    (
                        "",
                        f"make size recommends {rec['mode']} on {rec['nodes']} GPU node(s): "
                        f"{fmt.money(rec['hourly'])}/hour, {fmt.money(rec['usd_per_mtok'])} per million output tokens, "
                        f"{fmt.money(rec['usd_per_mtok_total'])} per million input + output tokens "
                        f"(configured: {fmt.money(sized.get('usd_per_mtok_total'))} per million input + output); "
                        f"{sized.get('cost_basis', '')}"
                        + (f"; constants from {sized['calibration']}" if sized.get("calibration") else ""),
                    )
                )
    else:
        rows.append(("Estimated cost", f"n/a (no price for {', '.join(cost.missing)})"))
    return rows


def _kv_rows(figures: Figures) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    kv = figures.kv_transfer
    if kv.ok:
        rows.append(
            (
                "KV-cache transfer",
                f"{kv.model_id}, {kv.tokens:,} tokens, kv_cache_dtype={kv.kv_cache_dtype}: "
                f"{fmt.size(kv.bytes)} per request",
            )
        )
        band = figures.kv_band
        if band.get("status") == "ok":  # line rate · measured NIXL/EFA · single-flow TCP (llm_pd_eks_sizing/model/)
            # imported here, when figures are written: the sizing model imports the library, which a preview
            # imports only once its checkout is chosen (harness.use_root)
            from llm_pd_eks_sizing.model import band_text

            rows.append(("", band_text(band)))
        else:
            rows.append(
                (
                    "",
                    f"EFA {kv.efa_gbps:g} Gbit/s: {fmt.ms(kv.efa_seconds)} · single-flow TCP "
                    f"{kv.tcp_gbps:g} Gbit/s: {fmt.ms(kv.tcp_seconds)} ({kv.slowdown:.0f}× slower)",
                )
            )
    else:
        rows.append(("KV-cache transfer", f"n/a ({kv.reason})"))
    return rows


def _weights_rows(figures: Figures) -> list[tuple[str, str]]:
    weights = figures.weights
    if weights.get("status") == "ok":
        gb, nodes = weights["gb_per_node_cold_start"], weights["nodes_at_min"]
        if weights["nat_gb_saved_per_node_cold_start"]:
            text = (
                f"{gb:,.1f} GB per GPU node cold start from {weights['source']} through the VPC's S3 gateway "
                f"endpoint: {weights['nat_gb_saved_per_node_cold_start']:,.1f} GB of NAT traffic saved per node "
                f"({gb * nodes:,.1f} GB for the {nodes} node(s) at min)"
            )
        else:
            text = (
                f"{weights['nat_gb_per_node_cold_start']:,.1f} GB through the NAT gateway per GPU node cold start "
                f"(Hugging Face; {gb * nodes:,.1f} GB for the {nodes} node(s) at min); serving.weightsS3Uri "
                "loads them over the S3 gateway endpoint instead"
            )
        return [("Weights", f"{weights['model_id']}: {text}")]
    return []


def _resource_label(urn: str, by_urn: dict[str, "Registration"]) -> str:
    r = by_urn.get(urn)
    if r is None:
        return urn or "(stack)"
    return fmt.resource_label(r.name, r.type)


def render_text(result: "PreviewResult") -> str:
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
    pack = result.report.pack
    if not pack.ran:
        lines.append("Policy verdicts: n/a (no policy pack in this checkout)")
    elif not result.verdicts:
        lines.append(f"Policy verdicts: none — {pack.name} ({pack.policies} policies) passed")
    else:
        lines.append(
            f"Policy verdicts ({pack.name}, {pack.policies} policies): "
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
    lines += left_behind.lines(result.resources)
    lines.append("")
    lines.append(f"Artifacts in {_display(result.out)}: {ARTIFACT_LIST}")
    lines += result.warnings
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


def render_summary(result: "PreviewResult") -> str:
    """Markdown fit for a pull-request comment."""
    cell = fmt.md_cell
    run = result.run
    by_urn = {r.urn: r for r in run.resources}
    status = (
        f"❌ **{len(result.mandatory)} mandatory policy violation(s)**"
        if result.mandatory
        else "✅ **no mandatory policy violations**"
    )
    out = [f"### Offline preview: stack `{result.stack}` ({result.region})", "", status, ""]
    if result.warnings:  # a GitHub callout: the stack still carries example values
        out += ["> [!WARNING]", *(f"> {cell(line.strip())}<br>" for line in result.warnings), ""]
    out += ["| | |", "|---|---|"]
    out.append(
        f"| Resources | {len(run.resources)} registrations, {sum(1 for r in run.resources if r.protect)} protected |"
    )
    for label, value in figure_lines(result.figures):
        out.append(f"| {cell(label)} | {cell(value)} |")
    head, *kept = left_behind.lines(result.resources)
    out += ["", f"#### {head}", "", *(f"- {cell(line.strip())}" for line in kept)]
    out += ["", "#### Policy verdicts", ""]
    pack = result.report.pack
    if not pack.ran:
        out.append("n/a (no policy pack in this checkout)")
    elif not result.verdicts:
        out.append(f"None: `{pack.name}` ({pack.policies} policies) passed.")
    else:
        out += ["| Enforcement | Policy | Resource | Message |", "|---|---|---|---|"]
        for v in sorted(result.verdicts, key=lambda v: (v.enforcement != "mandatory", v.policy, v.urn)):
            out.append(
                f"| {v.enforcement} | `{v.policy}` | {cell(_resource_label(v.urn, by_urn))} "
                f"| {cell(v.message.strip())} |"
            )
    out += ["", "#### Components", "", "| Component | Type | Resources |", "|---|---|---|"]
    for depth, comp, members in component_rows(run):
        out.append(
            f"| {'&nbsp;&nbsp;' * depth}{comp.name} | `{comp.type}` | {len(members)}: {cell(_count_types(members))} |"
        )
    out += _mermaid_sections(run)
    out += [
        "",
        f"<details><summary>All {len(run.resources)} registrations</summary>",
        "",
        "| Name | Type | Parent | Protect |",
        "|---|---|---|---|",
    ]
    for rec in result.resources:
        parent = by_urn[rec["parent"]].name if rec["parent"] in by_urn else "(stack)"
        out.append(f"| {cell(named(rec))} | `{rec['type']}` | {parent} | {'yes' if rec['protect'] else ''} |")
    out += [
        "",
        "</details>",
        "",
        "_Generated by `make preview` (mock runtime: no credentials, no cloud calls; IDs shown as "
        f"`{MOCK_PREFIX}…]` are the mock's, not AWS's). Artifacts: {ARTIFACT_LIST}._",
        "",
    ]
    return "\n".join(out)


def _mermaid_sections(run: "ProgramRun") -> list[str]:
    """The dependency graph as GitHub renders it: the component overview, then one chart per component."""
    from llm_pd_eks_tools.plan.preview.graph import component_graphs, component_mermaid, short_type

    out = ["", "#### Graph", "", component_mermaid(run).rstrip("\n")]
    for comp, chart in component_graphs(run):
        out += [
            "",
            f"<details><summary>{comp.name} ({short_type(comp.type)})</summary>",
            "",
            chart.rstrip("\n"),
            "",
            "</details>",
        ]
    return out


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


def write_artifacts(result: "PreviewResult") -> None:
    """Everything under the artifact directory; report.json is the `Report` model, nothing else."""
    from llm_pd_eks_tools.plan.preview.graph import component_dots, to_dot

    out = result.out
    (out / "manifests").mkdir(parents=True, exist_ok=True)
    atomic_write(out / "resources.json", json.dumps(result.resources, indent=2) + "\n")
    result.report.write(out / "report.json")
    docs = manifests(result.resources)
    for name, text in docs.items():
        atomic_write(out / "manifests" / name, text)
    whole = [text for name, text in sorted(docs.items()) if not name.endswith(".serve-config.yaml")]
    atomic_write(out / "manifests" / "all.yaml", "---\n".join(whole))
    atomic_write(out / "graph.dot", to_dot(result.run))
    (out / "graphs").mkdir(exist_ok=True)
    for name, dot in component_dots(result.run).items():  # one screen-sized view per component
        atomic_write(out / "graphs" / name, dot)
    atomic_write(out / "summary.md", render_summary(result))


# -- names and failures -------------------------------------------------------------------------
def named(rec: dict[str, Any]) -> str:
    """A registration's Pulumi name, with the name Kubernetes (or AWS) will know it by when that differs."""
    inputs = rec.get("inputs") or {}
    metadata = inputs.get("metadata")
    physical = metadata.get("name") if isinstance(metadata, dict) else None
    if physical is None and rec["type"].startswith("kubernetes:helm.sh/"):
        physical = inputs.get("name")
    if isinstance(physical, str) and physical and physical != rec["name"]:
        kind = "Kubernetes" if rec["type"].startswith("kubernetes:") else "AWS"
        return f"{rec['name']} ({kind} name `{physical}`)"
    return str(rec["name"])


def write_failure_summary(out: Path, stack: str, error: "ToolError") -> None:
    """A summary.md that says the preview failed, in place of the last run's (the PR comment posts it)."""
    from llm_pd_eks_tools.core.cli import ToolError

    message = str(error).strip()
    try:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(
            out / "summary.md",
            f"### Offline preview: stack `{stack}`\n\n❌ **the preview failed** (exit {error.exit_code})\n\n"
            f"```\n{message}\n```\n\n_Generated by `make preview`; no other artifacts were written._\n",
        )
    except (OSError, ToolError):
        pass  # the error itself was already reported on stderr
