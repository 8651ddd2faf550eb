"""Where the two routing features pay, in the sizing model's own terms (llm_pd_eks/serve_routing.py).

Decode-only below a threshold. A prompt of L tokens prefilled on the decode replica stalls that
replica's whole decode batch for the prefill's compute (chunked prefill spreads it over steps, the
sum is the same); sent through prefill it costs this request a second hop and the KV handoff instead.
Disaggregating pays where the stall it saves exceeds what it adds:

    prefill_seconds(L) on decode  >  hop + kv_transfer(L).seconds

`prefill_seconds` is the engine model (engine.py: intercept + dense + attention, all-reduce under TP),
`kv_transfer` the handoff by message size (kv.py). Both grow with L; the hop does not, so the
threshold is the smallest L where the inequality holds. The hop (ingress -> decode -> prefill handle
-> a one-token prefill request -> back) is ASSUMED here at `HOP_ASSUMED_S`; every answer says so.

Under load the P/D path also waits in the prefill queue, which decode-only skips: with
`queue_wait_s` (`prefill_queue_wait`: the M/G/1 mean wait at the sized prefill replicas, only prompts
above the threshold queued) the inequality's right side gains that wait and the threshold rises.
The real run measured the effect with a closed loop of short and long prompts (sizing/mix.py holds the
same queue for closed loops, checked against that run).

Prefix-aware routing pays where the prefixes a workload repeats do not all fit every replica's
prefix cache: affinity gives each replica its own share to hold (`prefix_routing`). With one replica,
or prefixes that fit everywhere, it saves nothing and only risks hot spots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from llm_pd_eks.catalog import GpuInstanceType
from llm_pd_eks.models import ModelSpec

from .engine import Replica
from .kv import kv_transfer
from .workload import TokenLengths

# One Ray Serve handle call and a one-token engine request: a few milliseconds on an idle replica
# (Ray Serve's own docs put a handle call at ~1 ms; the prefill request adds scheduling and the
# first-token round trip). Assumed, flagged in every answer, until measured.
HOP_ASSUMED_S = 0.005
SEARCH_LIMIT_TOKENS = 1 << 20


@dataclass(frozen=True)
class DecodeOnlyThreshold:
    tokens: int | None  # prompts below this many tokens are cheaper on decode; None: always cheaper
    hop_s: float
    basis: str

    def text(self) -> str:
        if self.tokens is None:
            limit = f"{SEARCH_LIMIT_TOKENS:,}"
            return f"decode-only never loses here (no prompt up to {limit} tokens pays the hop): {self.basis}"
        if self.tokens <= 1:
            return (
                "decode-only never pays here (a prompt of any length stalls the decode batch longer than the hop "
                f"and the handoff cost): {self.basis}"
            )
        return f"disaggregate prompts of {self.tokens:,} tokens and more: {self.basis}"


def _disaggregation_pays(
    replica: Replica,
    instance: GpuInstanceType,
    tokens: int,
    hop_s: float,
    queue_wait_s: Optional[Callable[[int], float]] = None,
) -> bool:
    handoff = kv_transfer(replica.model, tokens, replica.kv_dtype_bytes, instance, replica.tp)
    waited = queue_wait_s(tokens) if queue_wait_s is not None else 0.0
    return replica.prefill_seconds(tokens) > hop_s + handoff.seconds + waited


def decode_only_threshold(
    model: ModelSpec,
    instance: GpuInstanceType,
    tp: int = 1,
    kv_dtype_bytes: int = 2,
    hop_s: float = HOP_ASSUMED_S,
    queue_wait_s: Optional[Callable[[int], float]] = None,
) -> DecodeOnlyThreshold:
    """The smallest prompt length at which sending the request through prefill pays (bisection on the
    monotone difference: the prefill term grows at least linearly, the handoff at most linearly in L).

    `queue_wait_s(T)`: the prefill stage's mean queueing delay when only prompts of T tokens and more
    are sent there (`prefill_queue_wait`), which the P/D path adds and decode-only skips; it falls as
    T grows, so the difference stays monotone. None: an idle prefill stage."""
    replica = Replica(model, instance, tp, kv_dtype_bytes=kv_dtype_bytes)
    basis = (
        f"{model.model_id} on {instance.name} TP {tp}: prefill on decode vs a {hop_s * 1e3:.0f} ms hop "
        f"(assumed) + the KV handoff by message size"
        + (" + the prefill queue's mean wait at this load" if queue_wait_s is not None else "")
    )

    def pays(tokens: int) -> bool:
        return _disaggregation_pays(replica, instance, tokens, hop_s, queue_wait_s)

    if not pays(SEARCH_LIMIT_TOKENS):
        return DecodeOnlyThreshold(None, hop_s, basis)
    low, high = 1, SEARCH_LIMIT_TOKENS
    while low < high:
        mid = (low + high) // 2
        if pays(mid):
            high = mid
        else:
            low = mid + 1
    return DecodeOnlyThreshold(low, hop_s, basis)


def prefill_queue_wait(replica: Replica, lengths: TokenLengths, rate_per_replica: float) -> Callable[[int], float]:
    """T -> the mean wait in one prefill replica's queue (Pollaczek-Khinchine, as plan.py sizes the
    prefill side) when only the prompts of at least T tokens are sent there: Poisson arrivals at
    `rate_per_replica` thinned to those prompts, service the engine model's prefill c + a L + b L^2,
    its moments over the lognormal's tail (TokenLengths.partial_moment); inf where that queue is unstable."""
    c, a, b = replica.prefill_coefficients()

    def wait(threshold: int) -> float:
        m = lengths.partial_moment
        mean = c * m(0, threshold) + a * m(1, threshold) + b * m(2, threshold)
        second = (
            c * c * m(0, threshold)
            + 2 * c * (a * m(1, threshold) + b * m(2, threshold))
            + a * a * m(2, threshold)
            + 2 * a * b * m(3, threshold)
            + b * b * m(4, threshold)
        )
        busy = rate_per_replica * mean
        return math.inf if busy >= 1 else rate_per_replica * second / (2 * (1 - busy))

    return wait


