"""`make size STACK=… WORKLOAD=file.yaml [WRITE=1]`: size a stack for a workload before `pulumi up`.

Prints, for the stack's model, GPU type and tensor-parallel layout: prefill and decode replicas and
nodes, the P:D ratio, GPUs, cost per hour and per million output tokens, the same workload served
aggregated, a verdict on whether disaggregation pays, and the KV-transfer band. The model is
`llm_pd_eks_sizing/model/`. `--write` puts the serving mode the verdict recommends (`serving.mode`),
that mode's sized replica bounds and the GPU node-group sizes into `Pulumi.<stack>.yaml` with
ruamel.yaml's round-trip mode, so comments and layout survive; the new file is validated as the
program would read it before it replaces the old one. It sizes only for the workload the preview
prices (`workloads/<stack>.yaml`), so the two never disagree about what was written.

Exit codes (llm_pd_eks_tools/core/cli.py): 0 the workload can be served on the stack's GPU type (disaggregated,
aggregated or both; the verdict says which pays); 1 neither layout meets the objectives (with `--write`
nothing is written); 2 a bad workload file, stack or argument, or `--write` with a workload other than
the one the preview prices.
"""

from __future__ import annotations

import argparse
import io
import json
import math
from pathlib import Path
from typing import Any, Optional

import yaml
from ruamel.yaml import YAML

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES, gpu_instance_type
from llm_pd_eks.config import PROJECT, ConfigError, validate_engine_config
from llm_pd_eks.models import MODELS
from llm_pd_eks_sizing.model import (
    COST_BASIS,
    MAX_WORKLOAD_BYTES,
    Plan,
    Sizing,
    Workload,
    band_text,
    parse_workload,
    point_query,
    size,
    tp_options,
)
from llm_pd_eks_sizing.size_routing import routing_lines
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, exit_with, one_line
from llm_pd_eks_tools.core.io_safety import atomic_write, read_regular_file
from llm_pd_eks_tools.core.stack import stack_config, stack_file
from llm_pd_eks_tools.core.stackfile import MAX_BYTES, engine_config, parse

PROG = "size"


