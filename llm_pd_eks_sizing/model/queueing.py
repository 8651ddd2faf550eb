"""Queues in front of the engines: M/G/1 prefill, Little's-law decode batches, the aggregated replica."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from llm_pd_eks_sizing.model.engine import Replica, vllm_step_budget
from llm_pd_eks_sizing.model.loop import _decode_step
from llm_pd_eks_sizing.model.workload import TokenLengths, Workload


def mg1_wait_quantile(rate: float, mean_s: float, second_moment_s: float, p: float) -> float:
    """The p-quantile of the M/G/1 queueing delay (seconds); inf when the queue is unstable.

    Mean wait by Pollaczek-Khinchine, W = rate E[S^2] / (2 (1 - rho)); P(wait > 0) = rho; the tail
    beyond is taken as exponential with the conditional mean W / rho (exact for M/M/1, the standard
    heavy-traffic approximation otherwise). With cv 0 and one length this is DistServe's M/D/1.
    """
    rho = rate * mean_s
    if rho >= 1:
        return math.inf
    if rho <= 0 or rho <= 1 - p:
        return 0.0
    mean_wait = rate * second_moment_s / (2 * (1 - rho))
    return (mean_wait / rho) * math.log(rho / (1 - p))


def _service_moments(c: float, a: float, b: float, lengths: TokenLengths) -> tuple[float, float]:
    """E[S], E[S^2] for S = c + a L + b L^2 with L lognormal (closed form from the lognormal moments)."""
    m = lengths.moment
    mean = c + a * m(1) + b * m(2)
    var_part = a * a * m(2) + 2 * a * b * m(3) + b * b * m(4)
    return mean, c * c + 2 * c * (a * m(1) + b * m(2)) + var_part


def _decode_fixed_point(replica: Replica, per_replica_tokens_s: float, context: float, stretch: float = 1.0) -> float:
    """Sequences a replica holds when it must emit `per_replica_tokens_s`: B = rate x step(B) x stretch.

    Little's law (each output token occupies one step of its sequence). `stretch` = 1 / (1 - share of
    GPU time spent on prefill) for an aggregated replica. inf if no finite batch keeps up.
    """
    batch = 1.0
    for _ in range(500):
        nxt = per_replica_tokens_s * replica.decode_step_seconds(batch, context) * stretch
        if nxt > 1e7:
            return math.inf
        if abs(nxt - batch) < 1e-6:
            return nxt
        batch = nxt
    return math.inf


def _batch_cap(replica: Replica, workload: Workload) -> float:
    """Most sequences a replica can hold: vLLM's max_num_seqs, and the KV cache at full length."""
    full = (workload.input_tokens.mean + workload.output_tokens.mean) * replica.kv_bytes_per_token
    return min(vllm_step_budget(replica.instance)[1], max(replica.kv_budget_bytes, 0) / full)


@dataclass(frozen=True)
class AggregatedLoad:
    """One aggregated replica at a given arrival rate: means and the workload's percentile."""

    batch: float
    step_s: float  # a decode step without a prefill chunk
    chunk_fraction: float  # share of steps that carry a prefill chunk
    itl_mean_s: float
    itl_tail_s: float
    ttft_mean_s: float
    ttft_tail_s: float


def aggregated_load(replica: Replica, workload: Workload, rate: float) -> Optional[AggregatedLoad]:
    """Latencies of one replica doing both phases at `rate` requests/s; None if it cannot keep up.

    Prefill takes a share u = rate x E[prefill] of GPU time; decode runs in the rest, so its batch follows
    Little's law stretched by 1/(1-u). A step that carries prompt tokens carries every prompt that
    arrived since the last step, up to vLLM's token budget less the decode tokens (several short prompts
    share one step, and the step costs all of them); when more than (1 - percentile) of steps carry
    one, the percentile ITL is such a step. Steps are timed at whole sequences (floor/ceil of the mean
    batch). A prompt's prefill is spread over ceil(L / chunk) steps, each also carrying the decode
    batch, and waits in an M/G/1 queue.
    """
    p = workload.slo.percentile / 100
    chunk = vllm_step_budget(replica.instance)[0]
    context = workload.input_tokens.mean + workload.output_tokens.mean / 2
    c, a, b = replica.prefill_coefficients()
    mean_prefill, _ = _service_moments(c, a, b, workload.input_tokens)
    share = rate * mean_prefill
    if share >= 1:
        return None
    batch = _decode_fixed_point(replica, rate * workload.output_tokens.mean, context, 1 / (1 - share))
    if batch > _batch_cap(replica, workload):
        return None
    seen = max(1.0, batch)  # a decoding sequence is in every step it waits for
    step = _decode_step(replica, seen, context, 0.0, 0.0)
    steps_s = (1 - share) / step
    mean_len = workload.input_tokens.mean
    room = max(1.0, chunk - batch)  # the budget left beside the decode tokens
    carried = min(room, max(mean_len, rate * step * mean_len))  # the prompts arriving a step share it
    chunk_fraction = min(1.0, rate * mean_len / carried / steps_s)
    tail_len = workload.input_tokens.quantile(p)
    tail_carried = min(room, max(tail_len, rate * step * mean_len))
    chunk_s = _decode_step(replica, seen, context, tail_carried, tail_len / 2) - step
    mean_chunk_s = _decode_step(replica, seen, context, carried, mean_len / 2) - step
    # prefill stretched by the decode step each chunk rides with: S'(L) = S(L) + (L / chunk) x step
    mean_s, second_s = _service_moments(c, a + step / chunk, b, workload.input_tokens)
    if rate * mean_s >= 1:
        return None
    mean_wait = rate * second_s / (2 * (1 - rate * mean_s))
    return AggregatedLoad(
        batch=batch,
        step_s=step,
        chunk_fraction=chunk_fraction,
        itl_mean_s=step + chunk_fraction * mean_chunk_s,
        itl_tail_s=step + chunk_s if chunk_fraction > 1 - p else step,
        ttft_mean_s=mean_wait + mean_s,
        ttft_tail_s=mg1_wait_quantile(rate, mean_s, second_s, p)
        + replica.prefill_seconds(tail_len)
        + math.ceil(tail_len / chunk) * step,
    )


class _Infeasible(Exception):
    pass
