"""The vLLM facts the tests judge by (tests/data/vllm/), read from a released vLLM wheel's source.

    python -m llm_pd_eks_tools.maint.gen_vllm_facts [--version 0.26.0] [--wheel PATH] [--out tests/data/vllm]

The wheel is read as a zip and its modules parsed with `ast`; vllm is never imported (it needs torch and
a GPU stack the tools do not install). Without --wheel the wheel of `--version` (default: the DLC's vLLM,
llm_pd_eks/versions.py) is downloaded from PyPI with pip (`make facts`; the tests never download).

What is read, each from the file named:
- engine-args-<v>.json: the dataclass fields of `EngineArgs` (vllm/engine/arg_utils.py), of
  `KVTransferConfig` (vllm/config/kv_transfer.py) and the settable ones of `CompilationConfig`
  (vllm/config/compilation.py: `field(init=False)` left out, as the config refuses them), the
  `KVRole` literals there (`KVProducer` / `KVConsumer`), the connector names
  `KVConnectorFactory.register_connector` registers (vllm/distributed/kv_transfer/kv_connector/factory.py),
  the `CacheDType` literals (vllm/config/cache.py),
  and the `kv_connector_extra_config` key NIXL's worker reads its backends from (the
  `self.nixl_backends = ....get_from_extra_config("<key>", ...)` assignment under .../v1/nixl/),
  and the attributes vLLM's `init_app_state` sets on the app state (every `state.<name> = ...` under
  vllm/entrypoints/), which Ray Serve LLM's engine reads its serving objects from, and where a
  non-data-parallel engine's torch.distributed store port scan starts and how far it goes
  (`RayExecutorV2._select_tcpstore_port` in vllm/v1/executor/ray_executor_v2.py, with
  VLLM_DP_MASTER_PORT's default from vllm/envs.py);
- metrics-<v>.json: every `self._{gauge,counter,histogram}_cls(name="vllm:...")` call in
  vllm/v1/metrics/loggers.py and the NIXL connector's stats (.../v1/nixl/stats.py): name, type, file;
  and the literal bucket bounds of vllm:time_to_first_token_seconds and vllm:inter_token_latency_seconds.
The SOURCE note beside them names the wheel, its sha256 and the date; another release's facts files
there are removed.
"""

from __future__ import annotations

import ast
import datetime
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Iterator, Optional

from llm_pd_eks import versions
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, exit_with, one_line
from llm_pd_eks_tools.core.io_safety import atomic_write

PROG = "gen_vllm_facts"
OUT = ROOT / "tests" / "data" / "vllm"
ARG_UTILS = "vllm/engine/arg_utils.py"
KV_TRANSFER = "vllm/config/kv_transfer.py"
CACHE = "vllm/config/cache.py"
COMPILATION = "vllm/config/compilation.py"
FACTORY = "vllm/distributed/kv_transfer/kv_connector/factory.py"
NIXL_DIR = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/"
LOGGERS = "vllm/v1/metrics/loggers.py"
ENTRYPOINTS = "vllm/entrypoints/"
NIXL_STATS = NIXL_DIR + "stats.py"
RAY_EXECUTOR = "vllm/v1/executor/ray_executor_v2.py"
ENVS = "vllm/envs.py"
BUCKETED = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds")
METRIC_CLASSES = {"_gauge_cls": "gauge", "_counter_cls": "counter", "_histogram_cls": "histogram"}


class Wheel:
    """A wheel's modules as parsed syntax trees."""

    def __init__(self, path: Path):
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())

    def tree(self, name: str) -> ast.Module:
        if name not in self.names:
            raise ToolError(Exit.FAILED, f"{self.path.name} has no {name}; the generator needs updating")
        return ast.parse(self.zip.read(name).decode("utf-8"), filename=name)

    def under(self, prefix: str) -> list[str]:
        return sorted(n for n in self.names if n.startswith(prefix) and n.endswith(".py"))


