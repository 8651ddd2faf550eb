"""The point query: one layout at one load (`python -m llm_pd_eks_tools.size --point`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

from llm_pd_eks.catalog import GpuInstanceType
from llm_pd_eks.kv_transfer import kv_band
from llm_pd_eks.models import ModelSpec
from llm_pd_eks_tools.cli import Exit, ToolError
from llm_pd_eks_tools.sizing.engine import VLLM_BF16, EngineConstants, Replica
from llm_pd_eks_tools.sizing.queueing import _batch_cap, _decode_fixed_point, aggregated_load
from llm_pd_eks_tools.sizing.workload import parse_workload


@dataclass(frozen=True)
class PointAnswer:
    """Mean latencies of `concurrency` closed-loop clients (each sends its next request when the last
    ends, as `vllm bench serve --max-concurrency` does) on one replica (aggregated) or one prefill plus
    one decode replica (disaggregated)."""

    mode: str
    ttft_ms: float
    itl_ms: float
    e2e_ms: float
    output_tokens_per_s: float  # per replica (disaggregated: per prefill + decode pair)
    kv_transfer_ms: float
    request_rate: float  # the arrival rate the closed loop settles at

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _settle(
    cycle: Callable[[float], Optional[tuple[float, float, float]]], concurrency: float, output: int
) -> tuple[float, tuple[float, float, float]]:
    """The arrival rate where rate x (TTFT + (output - 1) x ITL) = concurrency (bisection, bounded)."""
    lo, hi = 1e-9, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        got = cycle(mid)
        if got is None or mid * (got[0] + (output - 1) * got[1]) > concurrency:
            hi = mid
        else:
            lo = mid
    got = cycle(lo)
    if got is None:
        raise ToolError(Exit.FAILED, "the replica cannot keep up with even one request at a time")
    return lo, got


def point_query(
    model: ModelSpec,
    instance: GpuInstanceType,
    tp: int,
    input_tokens: int,
    output_tokens: int,
    concurrency: int,
    mode: str = "aggregated",
    kv_dtype_bytes: int = 2,
    constants: Optional[EngineConstants] = None,
    kv_efficiency: Optional[float] = None,
) -> PointAnswer:
    """What the model says one layout does at one load (the point query of
    `python -m llm_pd_eks_tools.size --point`)."""
    replica = Replica(model, instance, tp, kv_dtype_bytes, constants=constants or VLLM_BF16)
    workload = parse_workload(
        {
            "requestRate": 1.0,
            "inputTokens": {"mean": float(input_tokens)},
            "outputTokens": {"mean": float(output_tokens)},
            "slo": {"ttftMs": 1.0, "itlMs": 1.0, "percentile": 90.0},
        }
    )
    context = input_tokens + output_tokens / 2
    if mode == "aggregated":

        def cycle(rate: float) -> Optional[tuple[float, float, float]]:
            load = aggregated_load(replica, workload, rate)
            return None if load is None else (load.ttft_mean_s, load.itl_mean_s, 0.0)
    elif mode == "disaggregated":
        band = kv_band(model, input_tokens, kv_dtype_bytes, instance, tp, kv_efficiency)
        service = replica.prefill_seconds(input_tokens)
        cap = _batch_cap(replica, workload)

        def cycle(rate: float) -> Optional[tuple[float, float, float]]:
            if rate * service >= 1:
                return None
            wait = rate * service * service / (2 * (1 - rate * service))  # M/D/1: one prompt length
            batch = _decode_fixed_point(replica, rate * output_tokens, context)
            if batch > cap:
                return None
            step = replica.decode_step_seconds(batch, context)
            return wait + service + band.planning_seconds + step, step, band.planning_seconds
    else:
        raise ToolError(Exit.USAGE, f"--mode {mode!r}: expected aggregated or disaggregated")
    rate, (ttft, itl, kv) = _settle(cycle, concurrency, output_tokens)
    return PointAnswer(
        mode, ttft * 1e3, itl * 1e3, (ttft + (output_tokens - 1) * itl) * 1e3, rate * output_tokens, kv * 1e3, rate
    )
