"""One aggregated vLLM engine under load: N closed-loop clients, or a Poisson request rate.

The engine runs steps (vLLM V1's scheduler, vllm/v1/core/sched/scheduler.py at v0.26.0): each step
carries every running sequence's next token and, in what is left of the token budget
(`max_num_batched_tokens`), prompt chunks in arrival order; a prompt of P tokens takes ceil(P / what is
left) steps and emits its first token with its last chunk. `max_num_seqs` and the KV blocks bound the
sequences resident; a request beyond them waits in the engine's queue.

Steady state, with fixed lengths P in and O out, in units of steps:

* **unsaturated**: each arriving prompt is scheduled at the next step; prompts that arrive together
  share the budget (integer bursts of floor/ceil of the arrivals a step), so a prompt spends `k_p` steps
  prefilling, then O - 1 decode steps;
* **budget-bound**: when the prompt tokens arriving a step exceed the budget left, every step is full:
  T tokens = D decode tokens + T - D prompt tokens, so x = T / (P + O - 1) requests finish a step;
* **past capacity**: the resident sequences are capped (`max_num_seqs`, KV blocks) and the rest queue.

A closed loop of N clients (each sends its next request when the last ends, after `think_s`: `vllm bench
serve --max-concurrency N`) of fixed lengths is the scheduler stepped (stepped.py): the N - 1 prefills
ahead, prompts that share or straddle a step, and the queue past capacity appear in its TTFT as the
engine makes them. Clients whose requests drift apart (lengths that vary) settle where N = X (TTFT +
(O - 1) ITL + think) (mean-value analysis; the cycle time is iterated). An open loop (a rate) uses the
same step and queues prompts on the budget as an M/D/1 server. Step times mix integer batches (a step
carries a whole chunk or none), not a fractional mean batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from llm_pd_eks_sizing.model import stepped
from llm_pd_eks_sizing.model.engine import Replica, vllm_step_budget
from llm_pd_eks_sizing.model.kv import VLLM_BLOCK_TOKENS

MAX_ITERATIONS = 200


@dataclass(frozen=True)
class EngineLoad:
    """Means of one aggregated engine at one load."""

    resident: float  # sequences in the engine (prefilling or decoding)
    decoding: float  # sequences emitting a token each step
    steps_prefilling: float  # steps a prompt spends from scheduling to its first token
    step_s: float  # mean step, the ITL a decoding sequence sees
    prompt_step_s: float  # mean step while a prompt prefills
    requests_per_step: float
    ttft_s: float
    itl_s: float
    throughput_rps: float
    saturated: bool  # the token budget or the resident cap binds
    queued: float  # requests waiting for a slot (past capacity)


def resident_cap(replica: Replica, input_tokens: int, output_tokens: int) -> int:
    """Sequences the engine can hold: `max_num_seqs` and whole KV blocks of a full-length request."""
    blocks = math.ceil((input_tokens + output_tokens) / VLLM_BLOCK_TOKENS)
    per_request = blocks * VLLM_BLOCK_TOKENS * replica.kv_bytes_per_token
    by_memory = int(max(replica.kv_budget_bytes, 0) // per_request)
    return min(vllm_step_budget(replica.instance)[1], by_memory)


def _two_point(mean: float) -> tuple[tuple[int, float], tuple[int, float]]:
    """floor/ceil of `mean` with the weights that keep the mean (integer batches)."""
    low = math.floor(mean)
    frac = mean - low
    return (low, 1 - frac), (low + 1, frac)


def _decode_step(replica: Replica, decoding: float, context: float, prompt: float, attended: float) -> float:
    return sum(w * replica.step_seconds(n, context, prompt, attended) for n, w in _two_point(decoding) if w > 0)


def _steps(
    replica: Replica, p: int, o: int, x: float, decoding: float, others: float
) -> tuple[float, float, float, bool]:
    """(k_p, mean decode step, mean prompt step, budget-bound) when x requests arrive and finish a step
    and `decoding` sequences decode; `others` = (N - 1) / N, the share of them that is not the one
    request looked at (one client alone sees no one else's prompts or decodes)."""
    budget = vllm_step_budget(replica.instance)[0]
    context = p + o / 2
    seen = others * decoding  # the other sequences decoding beside this request
    left = max(1.0, budget - seen)
    bound = x * p >= max(1.0, budget - decoding)
    burst = max(1.0, x)
    chunk = left if bound else min(left, burst * p)
    kp = 0.0
    for m, w in _two_point(burst):
        if w > 0 and m > 0:
            # a burst of m prompts shares the budget left; the j-th one finishes after ceil(j P / left) steps
            kp += w * sum(math.ceil(j * p / left) for j in range(1, m + 1)) / m
    if bound:
        kp = max(kp, p / left)
    attended = p / 2  # a whole prompt's attention is P^2/2 token-positions whatever the chunking
    prompt_step = _decode_step(replica, seen, context, chunk, attended)
    share = 1.0 if bound else min(1.0, others * x * p / chunk)  # steps carrying someone else's chunk
    with_chunk = _decode_step(replica, 1 + seen, context, chunk, attended)
    plain = _decode_step(replica, 1 + seen, context, 0.0, 0.0)
    return kp, share * with_chunk + (1 - share) * plain, prompt_step, bound


def _desynchronized(
    replica: Replica, p: int, o: int, clients: int, think_s: float, cap: int
) -> tuple[float, float, float, float, bool, bool]:
    """Clients whose requests do not move together (lengths that vary, or jitter): (TTFT, ITL,
    requests/s, k_p, budget-bound, cap-bound), the arrivals a step spread as integer bursts. A prompt
    also queues behind the other clients' prompts still prefilling: an M/D/1 wait at their arrival
    rate for a prompt's prefill steps (the N - 1 prefills that may be ahead)."""

    def queue(x: float, step: float, kp: float, prompt_step: float) -> float:
        rate = others * x / step  # the other clients' prompts a second
        service = kp * prompt_step
        rho = rate * service
        return rate * service * service / (2 * (1 - rho)) if 0 < rho < 1 else 0.0

    decode_steps = max(o - 1, 0)
    budget = vllm_step_budget(replica.instance)[0]
    others = (clients - 1) / clients
    wait_steps = 1 if clients > 1 else 0
    x_bound = budget / (p + decode_steps)
    x = min(clients, cap) / (1 + decode_steps + wait_steps)
    limited = False
    for _ in range(MAX_ITERATIONS):
        decoding = min(float(cap), x * decode_steps)
        kp, step, prompt_step, bound = _steps(replica, p, o, x, decoding, others)
        in_engine = wait_steps * step + queue(x, step, kp, prompt_step) + kp * prompt_step + decode_steps * step
        cycle = in_engine + think_s
        limited = clients * in_engine / cycle > cap
        x_new = min((cap if limited else clients * in_engine / cycle) * step / in_engine, x_bound)
        if abs(x_new - x) <= 1e-10 * max(x, 1e-12):
            x = x_new
            break
        x = 0.5 * (x + x_new)
    decoding = min(float(cap), x * decode_steps)
    kp, step, prompt_step, bound = _steps(replica, p, o, x, decoding, others)
    own = wait_steps * step + queue(x, step, kp, prompt_step) + kp * prompt_step
    if bound or limited:
        throughput = x / step
        return max(own, clients / throughput - think_s - decode_steps * step), step, throughput, kp, bound, limited
    return own, step, clients / (own + decode_steps * step + think_s), kp, bound, limited


def closed_loop(
    replica: Replica,
    input_tokens: int,
    output_tokens: int,
    clients: int,
    think_s: float = 0.0,
    prompts: Optional[int] = None,
    lockstep: bool = True,
) -> EngineLoad:
    """Steady state of `clients` closed-loop clients on one engine (see the module docstring).

    `lockstep`: requests of one length (`vllm bench serve` random prompts, `--ignore-eos`) that start
    together finish together and come back together, so their prompts run as a convoy; False for
    clients whose requests drift apart. With `prompts` (what `vllm bench serve --num-prompts` sends) the
    TTFT is the mean over that many requests, the first wave included: all clients start at once and
    queue behind each other's prompts.
    """
    p, o = input_tokens, output_tokens
    decode_steps = max(o - 1, 0)
    cap = resident_cap(replica, p, o)
    if cap < 1:
        raise ValueError("one request's KV cache does not fit beside the weights")
    if not lockstep:
        ttft, itl, throughput, kp, bound, limited = _desynchronized(replica, p, o, clients, think_s, cap)
        resident = min(float(cap), throughput * (ttft + decode_steps * itl))
        return EngineLoad(
            resident=resident,
            decoding=min(resident, throughput * decode_steps * itl),
            steps_prefilling=kp,
            step_s=itl,
            prompt_step_s=itl,
            requests_per_step=throughput * itl,
            ttft_s=ttft,
            itl_s=itl,
            throughput_rps=throughput,
            saturated=bound or limited,
            queued=max(0.0, clients - think_s * throughput - resident),
        )
    return _stepped(replica, p, o, clients, think_s, prompts, cap)


def _stepped(
    replica: Replica, p: int, o: int, clients: int, think_s: float, prompts: Optional[int], cap: int
) -> EngineLoad:
    """Fixed lengths: the scheduler stepped (stepped.py). With `prompts`, the run `vllm bench serve`
    makes (the first wave and the drain included); without, a steady state: four requests a client,
    the means over those sent after the first wave and before the drain. Past twice the resident cap
    the queue only lengthens: the run at that many clients gives the throughput, and each client more
    waits 1 / X longer for its first token (Little's law over the loop)."""
    simulated = min(clients, max(2 * cap, 1))
    if prompts is not None and prompts > 0 and clients <= simulated:
        requests, measured = min(prompts, stepped.MAX_REQUESTS), None
    else:
        requests = min(4 * simulated, stepped.MAX_REQUESTS)
        measured = (simulated, max(requests - simulated, simulated + 1))
    found = stepped.run(replica, p, o, simulated, requests, cap, think_s, measured)
    ttft, x = found.ttft_s, found.throughput_rps
    queued = found.waiting
    if clients > simulated:  # the extra clients queue at the same throughput
        ttft += (clients - simulated) / x
        queued += clients - simulated
    return EngineLoad(
        resident=found.resident,
        decoding=found.decoding,
        steps_prefilling=found.steps_prefilling,
        step_s=found.itl_s,
        prompt_step_s=found.prompt_step_s,
        requests_per_step=found.requests_per_step,
        ttft_s=ttft,
        itl_s=found.itl_s,
        throughput_rps=x,
        saturated=found.budget_bound or clients > cap,
        queued=queued,
    )


def capacity_rps(replica: Replica, input_tokens: int, output_tokens: int) -> float:
    """Requests a second the engine finishes at most (its budget or resident cap binding)."""
    cap = resident_cap(replica, input_tokens, output_tokens)
    return closed_loop(replica, input_tokens, output_tokens, max(cap, 1) * 4).throughput_rps


def open_loop(replica: Replica, input_tokens: int, output_tokens: int, rate: float) -> Optional[EngineLoad]:
    """Poisson arrivals at `rate` requests/s; None past capacity (the queue grows without bound).

    Little's law gives the sequences decoding (rate x (O - 1) x step); prompts queue on the budget left
    as an M/D/1 server (Pollaczek-Khinchine) and wait half a step for the running one to end.
    """
    p, o = input_tokens, output_tokens
    if rate >= capacity_rps(replica, p, o):
        return None
    cap = resident_cap(replica, p, o)
    budget = vllm_step_budget(replica.instance)[0]
    step = replica.step_seconds(1, p + o / 2)
    for _ in range(MAX_ITERATIONS):
        x = rate * step
        decoding = min(float(cap), rate * max(o - 1, 0) * step)
        _, new, _, _ = _steps(replica, p, o, x, decoding, 1.0)
        if abs(new - step) <= 1e-12:
            break
        step = 0.5 * (step + new)
    x = rate * step
    decoding = min(float(cap), rate * max(o - 1, 0) * step)
    kp, step, prompt_step, bound = _steps(replica, p, o, x, decoding, 1.0)
    left = max(1.0, budget - decoding)
    service = math.ceil(p / left) * prompt_step  # one prompt's prefill steps
    rho = rate * service
    if rho >= 1 or bound:
        return None
    wait = rate * service * service / (2 * (1 - rho)) + step / 2
    ttft = wait + math.ceil(p / left) * prompt_step
    return EngineLoad(
        resident=decoding + rate * ttft,
        decoding=decoding,
        steps_prefilling=kp,
        step_s=step,
        prompt_step_s=prompt_step,
        requests_per_step=x,
        ttft_s=ttft,
        itl_s=step,
        throughput_rps=rate,
        saturated=False,
        queued=0.0,
    )
