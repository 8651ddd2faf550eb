"""`make calibrate STACK=...`: measure the stack's own engine and fabric, fit the sizing constants, and
write calibration/<stack>.yaml, which `make size` and the preview then use (and say so).

After `pulumi up`: a Job on the system nodes runs vLLM's `vllm bench serve` against the stack's serve
Service at the workload's lengths with a concurrency sweep (llm_pd_eks_sizing/calibrate/job.py); with `--endpoint
http://host:port` (a port-forward) the tool measures the endpoint itself with the same sweep and
`vllm bench serve`'s result keys. NIXL's `nixlbench` over LIBFABRIC between a prefill and a decode node
is read from its output (`--nixlbench-output FILE`; the command is printed). The fit is
llm_pd_eks_sizing/calibrate/fit.py. Progress goes to stderr; the run is bounded by `--timeout`; a failed or
partial run writes nothing.

Exit codes (llm_pd_eks_tools/core/cli.py): 0 written; 1 a benchmark failed, was partial or timed out (nothing
written); 2 bad arguments, stack, workload or benchmark file; 5 the cluster could not be reached.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Optional

import yaml

from llm_pd_eks.catalog import GpuInstanceType, gpu_instance_type
from llm_pd_eks.config import ConfigError, ServingConfig
from llm_pd_eks.models import MODELS
from llm_pd_eks_sizing.calibrate.bench import (
    SweepPoint,
    check_result,
    measure,
    nixlbench_args,
    parse_nixlbench_rows,
    sweep_plan,
)
from llm_pd_eks_sizing.calibrate.fit import Point, fit
from llm_pd_eks_sizing.calibrate.job import calibration_job, run_in_cluster
from llm_pd_eks_sizing.model import VLLM_BF16, Calibration, EngineConstants, calibration_path, kv_band
from llm_pd_eks_sizing.model.kv import check_nixlbench_rows
from llm_pd_eks_sizing.size import read_workload
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, exit_with, one_line
from llm_pd_eks_tools.core.io_safety import atomic_write, read_regular_file, redact
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.ops.verify.kube import (
    Deadline,
    KubeClient,
    Unreachable,
    kubeconfig_from_stack,
    load_kubeconfig,
    read_kubeconfig,
)

PROG = "calibrate"
MAX_TIMEOUT_S = 4 * 3600.0
MAX_NIXLBENCH_BYTES = 4 * 2**20  # nixlbench prints a table of a few KB


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds in (0, {MAX_TIMEOUT_S:g}]")
    return value


def progress(message: str) -> None:
    print(f"[calibrate] {one_line(redact(message), 1000)}", file=sys.stderr, flush=True)


def points_for_fit(
    results: dict[str, dict[str, float]], plan: list[SweepPoint], model: Any, instance: Any, tp: int
) -> list[Any]:
    """Benchmark results as fit points: TTFT alone (concurrency 1) and the ITL at each concurrency."""
    points = []
    for p in plan:
        r = results[p.name]
        inp = round(r["total_input_tokens"] / r["completed"])
        out = round(r["total_output_tokens"] / r["completed"])
        if p.concurrency == 1:
            points.append(Point("ttft", model, instance, tp, 1, inp, out, r["mean_ttft_ms"]))
        points.append(Point("itl", model, instance, tp, p.concurrency, inp, out, r["mean_itl_ms"]))
    return points


def write_atomically(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ToolError(Exit.IOERR, f"cannot create {path.parent} ({error.strerror}); nothing written") from None
    atomic_write(path, text)


def parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", required=True, help="the stack to calibrate (Pulumi.<stack>.yaml)")
    parser.add_argument("--workload", type=Path, help="workload file (default workloads/<stack>.yaml)")
    parser.add_argument("--endpoint", help="measure this OpenAI endpoint directly (http://host:port) instead of a Job")
    parser.add_argument("--kubeconfig", type=Path, help="kubeconfig for the in-cluster Job (default $KUBECONFIG)")
    parser.add_argument(
        "--nixlbench",
        "--nixlbench-output",
        dest="nixlbench_output",
        type=Path,
        help="nixlbench's output over LIBFABRIC (prefill -> decode): its rows become the KV rate by message size",
    )
    parser.add_argument("--timeout", type=_timeout, default=1800.0, help="seconds for the whole run (default 1800)")
    parser.add_argument("--max-output", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    return parser


def serving_of(stack: str, root: Path) -> tuple[ServingConfig, GpuInstanceType]:
    """The stack's serving section and GPU type; a usage error where the stack has nothing to calibrate."""
    try:
        config = stack_config(stack, root)
    except FileNotFoundError as error:
        raise ToolError(Exit.USAGE, str(error)) from None
    except ConfigError as error:
        raise ToolError(Exit.USAGE, one_line(f"Pulumi.{stack}.yaml: {'; '.join(error.problems)}")) from None
    if config.serving is None:
        raise ToolError(Exit.USAGE, f"Pulumi.{stack}.yaml has no serving section: nothing to calibrate")
    return config.serving, gpu_instance_type(config.gpu_nodes.instance_type)


def nixlbench_rows(path: Path, model: Any, instance: GpuInstanceType) -> list[tuple[int, float]]:
    """nixlbench's rows (message size -> GB/s), read before anything runs: a bad file fails fast."""
    try:
        rows = parse_nixlbench_rows(read_regular_file(path, MAX_NIXLBENCH_BYTES, "--nixlbench-output").decode("utf-8"))
        return check_nixlbench_rows(rows, kv_band(model, 1, 2, instance, 1).line_rate_gbps / 8)
    except UnicodeDecodeError as exc:
        raise ToolError(Exit.USAGE, one_line(f"--nixlbench-output {path}: {exc}")) from None
    except (ToolError, ValueError) as exc:
        raise ToolError(Exit.USAGE, one_line(f"--nixlbench-output {path}: {exc}")) from None


