"""vLLM V1's scheduler, stepped: closed-loop clients of fixed lengths on one aggregated engine.

A closed form of the loop has to guess how requests line up (a convoy of prompts, a queue, prompts
that straddle a step); stepping the scheduler's own rule needs no guess, and each new load shape (two
8k prompts that share one 8192-token budget, a short-prompt step packing 64 prompts, a queue past the
resident cap) falls out of the same few lines. The rule (vllm/v1/core/sched/scheduler.py at v0.26.0):

* each step first serves the running requests in the order they were admitted: a decoding one takes
  one token, one still prefilling its next chunk (what is left of its prompt, up to the budget left);
* then, while budget is left and the engine holds fewer than its resident cap (`max_num_seqs` and
  whole KV blocks of a full-length request, `loop.resident_cap`), waiting requests are admitted in
  arrival order and start their first chunk;
* a prompt emits its first token at the end of the step that carries its last chunk, then one token a
  step; the step's time is `Replica.step_seconds` of what it carries;
* one API-server process streams every token, `stream_token_s` of its time each, in the order the steps
  emit them: a client sees a token when it is sent (past that rate the stream, not the GPU, is the
  ceiling: `vllm serve` runs one API-server process unless `--api-server-count` says more).

The clients are `vllm bench serve --max-concurrency N --num-prompts M`: all N start at once, each sends
its next request when the last ends (after `think_s`), M in all. A request that ends as a step ends is
not in the step the engine starts at that instant: vLLM schedules the next step before the finished
one's outputs reach the API server (asynchronous scheduling, on by default: the 0.26.0 server's log says
"Asynchronous scheduling is enabled"); an idle engine takes it at once. Preemption and prefix caching
are left out (the resident cap reserves a full-length request's blocks).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Optional

from llm_pd_eks_sizing.model.engine import Replica, vllm_step_budget

MAX_REQUESTS = 50_000  # a run's bound (a steady state past it is extended by Little's law, loop.py)


@dataclass(frozen=True)
class SteppedRun:
    """What `vllm bench serve` would report of the measured requests, and the engine's means."""

    ttft_s: float  # mean time to first token
    itl_s: float  # mean gap between a request's tokens (every gap of every measured request)
    throughput_rps: float  # measured requests a second
    duration_s: float  # the whole run, first request to last token
    resident: float  # time-averaged requests in the engine (prefilling or decoding)
    decoding: float  # time-averaged sequences decoding
    waiting: float  # time-averaged requests queued for a slot or the budget
    steps_prefilling: float  # mean steps from admission to first token
    step_s: float  # mean step
    prompt_step_s: float  # mean step that carries prompt tokens
    requests_per_step: float
    budget_bound: bool  # most prompt-carrying steps used the whole token budget