def _ms(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def _money(value: Optional[float]) -> str:
    return "n/a (no price)" if value is None else f"${value:,.2f}"


def band_lines(band: Any) -> list[str]:
    """The KV band as text; `band` is a `KvBand` or its `as_dict()`."""
    b = band if isinstance(band, dict) else band.as_dict()
    return [f"{b['tokens']:,} tokens = {b['bytes'] / 2**20:,.1f} MiB of KV cache per request", band_text(b)]


def _plan_lines(plan: Plan) -> list[str]:
    if not plan.feasible:
        return [f"  cannot meet the objectives: {plan.reason}"]
    lines = []
    for s in plan.sides:
        latency = []
        if s.ttft_ms is not None:
            latency.append(f"TTFT {_ms(s.ttft_ms)}")
        if s.itl_ms is not None:
            latency.append(f"ITL {_ms(s.itl_ms)}")
        if s.batch is not None:
            latency.append(f"~{s.batch:.0f} sequences a replica")
        lines.append(
            f"  {s.role:<10} {s.replicas} replica(s) at TP {s.tp} = {s.gpus} GPU(s) on {s.nodes} node(s); "
            + ", ".join(latency)
        )
    lines.append(
        f"  total      {plan.nodes} node(s), {plan.gpus} GPU(s) busy; GPU nodes {_money(plan.hourly)}/hour, "
        f"{_money(plan.usd_per_mtok)} per million output tokens"
    )
    return lines


def placement_lines(result: Sizing) -> list[str]:
    """Advice: the tensor-parallel size per side that needs the fewest nodes, when it beats the stack's."""
    found = result.placement
    if found is None:
        return []
    lines = []
    dis = result.disaggregated
    if (
        found.disaggregated_nodes is not None
        and found.prefill
        and found.decode
        and (not dis.feasible or found.disaggregated_nodes < dis.nodes)
    ):
        lines.append(
            f"placement search: prefill TP {found.prefill.tp} x {found.prefill.replicas} + decode TP "
            f"{found.decode.tp} x {found.decode.replicas} needs {found.disaggregated_nodes} node(s)"
            + (f" (the stack's TP: {dis.nodes})" if dis.feasible else "")
        )
    agg = result.aggregated
    if found.aggregated is not None and (not agg.feasible or found.aggregated.nodes < agg.nodes):
        lines.append(
            f"placement search: aggregated TP {found.aggregated.tp} x {found.aggregated.replicas} needs "
            f"{found.aggregated.nodes} node(s)" + (f" (at the decode TP: {agg.nodes})" if agg.feasible else "")
        )
    return lines


def constants_line(result: Sizing) -> str:
    """Which efficiency constants the answer rests on: the calibration file, or the default row."""
    c = result.constants
    if c is None:
        return ""
    where = f"{result.calibration} (make calibrate)" if result.calibration else c.source
    unit = " a layer" if c.intercepts_per_layer else ""
    stream = f", API-server stream {c.stream_token_s * 1e6:.0f} us a token" if c.stream_token_s else ""
    return (
        f"constants: prefill MFU {c.prefill_mfu:.3f} + {c.prefill_step_s * 1e3:.3g} ms{unit} a forward, decode MBU "
        f"{c.decode_mbu:.3f} + {c.decode_step_s * 1e3:.3g} ms{unit} a step, TP efficiency {c.tp_efficiency:.2f} "
        f"a doubling{stream}, from {where}"
    )


def _kv_plan_basis(result: Sizing) -> str:
    plan = result.kv_plan
    if plan is None:
        return result.band.planning_basis
    return f"{_ms(plan.seconds * 1e3)} a request at {plan.gbytes_s:.1f} GB/s a rank, {plan.basis}"


def render_text(result: Sizing) -> str:
    w = result.workload
    lines = [
        f"Sizing {result.stack}: {result.model_id} on {result.instance_type} ({result.region})",
        f"workload: {w.request_rate:g} req/s, input mean {w.input_tokens.mean:g} (cv {w.input_tokens.cv:g}), "
        f"output mean {w.output_tokens.mean:g} (cv {w.output_tokens.cv:g}) tokens; "
        f"p{w.slo.percentile:g} TTFT ≤ {w.slo.ttft_ms:g} ms, ITL ≤ {w.slo.itl_ms:g} ms",
        f"output: {result.output_tokens_s:,.0f} tokens/s",
        "",
        f"disaggregated (P:D {result.pd_ratio or 'n/a'})",
        *_plan_lines(result.disaggregated),
        "aggregated (no disaggregation, same TP as decode)",
        *_plan_lines(result.aggregated),
        "",
        f"verdict: {result.verdict()}",
        *placement_lines(result),
        f"cost: {COST_BASIS}; per million input + output tokens: disaggregated "
        f"{_money(result.disaggregated.usd_per_mtok_total)}, aggregated {_money(result.aggregated.usd_per_mtok_total)}",
        constants_line(result),
        *(f"flag: {flag}" for flag in result.flags),
        "",
        f"KV transfer at the p{w.slo.percentile:g} prompt (sizing plans on {_kv_plan_basis(result)}):",
        *(f"  {line}" for line in band_lines(result.band)),
        *routing_lines(result),
    ]
    return "\n".join(lines) + "\n"


# -- --write ----------------------------------------------------------------------------------------
# Ray Serve's advanced-autoscaling guide: set max_ongoing_requests about 20-50 % above
# target_ongoing_requests (headroom for bursts without letting a replica's queue grow unbounded).
MAX_ONGOING_HEADROOM = 1.25


def autoscaling_values(concurrency: Optional[float]) -> dict[str, Any]:
    """targetOngoingRequests from the sized per-replica concurrency, maxOngoingRequests above it."""
    target = max(1, math.ceil(concurrency or 1.0))
    return {
        "targetOngoingRequests": target,
        "maxOngoingRequests": max(target + 1, math.ceil(target * MAX_ONGOING_HEADROOM)),
    }


def sized_values(result: Sizing, current: Any) -> dict[str, Any]:
    """The serving mode the verdict recommends (`serving.mode`), its groups' new replica bounds and Serve
    autoscaling targets, and the GPU node-group sizes.

    The recommended plan is the feasible one on fewer nodes (a draw: disaggregated, the default);
    its sized counts become the maxima; minReplicas stays as set (clipped to the new maximum); the
    node group's minSize/desiredSize are the nodes the minimum replicas need (at least 2, as the
    config requires) and its maxSize the nodes the sized replicas need (plus,
    with upgradeStrategy NewCluster, those a second cluster starts with). Each group's
    targetOngoingRequests is the requests a replica holds at the sized load (Little's law), and
    upscaleDelayS/downscaleDelayS are written as configured (the model has no view on them).
    """
    serving = current.serving
    instance_gpus = gpu_instance_type(current.gpu_nodes.instance_type).gpus
    plan = result.recommended()
    if plan is None:
        raise ToolError(Exit.FAILED, f"nothing written: {result.verdict()}")
    out: dict[str, Any] = {"mode": plan.mode}
    min_nodes = max_nodes = 0
    for side in plan.sides:
        group = getattr(serving, side.role)  # serving.prefill / decode / aggregated
        low = min(group.min_replicas, side.replicas)
        out[side.role] = {
            "minReplicas": low,
            "maxReplicas": side.replicas,
            **autoscaling_values(side.concurrency),
            "upscaleDelayS": group.upscale_delay_s,
            "downscaleDelayS": group.downscale_delay_s,
        }
        if side.tp != group.tensor_parallel_size:
            out[side.role]["tensorParallelSize"] = side.tp
        min_nodes += _group_nodes(group, low, side.tp, instance_gpus)
        max_nodes += _group_nodes(group, side.replicas, side.tp, instance_gpus)
    floor = max(2, min_nodes)  # the config keeps two GPU nodes at least (config/gpu_nodes.py), either mode
    # NewCluster starts a second Ray cluster at its minimum next to the serving one at its maximum
    # (the config refuses a maxSize below that: llm_pd_eks/config/stack.py)
    second = min_nodes if serving.upgrade_strategy == "NewCluster" else 0
    out["gpuNodes"] = {"minSize": floor, "desiredSize": floor, "maxSize": max(floor, max_nodes + second)}
    return out


def _group_nodes(group: Any, replicas: int, tp: int, instance_gpus: int) -> int:
    """Nodes `replicas` replicas of `tp` GPUs take (the group's own rule, at the sized TP)."""
    return int(group.model_copy(update={"tensor_parallel_size": tp}).nodes(replicas, instance_gpus))


def _section(config: Any, name: str, path: Path) -> Any:
    """The stack file's `<project>:<name>` mapping, spelt with the project prefix or without it (the
    Pulumi CLI reads a key without a namespace as the project's own)."""
    spellings = [key for key in (f"{PROJECT}:{name}", name) if key in config]
    if len(spellings) != 1:
        problem = "is missing" if not spellings else f"is given twice ({' and '.join(spellings)})"
        raise ToolError(Exit.USAGE, f"nothing written: {path.name}: config key {PROJECT}:{name} {problem}")
    return config[spellings[0]]


def write_stack(stack: str, result: Sizing, current: Any, root: Path = ROOT) -> tuple[str, dict[str, Any]]:
    """Rewrite Pulumi.<stack>.yaml in place (comments kept); returns (new text, values written)."""
    values = sized_values(result, current)
    path = stack_file(stack, root)
    rt = YAML()  # round-trip: comments, key order and flow style survive
    rt.preserve_quotes = True
    rt.width = 4096
    doc = rt.load(read_regular_file(path, MAX_BYTES, "stack file").decode("utf-8", errors="replace"))
    config = doc["config"]
    serving, gpu_nodes = _section(config, "serving", path), _section(config, "gpuNodes", path)
    serving["mode"] = values["mode"]
    for role, sized in values.items():
        if role in ("mode", "gpuNodes"):
            continue
        if role not in serving:
            serving[role] = {}
        for key, value in sized.items():
            serving[role][key] = value
    for key, value in values["gpuNodes"].items():
        gpu_nodes[key] = value
    buffer = io.StringIO()
    rt.dump(doc, buffer)
    text = buffer.getvalue()
    try:
        validate_engine_config(*engine_config(yaml.safe_load(text).get("config") or {}))
    except ConfigError as error:
        raise ToolError(
            Exit.FAILED, one_line(f"nothing written: the sized config would not validate: {'; '.join(error.problems)}")
        ) from None
    atomic_write(path, text)  # whole or not at all: a full disk leaves the old file
    return text, values


def same_workload(stack: str, workload: Path, root: Path) -> None:
    """`--write` sizes the stack for the workload the preview prices (`workloads/<stack>.yaml`, or a
    file of the same bytes), so the two never disagree about what was written; any other workload is
    refused before anything is sized."""
    from llm_pd_eks_sizing.model import MAX_WORKLOAD_BYTES

    priced = root / "workloads" / f"{stack}.yaml"
    same = priced.is_file() and (
        workload.resolve() == priced.resolve()
        or read_regular_file(workload, MAX_WORKLOAD_BYTES, "workload file")
        == read_regular_file(priced, MAX_WORKLOAD_BYTES, "workload file")
    )
    if not same:
        raise ToolError(
            Exit.USAGE,
            f"nothing written: --write sizes for workloads/{stack}.yaml, the workload the preview prices; "
            f"copy {workload} there (or size it without --write)",
        )


def read_workload(path: Path) -> Workload:
    """A workload file, refused unless it is a regular file (a FIFO would block the read forever) of at
    most MAX_WORKLOAD_BYTES; then the stack files' YAML reader and the sizing model's workload schema."""
    data = read_regular_file(path, MAX_WORKLOAD_BYTES, "workload file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(Exit.USAGE, f"workload file {path}: not UTF-8 text; is it a workload file?") from None
    return parse_workload(parse(text, str(path)), str(path))


# -- main ---------------------------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number above 0")
    return value


def _non_negative_float(text: str) -> float:
    if text.strip() in ("0", "0.0"):
        return 0.0
    return _positive_float(text)


def point_main(args: argparse.Namespace) -> int:
    """`--point`: one question to the model, one answer (JSON with --json)."""
    missing = [f"--{n}" for n in ("model", "instance", "tp", "input", "output") if getattr(args, n) is None]
    if (args.concurrency is None) == (args.rate is None):
        missing.append("--concurrency or --rate (one of them)")
    if missing:
        raise ToolError(Exit.USAGE, f"--point needs {', '.join(missing)}")
    if args.model not in MODELS:
        raise ToolError(
            Exit.USAGE, f"--model {args.model!r}: not a model this project knows; one of {', '.join(MODELS)}"
        )
    if args.instance not in GPU_INSTANCE_TYPES:
        raise ToolError(
            Exit.USAGE, f"--instance {args.instance!r}: choose one of {', '.join(sorted(GPU_INSTANCE_TYPES))}"
        )
    model, instance = MODELS[args.model], GPU_INSTANCE_TYPES[args.instance]
    options = tp_options(model, instance)
    if args.tp not in options:
        raise ToolError(
            Exit.USAGE,
            f"--tp {args.tp}: {model.model_id} on {instance.name} runs at TP "
            f"{', '.join(map(str, options)) or '(none: the weights do not fit)'}",
        )
    answer = point_query(
        model,
        instance,
        args.tp,
        args.input,
        args.output,
        args.concurrency,
        args.mode,
        rate=args.rate,
        think_s=args.think_ms / 1e3,
        prompts=args.prompts,
        lockstep=args.lockstep,
    )
    if args.json:
        print(json.dumps(answer.as_dict(), indent=2))
    else:
        fields = {k: v for k, v in answer.as_dict().items() if k != "flags"}
        print(", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in fields.items()))
        for flag in answer.flags:
            print(f"flag: {flag}")
    return Exit.OK


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", help="the stack to size (Pulumi.<stack>.yaml)")
    parser.add_argument("--workload", type=Path, help="a workload file (see workloads/)")
    parser.add_argument("--write", action="store_true", help="write the sized bounds into Pulumi.<stack>.yaml")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    point = parser.add_argument_group("the point query (--point): one layout at one load")
    point.add_argument("--point", action="store_true", help="ask the model one question instead of sizing a stack")
    point.add_argument("--model", help="Hugging Face model id (llm_pd_eks/models.py)")
    point.add_argument("--instance", help="GPU instance type (llm_pd_eks/catalog.py)")
    point.add_argument("--tp", type=_positive_int, help="tensor-parallel size of a replica")
    point.add_argument("--input", type=_positive_int, help="prompt tokens per request")
    point.add_argument("--output", type=_positive_int, help="output tokens per request")
    point.add_argument("--concurrency", type=_positive_int, help="closed-loop clients")
    point.add_argument("--rate", type=_positive_float, help="open-loop Poisson requests a second (instead of clients)")
    point.add_argument("--think-ms", type=_non_negative_float, default=0.0, help="a client's pause between requests")
    point.add_argument(
        "--prompts",
        type=_positive_int,
        help="requests sent in all (vllm bench serve --num-prompts): TTFT includes the first wave",
    )
    point.add_argument(
        "--lockstep",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fixed-length requests that start together move together (vllm bench serve); --no-lockstep: they drift",
    )
    point.add_argument(
        "--mode",
        choices=("aggregated", "disaggregated"),
        default="aggregated",
        help="one replica doing both phases, or one prefill plus one decode replica",
    )
    args = parser.parse_args(argv)
    if args.point:
        return point_main(args)
    if args.stack is None or args.workload is None:
        raise ToolError(Exit.USAGE, "--stack and --workload are required (or --point with its arguments)")

    try:  # the stack first: `--stack -canary` is named as the stack it is, before its workload
        config = stack_config(args.stack, args.root)
    except FileNotFoundError as error:
        raise ToolError(Exit.USAGE, str(error)) from None
    except ConfigError as error:
        raise ToolError(Exit.USAGE, one_line(f"Pulumi.{args.stack}.yaml: {'; '.join(error.problems)}")) from None
    if args.write:
        same_workload(args.stack, args.workload, args.root)
    workload = read_workload(args.workload)
    result = size(args.stack, config, workload, args.root)
    # write first, print once: with --json stdout is one JSON document and nothing else
    values = write_stack(args.stack, result, config, args.root)[1] if args.write else None
    if args.json:
        print(json.dumps({**result.as_dict(), "written": values}, indent=2, default=str))
    else:
        print(render_text(result), end="")
        if values is not None:
            print(
                f"wrote Pulumi.{args.stack}.yaml: serving.mode={values['mode']}; "
                + "; ".join(
                    f"{section} " + ", ".join(f"{k}={v}" for k, v in kv.items())
                    for section, kv in values.items()
                    if section != "mode"
                )
            )
    return Exit.OK if result.disaggregated.feasible or result.aggregated.feasible else Exit.FAILED


if __name__ == "__main__":
    exit_with(PROG, main)