def _class(tree: ast.Module, name: str, where: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise ToolError(Exit.FAILED, f"{where}: no class {name}")


def dataclass_fields(tree: ast.Module, name: str, where: str, settable: bool = False) -> list[str]:
    """The annotated assignments of a class body (its dataclass fields), ClassVars left out; with
    `settable`, also those declared `field(..., init=False)` (a constructor argument cannot set them)."""
    fields = []
    for node in _class(tree, name, where).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" in ast.unparse(node.annotation):
                continue
            if settable and _init_false(node.value):
                continue
            fields.append(node.target.id)
    return sorted(fields)


def _init_false(value: Optional[ast.expr]) -> bool:
    return (
        isinstance(value, ast.Call)
        and ast.unparse(value.func).endswith("field")
        and any(
            k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False for k in value.keywords
        )
    )


def literal_field(tree: ast.Module, name: str, field: str, where: str) -> dict[str, Any]:
    """A class field annotated `Literal[...]` with a literal default: its values and its default."""
    for node in _class(tree, name, where).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == field:
            annotation = node.annotation
            if not (isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value).endswith("Literal")):
                raise ToolError(Exit.FAILED, f"{where}: {name}.{field} is {ast.unparse(annotation)}, not a Literal")
            values = ast.literal_eval(annotation.slice)
            default = ast.literal_eval(node.value) if node.value is not None else None
            return {"values": list(values) if isinstance(values, tuple) else [values], "default": default}
    raise ToolError(Exit.FAILED, f"{where}: no field {name}.{field}")