def run(
    replica: Replica,
    input_tokens: int,
    output_tokens: int,
    clients: int,
    requests: int,
    cap: int,
    think_s: float = 0.0,
    measured: Optional[tuple[int, int]] = None,
) -> SteppedRun:
    """Step the engine until `requests` requests of `clients` closed-loop clients have ended.

    `measured` = (first, end) request indices the means are taken over (all of them by default); the
    requests are numbered in the order they are sent.
    """
    if not 1 <= requests <= MAX_REQUESTS or clients < 1 or cap < 1:
        raise ValueError(f"a stepped run needs 1..{MAX_REQUESTS:,} requests, clients and a resident cap >= 1")
    p, o = input_tokens, output_tokens
    budget = vllm_step_budget(replica.instance)[0]
    first_idx, end_idx = measured or (0, requests)
    arrival = [0.0] * requests  # when the request reaches the engine (sent, after the client's think time)
    first = [0.0] * requests
    done = [0.0] * requests
    steps_to_first = [0] * requests  # steps from admission to first token
    arrivals: list[tuple[float, int]] = []  # (time, request) not yet at the engine
    issued = min(clients, requests)
    for i in range(issued):
        heapq.heappush(arrivals, (0.0, i))
    waiting: deque[int] = deque()
    prefilling: deque[list[int]] = deque()  # [request, prompt tokens computed]
    finishing: deque[tuple[int, int]] = deque()  # (step of its last token, request), in step order
    decoding = 0
    context_sum = 0.0  # tokens of the decoding sequences
    t = 0.0
    stream_s = replica.constants.stream_token_s
    streamed = 0.0  # when the API server has sent every token so far
    step = 0
    ended = 0
    area_resident = area_decoding = area_waiting = 0.0
    prompt_steps = prompt_time = 0.0
    full_steps = 0

    def end(request: int, at: float) -> None:
        """The request's last token reached its client at `at`: the client sends its next one."""
        nonlocal ended, issued
        done[request] = at
        ended += 1
        if issued < requests:
            arrival[issued] = at + think_s
            heapq.heappush(arrivals, (at + think_s, issued))
            issued += 1

    while ended < requests:
        busy = decoding > 0 or bool(prefilling)
        # a request that arrives as this step starts waits for the next one while the engine is busy
        while arrivals and (arrivals[0][0] < t or (not busy and arrivals[0][0] <= t)):
            waiting.append(heapq.heappop(arrivals)[1])
        if not busy and not waiting:
            t = max(t, arrivals[0][0])
            continue
        left = budget - decoding
        tokens = 0
        attention = 0.0  # token-positions the prompt chunks attend to
        completing = 0  # prompts whose last chunk is in this step (the head of `prefilling`)
        for entry in prefilling:
            if left <= 0:
                break
            chunk = min(p - entry[1], left)
            attention += chunk * (entry[1] + chunk / 2)
            entry[1] += chunk
            left -= chunk
            tokens += chunk
            completing += entry[1] == p
        resident = decoding + len(prefilling)
        while waiting and left > 0 and resident < cap:
            request = waiting.popleft()
            chunk = min(p, left)
            attention += chunk * chunk / 2
            prefilling.append([request, chunk])
            steps_to_first[request] = -step
            left -= chunk
            tokens += chunk
            completing += chunk == p
            resident += 1
        dt = replica.step_seconds(
            decoding, context_sum / decoding if decoding else 0.0, tokens, attention / tokens if tokens else 0.0
        )
        area_resident += resident * dt
        area_decoding += decoding * dt
        area_waiting += len(waiting) * dt
        if tokens:
            prompt_steps += 1
            prompt_time += dt
            full_steps += left <= 0
        t += dt
        step += 1
        context_sum += decoding
        # one API-server process streams every token the step emitted, one after another
        streamed = max(streamed, t) + stream_s * (decoding + completing)
        seen = streamed  # when the client has them (the step's end, with no stream cost)

        while finishing and finishing[0][0] == step:
            request = finishing.popleft()[1]
            decoding -= 1
            context_sum -= p + o
            end(request, seen)
        for _ in range(completing):
            request = prefilling.popleft()[0]
            first[request] = seen
            steps_to_first[request] += step
            if o <= 1:
                end(request, seen)
            else:
                decoding += 1
                context_sum += p + 1
                finishing.append((step + o - 1, request))

    t = max(t, streamed)
    chosen = range(first_idx, end_idx)
    count = max(len(chosen), 1)
    ttft = sum(first[i] - arrival[i] for i in chosen) / count
    itl = sum(done[i] - first[i] for i in chosen) / (count * (o - 1)) if o > 1 else 0.0
    if measured is None:
        throughput = requests / t
    else:  # a steady state: Little's law over the measured requests' cycles
        cycle = sum(done[i] - arrival[i] for i in chosen) / count + think_s
        throughput = clients / cycle
    return SteppedRun(
        ttft_s=ttft,
        itl_s=itl,
        throughput_rps=throughput,
        duration_s=t,
        resident=area_resident / t,
        decoding=area_decoding / t,
        waiting=area_waiting / t,
        steps_prefilling=sum(steps_to_first[i] for i in chosen) / count,
        step_s=t / step,
        prompt_step_s=prompt_time / prompt_steps if prompt_steps else 0.0,
        requests_per_step=requests / step,
        budget_bound=full_steps > prompt_steps / 2,
    )