@dataclass(frozen=True)
class PrefixRouting:
    hit_rate_random: float  # share of a shared prefix found cached under power-of-two choice
    hit_rate_affinity: float  # the same under prefix affinity
    saved_s: float  # prefill seconds saved per request by affinity
    basis: str


def prefix_routing(
    model: ModelSpec,
    instance: GpuInstanceType,
    shared_prefix_tokens: int,
    distinct_prefixes: int,
    replicas: int,
    tp: int = 1,
    kv_dtype_bytes: int = 2,
    asks: int | None = None,
    cache_bytes: int | None = None,
) -> PrefixRouting:
    """What affinity buys over power-of-two choice for `distinct_prefixes` prefixes of
    `shared_prefix_tokens` each, spread over `replicas` replicas whose KV cache holds C tokens.
    Without affinity every replica sees every prefix, so each must hold all of them to hit
    (hit = min(1, C / (P*S))); with affinity a replica holds its own 1/R share
    (hit = min(1, C*R / (P*S))). Eviction is treated as LRU over whole prefixes (vLLM's prefix
    cache evicts least recently used blocks) and running requests' own KV is ignored: an upper bound
    on both hit rates, and so on neither's difference.

    `asks`: each prefix asked that many times in all (None: so often that first asks do not count).
    A replica's first ask of a prefix misses: with affinity one replica takes all k asks (k - 1 can
    hit); spread evenly over R replicas the k asks reach R(1 - (1 - 1/R)^k) replicas on average, each
    a miss, and a replica holds only the prefixes it is sent, P(1 - (1 - 1/R)^k) of them.
    `cache_bytes`: the engine's KV cache where it is set (vLLM's kv_cache_memory_bytes), not the share
    of GPU memory the sizing leaves it."""
    replica = Replica(model, instance, tp, kv_dtype_bytes=kv_dtype_bytes)
    cache_tokens = (cache_bytes or replica.kv_budget_bytes) / replica.kv_bytes_per_token
    if shared_prefix_tokens <= 0 or distinct_prefixes <= 0:
        return PrefixRouting(0.0, 0.0, 0.0, "no shared prefix in the workload")
    held = distinct_prefixes * shared_prefix_tokens
    spread = max(replicas, 1)
    random_hit = min(1.0, cache_tokens / held)
    affinity_hit = min(1.0, cache_tokens * spread / held)
    if asks is not None and asks > 0:
        sent = 1 - (1 - 1 / spread) ** asks  # the share of the prefixes one replica is ever sent
        random_hit = min(1.0, cache_tokens / (held * sent)) * (asks - spread * sent) / asks
        affinity_hit *= (asks - 1) / asks
    saved = replica.prefill_seconds(shared_prefix_tokens) * (affinity_hit - random_hit)
    basis = (
        f"{distinct_prefixes} prefixes x {shared_prefix_tokens:,} tokens over {replicas} replica(s), "
        f"{cache_tokens:,.0f} cached tokens each"
    )
    return PrefixRouting(random_hit, affinity_hit, saved, basis)