def run_sweep(
    args: argparse.Namespace, serving: ServingConfig, plan: list[SweepPoint], deadline: float
) -> dict[str, Any]:
    """Every sweep point's `vllm bench serve` result: measured here against --endpoint, or by the Job."""
    raw: dict[str, Any] = {}
    if args.endpoint:
        for i, point in enumerate(plan, 1):
            progress(f"[{i}/{len(plan)}] {point.name}: {point.num_prompts} prompts at concurrency {point.concurrency}")
            raw[point.name] = measure(args.endpoint, serving.model_id, point, deadline)
        return raw
    left = Deadline(args.timeout)
    path = args.kubeconfig or os.environ.get("KUBECONFIG")
    text = read_kubeconfig(str(path)) if path else kubeconfig_from_stack(args.stack, left.request_timeout())
    client = KubeClient(load_kubeconfig(text, left), left)
    job = calibration_job(args.stack, serving.image, serving.model_id, serving.endpoint_name, plan, int(args.timeout))
    try:
        return run_in_cluster(client, job, plan, deadline, progress)
    except Unreachable as exc:
        raise ToolError(Exit.UNVERIFIED, f"cannot reach the cluster: {exc}; nothing written") from None


def kv_efficiency_of(kv_gbytes: Optional[float], model: Any, instance: GpuInstanceType) -> Optional[float]:
    """nixlbench's rate as a share of one rank's line rate; None (the published one stays) without it."""
    if kv_gbytes is None:
        progress(
            "no --nixlbench-output: the KV efficiency stays the published one; measure it with "
            + " ".join(nixlbench_args("http://<etcd>:2379"))
            + " (initiator on a prefill node, target on a decode)"
        )
        return None
    line = kv_band(model, 1, 2, instance, 1).line_rate_gbps  # one rank's interfaces at line rate
    efficiency = min(1.0, kv_gbytes * 8 / line)
    progress(f"nixlbench: {kv_gbytes:g} GB/s per worker = {efficiency:.3f} of one rank's {line:g} Gbit/s")
    return efficiency


def checked_fit(points: list[Point]) -> EngineConstants:
    """The fitted constants; refused where a fit lands at or past the GPU's roofline."""
    # one TP measured: the TP term cannot be fitted, it stays the default row's
    found = fit(points, "make calibrate", tp_grid=(VLLM_BF16.tp_efficiency,))
    for name, value in (("prefill MFU", found.prefill_mfu), ("decode MBU", found.decode_mbu)):
        if not 0 < value < 1:  # at or past the roofline: the timings are not this GPU's work
            raise ToolError(
                Exit.FAILED,
                f"the measurements fit a {name} of {value:g}, at or past the GPU's roofline: not a measurement "
                "of this engine (a cache, a fake or a wrong model?); nothing written",
            )
    return found


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(argv)
    deadline = time.monotonic() + args.timeout
    serving, instance = serving_of(args.stack, args.root)
    workload = read_workload(args.workload or args.root / "workloads" / f"{args.stack}.yaml")
    model, tp = MODELS[serving.model_id], serving.decode.tensor_parallel_size
    kv_rows = nixlbench_rows(args.nixlbench_output, model, instance) if args.nixlbench_output is not None else None
    kv_gbytes = kv_rows[-1][1] if kv_rows is not None else None
    plan = sweep_plan(workload, output_cap=args.max_output)
    progress(f"{args.stack}: {serving.model_id} on {instance.name}, TP {tp}; sweep " + ", ".join(p.name for p in plan))
    raw = run_sweep(args, serving, plan, deadline)
    results = {p.name: check_result(p, raw[p.name]) for p in plan}
    kv_efficiency = kv_efficiency_of(kv_gbytes, model, instance)
    points = points_for_fit(results, plan, model, instance, tp)
    found = checked_fit(points)
    calibration = Calibration.model_validate(
        {
            "stack": args.stack,
            "measuredAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "modelId": serving.model_id,
            "instanceType": instance.name,
            "tensorParallelSize": tp,
            "constants": {
                "prefillMfu": found.prefill_mfu,
                "prefillStepS": found.prefill_step_s,
                "decodeMbu": found.decode_mbu,
                "decodeStepS": found.decode_step_s,
                "tpEfficiency": found.tp_efficiency,
            },
            "kvEfficiency": kv_efficiency,
            "kvTable": [[float(size), rate] for size, rate in kv_rows] if kv_rows is not None else None,
            "method": "relative least squares (llm_pd_eks_sizing/calibrate/fit.py): TTFT at one client, ITL a level",
            "points": len(points),
            "source": (
                "vllm bench serve sweep "
                + ", ".join(p.name for p in plan)
                + (" (measured from this machine)" if args.endpoint else " (in-cluster Job)")
                + ("; nixlbench LIBFABRIC" if kv_gbytes is not None else "")
            ),
        }
    )
    path = calibration_path(args.stack, args.root)
    header = f"# Written by make calibrate STACK={args.stack}; make size and the preview use it. Delete it to stop.\n"
    write_atomically(path, header + yaml.safe_dump(calibration.model_dump(by_alias=True), sort_keys=False))
    progress(
        f"wrote {path.relative_to(args.root) if path.is_relative_to(args.root) else path}: prefill MFU "
        f"{found.prefill_mfu:.3f} + {found.prefill_step_s * 1e3:.1f} ms, decode MBU {found.decode_mbu:.3f} + "
        f"{found.decode_step_s * 1e3:.1f} ms" + (f", KV {kv_efficiency:.3f} of line rate" if kv_efficiency else "")
    )
    return Exit.OK


if __name__ == "__main__":
    exit_with(PROG, main)