def _assignments(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level `NAME = value` assignments."""
    out: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def literal_values(tree: ast.Module, name: str, where: str) -> list[str]:
    """The strings of `name = Literal[...]`, nested Literal aliases flattened and deduplicated in order,
    as `typing.get_args` returns them."""
    assigned = _assignments(tree)

    def flatten(expr: ast.expr) -> Iterator[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            yield expr.value
        elif isinstance(expr, ast.Name) and expr.id in assigned:
            yield from flatten(assigned[expr.id])
        elif isinstance(expr, ast.Subscript) and ast.unparse(expr.value) in ("Literal", "typing.Literal"):
            items = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            for item in items:
                yield from flatten(item)
        else:
            raise ToolError(Exit.FAILED, f"{where}: {name} holds {one_line(ast.unparse(expr), 80)}, not a Literal")

    if name not in assigned:
        raise ToolError(Exit.FAILED, f"{where}: no {name} = Literal[...]")
    return list(dict.fromkeys(flatten(assigned[name])))


def registered_connectors(tree: ast.Module) -> list[str]:
    names = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "register_connector"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }
    if not names:
        raise ToolError(Exit.FAILED, f"{FACTORY}: no register_connector(...) call")
    return sorted(names)


def nixl_backends_key(wheel: Wheel) -> str:
    """The extra-config key of `self.nixl_backends = <...>.get_from_extra_config("<key>", default)`."""
    keys = set()
    for name in wheel.under(NIXL_DIR):
        for node in ast.walk(wheel.tree(name)):
            if (
                isinstance(node, (ast.Assign, ast.AnnAssign))
                and any(isinstance(t, ast.Attribute) and t.attr == "nixl_backends" for t in _targets(node))
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "get_from_extra_config"
                and node.value.args
                and isinstance(node.value.args[0], ast.Constant)
            ):
                keys.add(str(node.value.args[0].value))
    if len(keys) != 1:
        raise ToolError(Exit.FAILED, f"{NIXL_DIR}: expected one nixl_backends extra-config key, found {sorted(keys)}")
    return str(keys.pop())


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return list(node.targets) if isinstance(node, ast.Assign) else [node.target]


def metrics(wheel: Wheel) -> dict[str, Any]:
    """{"buckets": {name: bounds}, "metrics": {name: {"file", "type"}}} from the metric constructor calls."""
    found: dict[str, dict[str, str]] = {}
    buckets: dict[str, list[float]] = {}
    for name in (LOGGERS, NIXL_STATS):
        for node in ast.walk(wheel.tree(name)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            kind = METRIC_CLASSES.get(node.func.attr)
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            constant = keywords.get("name")
            metric = constant.value if isinstance(constant, ast.Constant) else None
            if kind is None or not (isinstance(metric, str) and metric.startswith("vllm:")):
                continue
            if found.setdefault(metric, {"file": name, "type": kind})["type"] != kind:
                raise ToolError(Exit.FAILED, f"{name}: {metric} is defined twice with different types")
            if metric in BUCKETED:
                try:
                    buckets[metric] = [float(b) for b in ast.literal_eval(keywords["buckets"])]
                except (KeyError, ValueError) as error:
                    raise ToolError(Exit.FAILED, f"{name}: {metric} has no literal buckets ({error})") from None
    missing = [m for m in BUCKETED if m not in buckets]
    if missing:
        raise ToolError(Exit.FAILED, f"{LOGGERS}: no literal buckets for {', '.join(missing)}")
    return {"buckets": dict(sorted(buckets.items())), "metrics": dict(sorted(found.items()))}


def app_state_attributes(wheel: Wheel) -> list[str]:
    """Every `state.<name> = ...` under vllm/entrypoints/: the serving objects `init_app_state` (and the
    factories it calls) put on the app state."""
    names = {
        target.attr
        for module in wheel.under(ENTRYPOINTS)
        if module.endswith(".py")
        for node in ast.walk(wheel.tree(module))
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in _targets(node)
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "state"
    }
    if not names:
        raise ToolError(Exit.FAILED, f"{ENTRYPOINTS}: no `state.<name> = ...` assignments; did init_app_state move?")
    return sorted(names)


def _int_constants(node: ast.AST) -> list[int]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and type(n.value) is int]


def tcpstore_scan(wheel: Wheel) -> dict[str, int]:
    """Where `_select_tcpstore_port` starts a non-DP engine's scan (`start_port = master_port + <offset>
    + local_dp_rank * window`, local rank 0) and its `window`, with VLLM_DP_MASTER_PORT's default: the
    ports engines starting together on one host race for."""
    select = next(
        (
            n
            for n in ast.walk(wheel.tree(RAY_EXECUTOR))
            if isinstance(n, ast.FunctionDef) and n.name == "_select_tcpstore_port"
        ),
        None,
    )
    if select is None:
        raise ToolError(Exit.FAILED, f"{RAY_EXECUTOR}: no _select_tcpstore_port; the generator needs updating")
    assigned = {
        t.id: node.value
        for node in ast.walk(select)
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    window, offsets = (
        _int_constants(assigned.get("window", ast.Pass())),
        _int_constants(assigned.get("start_port", ast.Pass())),
    )
    getenv = [
        [a.value for a in node.args if isinstance(a, ast.Constant)]
        for node in ast.walk(wheel.tree(ENVS))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "os.getenv"
    ]
    defaults = [str(args[1]) for args in getenv if len(args) == 2 and args[0] == "VLLM_DP_MASTER_PORT"]
    if len(window) != 1 or len(offsets) != 1 or len(set(defaults)) != 1:
        raise ToolError(Exit.FAILED, f"{RAY_EXECUTOR}: the TCPStore scan is not `window = N` and `+ N`; read it again")
    master = int(defaults[0])
    return {
        "dp_master_port_default": master,
        "offset": offsets[0],
        "window": window[0],
        "first_port": master + offsets[0],
    }


def engine_args(wheel: Wheel) -> dict[str, Any]:
    kv = wheel.tree(KV_TRANSFER)
    return {
        "engine_args_fields": dataclass_fields(wheel.tree(ARG_UTILS), "EngineArgs", ARG_UTILS),
        "kv_transfer_config_fields": dataclass_fields(kv, "KVTransferConfig", KV_TRANSFER),
        # engine_kwargs.compilation_config is built into this config (EngineArgs.__post_init__)
        "compilation_config_fields": dataclass_fields(
            wheel.tree(COMPILATION), "CompilationConfig", COMPILATION, settable=True
        ),
        "kv_roles": literal_values(kv, "KVRole", KV_TRANSFER),
        # what a decode replica does when a KV read fails (vllm/v1/core/sched/scheduler.py reads it)
        "kv_load_failure_policy": literal_field(kv, "KVTransferConfig", "kv_load_failure_policy", KV_TRANSFER),
        "kv_connectors": registered_connectors(wheel.tree(FACTORY)),
        "cache_dtypes": literal_values(wheel.tree(CACHE), "CacheDType", CACHE),
        "nixl_backends_extra_config_key": nixl_backends_key(wheel),
        "app_state_attributes": app_state_attributes(wheel),
        "tcpstore_scan": tcpstore_scan(wheel),
    }


def wheel_version(wheel: Wheel) -> tuple[str, str]:
    """(`__version__`, `__commit_id__`) of vllm/_version.py."""
    assigned = {
        t.id: node.value
        for node in wheel.tree("vllm/_version.py").body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    values = {k: v.value for k, v in assigned.items() if isinstance(v, ast.Constant)}
    return str(values.get("__version__", "?")), str(values.get("__commit_id__", "?"))


def source_note(wheel: Path, version: str, commit: str, today: str) -> str:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return (
        f"engine-args-{version}.json and metrics-{version}.json: generated by "
        "llm_pd_eks_tools/maint/gen_vllm_facts.py\n"
        f"(make facts) from the wheel {wheel.name} on PyPI (vllm/_version.py {version}, commit {commit};\n"
        f"wheel sha256 {digest}), read with ast, vllm never imported. Generated {today}.\n"
        f"vLLM {version} is the engine the AWS Ray LLM DLC carries (llm_pd_eks/versions.py DLC_VLLM_VERSION).\n"
        "\n"
        f'metrics-{version}.json: every `self._{{gauge,counter,histogram}}_cls(name="vllm:...")` call in\n'
        f"{LOGGERS} and {NIXL_STATS}: name, type, defining file; the literal\n"
        "bucket bounds of vllm:time_to_first_token_seconds and vllm:inter_token_latency_seconds.\n"
        "Use: tests/unit/test_metric_names.py judges llm_pd_eks/metrics.py by it.\n"
        "\n"
        f"engine-args-{version}.json: the dataclass fields of `EngineArgs` ({ARG_UTILS}),\n"
        f"`KVTransferConfig` ({KV_TRANSFER}) and `CompilationConfig` ({COMPILATION}, its\n"
        "`field(init=False)` ones left out), the `KVRole` literals and `kv_load_failure_policy`'s values\n"
        "and default there, the connector names\n"
        f"registered in {FACTORY}, the `CacheDType` literals ({CACHE}),\n"
        "and the `kv_connector_extra_config` key NIXL's worker reads its backends from\n"
        f'(`self.nixl_backends = ...get_from_extra_config("<key>", ...)` under {NIXL_DIR}),\n'
        f"and the app-state attributes vLLM sets (every `state.<name> = ...` under {ENTRYPOINTS}),\n"
        f"and the TCPStore port scan of a non-DP engine (`_select_tcpstore_port`, {RAY_EXECUTOR};\n"
        f"VLLM_DP_MASTER_PORT's default from {ENVS}).\n"
        "Use: tests/stack/test_ray_service.py, tests/integration/test_real_run.py, "
        "tests/stack/test_real_run_prefix.py,\n"
        "tests/stack/test_routing.py.\n"
    )


def download(version: str, into: Path) -> Path:
    """The manylinux x86-64 wheel of vllm==`version` from PyPI (pip, no dependencies)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    command += ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.12", f"vllm=={version}", "-d", str(into)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    wheels = sorted(into.glob(f"vllm-{version}-*.whl"))
    if done.returncode != 0 or not wheels:
        raise ToolError(
            Exit.UNVERIFIED, f"could not download vllm=={version} ({one_line(done.stderr or done.stdout, 200)})"
        )
    return wheels[0]


def dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1) + "\n"


def generate(wheel_path: Path, out: Path, today: Optional[str] = None) -> list[Path]:
    """Write engine-args-<v>.json, metrics-<v>.json and SOURCE for the wheel at `wheel_path` into `out`."""
    wheel = Wheel(wheel_path)
    version, commit = wheel_version(wheel)
    out.mkdir(parents=True, exist_ok=True)
    written = {
        out / f"engine-args-{version}.json": dump(engine_args(wheel)),
        out / f"metrics-{version}.json": dump(metrics(wheel)),
        out / "SOURCE": source_note(wheel_path, version, commit, today or datetime.date.today().isoformat()),
    }
    for path, text in written.items():
        atomic_write(path, text)
    # The tests read the facts of the DLC's vLLM only; another release's files would be facts nothing checks.
    for stale in [*out.glob("engine-args-*.json"), *out.glob("metrics-*.json")]:
        if stale not in written:
            stale.unlink()
    return list(written)


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog=f"python -m llm_pd_eks_tools.{PROG}", description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=versions.DLC_VLLM_VERSION, help="vLLM release (default: the DLC's)")
    parser.add_argument("--wheel", type=Path, help="a downloaded vllm wheel (default: download --version)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the facts go (default tests/data/vllm)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or download(args.version, Path(tmp))
        if not zipfile.is_zipfile(wheel):
            raise ToolError(Exit.USAGE, f"--wheel {wheel}: not a wheel (zip) file")
        for path in generate(wheel, args.out):
            print(f"{PROG}: wrote {path}")
    return Exit.OK


if __name__ == "__main__":
    exit_with(PROG, main)
