"""Short and long prompts on one P/D deployment: where decode-only for the short ones pays under load.

`routing.decode_only_threshold` weighs one prompt on an idle deployment: its prefill on the decode
replica (a stall of the decode batch) against the hop and the KV handoff. Under a mix of lengths the
P/D path also has a queue: every request's prefill and KV handoff pass through the prefill replica
one after another, so a short prompt waits behind the long prompts' prefills and handoffs ahead of it
(the real run saw short and long prompts reach their first token equally late). Decode-only takes the
short class out of that queue and puts its prefill on the decode replica instead, where it stretches
every resident sequence's steps by the share of time the replica spends prefilling.

The model: closed loops of clients per class (no think time), as the real run's loads are, solved by
multi-class mean value analysis (Reiser and Lavenberg, "Mean-Value Analysis of Closed Multichain
Queuing Networks", JACM 1980) over the population vectors:

- the prefill stage, one FCFS queue of `prefill_replicas` replicas (taken as one server that many
  times as fast): demand D_c = prefill_seconds(L_c) + stage_s(L_c) for a class sent through prefill,
  none for a decode-only class. `stage_s` is what holds the prefill stage beyond the engine model's
  prefill (on the one-GPU real run, UCX's handoff, fitted; none over EFA, where decode reads the KV
  while the prefill replica goes on);
- a delay: the hop and the KV handoff (kv.py's by message size) for a class sent through prefill, the
  local prefill for a decode-only one, then the output tokens at the decode replica's ITL.

The ITL is the engine model's decode step at the resident batch (Little: throughput x decode time),
stretched by 1 / (1 - u), u the decode replica's share of time prefilling decode-only prompts; batch
and u are solved by fixed point with the queue. MVA is exact for product-form networks; an FCFS
queue whose classes differ in service time is not one, so each request is taken to wait for the work
of the requests ahead of it at their own service times (the usual heuristic for such a queue).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

from .engine import Replica
from .routing import HOP_ASSUMED_S

FIXED_POINT_ROUNDS = 50
# The most of its time the model lets a decode replica spend prefilling decode-only prompts: past it
# the 1 / (1 - u) stretch runs away in the fixed point, and such a threshold is far past paying anyway.
MAX_DECODE_PREFILL_SHARE = 0.9


@dataclass(frozen=True)
class MixClass:
    name: str
    clients: int  # its closed loop's clients
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class MixResult:
    decode_only: bool  # this class skips the prefill stage
    ttft_s: float  # mean time to first token
    itl_s: float  # mean time per output token after the first
    throughput_rps: float
    queue_s: float  # of ttft_s: waiting for the prefill stage (0 for decode-only)


def _mva(demands: Sequence[float], delays: Sequence[float], clients: Sequence[int]) -> tuple[list[float], list[float]]:
    """Multi-class MVA of one FCFS station and a delay per class: each class's residence time at the
    station and its throughput at the full population. An arriving request waits for the work of
    every request queued ahead of it, each at its own class's service time (the FCFS form for
    classes of different service times: R_c = D_c + sum_k D_k Q_k(n - e_c))."""
    classes = range(len(clients))
    queues: dict[tuple[int, ...], list[float]] = {}
    residence: list[float] = [0.0 for _ in classes]
    throughput: list[float] = [0.0 for _ in classes]
    empty = [0.0 for _ in classes]

    def populations(index: int, prefix: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if index == len(clients):
            yield prefix
            return
        for n in range(clients[index] + 1):
            yield from populations(index + 1, (*prefix, n))

    for n in sorted(populations(0, ()), key=sum):
        for c in classes:
            if n[c] == 0:
                residence[c], throughput[c] = 0.0, 0.0
                continue
            ahead = queues.get(tuple(k - (i == c) for i, k in enumerate(n)), empty)
            residence[c] = demands[c] + sum(demands[k] * ahead[k] for k in classes)
            cycle = residence[c] + delays[c]
            throughput[c] = n[c] / cycle if cycle > 0 else 0.0
        queues[n] = [throughput[c] * residence[c] for c in classes]
    return list(residence), list(throughput)


def mix_load(
    replica: Replica,
    classes: Sequence[MixClass],
    stage_s: Callable[[int], float] = lambda tokens: 0.0,
    handoff_s: Callable[[int], float] = lambda tokens: 0.0,
    decode_only_below: Optional[int] = None,
    hop_s: float = HOP_ASSUMED_S,
    prefill_replicas: int = 1,
    decode_replicas: int = 1,
) -> dict[str, MixResult]:
    """Each class's mean TTFT, ITL and throughput when every class runs its closed loop at once; a
    class whose prompts are below `decode_only_below` tokens takes the decode-only path.

    `stage_s(L)`: what a prompt of L tokens holds the prefill stage for beyond its prefill (queued);
    `handoff_s(L)`: its KV handoff where the prefill replica is free meanwhile (NIXL's decode-side
    read over EFA, as plan.py's TTFT has it: a delay, not queued)."""
    local = [decode_only_below is not None and c.prompt_tokens < decode_only_below for c in classes]
    prefill = [replica.prefill_seconds(c.prompt_tokens) for c in classes]
    handoff = [0.0 if on_decode else handoff_s(c.prompt_tokens) for c, on_decode in zip(classes, local)]
    demands = [
        0.0 if on_decode else (prefill[i] + stage_s(c.prompt_tokens)) / prefill_replicas
        for i, (c, on_decode) in enumerate(zip(classes, local))
    ]
    context = sum(c.clients * (c.prompt_tokens + c.output_tokens / 2) for c in classes) / sum(
        c.clients for c in classes
    )
    itl = replica.decode_step_seconds(1, context)
    busy = 0.0  # u: the decode replica's share of time prefilling decode-only prompts
    residence: list[float] = []
    throughput: list[float] = []
    for _ in range(FIXED_POINT_ROUNDS):
        delays = [
            (prefill[i] if on_decode else hop_s + handoff[i]) + max(c.output_tokens - 1, 0) * itl + itl
            for i, (c, on_decode) in enumerate(zip(classes, local))
        ]
        residence, throughput = _mva(demands, delays, [c.clients for c in classes])
        decoding = sum(x * c.output_tokens * itl for x, c in zip(throughput, classes)) / decode_replicas
        busy = min(
            MAX_DECODE_PREFILL_SHARE, sum(x * p for x, p, on in zip(throughput, prefill, local) if on) / decode_replicas
        )
        itl = replica.decode_step_seconds(max(decoding, 1.0), context) / (1 - busy)
    out = {}
    for i, c in enumerate(classes):
        first = prefill[i] + itl if local[i] else residence[i] + hop_s + handoff[i]
        waited = 0.0 if local[i] else max(residence[i] - demands[i], 0.0)
        out[c.name] = MixResult(local[i], first, itl, throughput[i], waited)
    return out
