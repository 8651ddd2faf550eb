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


class _Engine:
    """The scheduler's state while a run steps: the requests' times, the queues, the running sums."""

    def __init__(self, replica: Replica, p: int, o: int, clients: int, requests: int, cap: int, think_s: float):
        self.replica, self.p, self.o, self.cap, self.think_s, self.requests = replica, p, o, cap, think_s, requests
        self.budget = vllm_step_budget(replica.instance)[0]
        self.arrival = [0.0] * requests  # when the request reaches the engine (sent, after the client's think time)
        self.first = [0.0] * requests
        self.done = [0.0] * requests
        self.steps_to_first = [0] * requests  # steps from admission to first token
        self.arrivals: list[tuple[float, int]] = []  # (time, request) not yet at the engine
        self.issued = min(clients, requests)
        for i in range(self.issued):
            heapq.heappush(self.arrivals, (0.0, i))
        self.waiting: deque[int] = deque()
        self.prefilling: deque[list[int]] = deque()  # [request, prompt tokens computed]
        self.finishing: deque[tuple[int, int]] = deque()  # (step of its last token, request), in step order
        self.decoding = 0
        self.context_sum = 0.0  # tokens of the decoding sequences
        self.t = 0.0
        self.streamed = 0.0  # when the API server has sent every token so far
        self.step = 0
        self.ended = 0
        self.area_resident = self.area_decoding = self.area_waiting = 0.0
        self.prompt_steps = self.prompt_time = 0.0
        self.full_steps = 0

    def end(self, request: int, at: float) -> None:
        """The request's last token reached its client at `at`: the client sends its next one."""
        self.done[request] = at
        self.ended += 1
        if self.issued < self.requests:
            self.arrival[self.issued] = at + self.think_s
            heapq.heappush(self.arrivals, (at + self.think_s, self.issued))
            self.issued += 1

    def take_arrivals(self) -> bool:
        """Queue what has arrived; False (time moved on to the next arrival) where the engine is idle."""
        busy = self.decoding > 0 or bool(self.prefilling)
        # a request that arrives as this step starts waits for the next one while the engine is busy
        while self.arrivals and (self.arrivals[0][0] < self.t or (not busy and self.arrivals[0][0] <= self.t)):
            self.waiting.append(heapq.heappop(self.arrivals)[1])
        if not busy and not self.waiting:
            self.t = max(self.t, self.arrivals[0][0])
            return False
        return True

    def schedule(self) -> tuple[int, float, int, int, int]:
        """One step's prompt work: (tokens, attention, prompts completing, resident, budget left)."""
        left = self.budget - self.decoding
        tokens = 0
        attention = 0.0  # token-positions the prompt chunks attend to
        completing = 0  # prompts whose last chunk is in this step (the head of `prefilling`)
        for entry in self.prefilling:
            if left <= 0:
                break
            chunk = min(self.p - entry[1], left)
            attention += chunk * (entry[1] + chunk / 2)
            entry[1] += chunk
            left -= chunk
            tokens += chunk
            completing += entry[1] == self.p
        resident = self.decoding + len(self.prefilling)
        while self.waiting and left > 0 and resident < self.cap:
            request = self.waiting.popleft()
            chunk = min(self.p, left)
            attention += chunk * chunk / 2
            self.prefilling.append([request, chunk])
            self.steps_to_first[request] = -self.step
            left -= chunk
            tokens += chunk
            completing += chunk == self.p
            resident += 1
        return tokens, attention, completing, resident, left

    def advance(self, tokens: int, attention: float, completing: int, resident: int, left: int) -> None:
        """The step's time passes; its tokens stream; finished requests end, completed prompts decode."""
        decoding = self.decoding
        dt = self.replica.step_seconds(
            decoding, self.context_sum / decoding if decoding else 0.0, tokens, attention / tokens if tokens else 0.0
        )
        self.area_resident += resident * dt
        self.area_decoding += decoding * dt
        self.area_waiting += len(self.waiting) * dt
        if tokens:
            self.prompt_steps += 1
            self.prompt_time += dt
            self.full_steps += left <= 0
        self.t += dt
        self.step += 1
        self.context_sum += decoding
        # one API-server process streams every token the step emitted, one after another
        self.streamed = max(self.streamed, self.t) + self.replica.constants.stream_token_s * (decoding + completing)
        seen = self.streamed  # when the client has them (the step's end, with no stream cost)
        p, o = self.p, self.o
        while self.finishing and self.finishing[0][0] == self.step:
            request = self.finishing.popleft()[1]
            self.decoding -= 1
            self.context_sum -= p + o
            self.end(request, seen)
        for _ in range(completing):
            request = self.prefilling.popleft()[0]
            self.first[request] = seen
            self.steps_to_first[request] += self.step
            if o <= 1:
                self.end(request, seen)
            else:
                self.decoding += 1
                self.context_sum += p + 1
                self.finishing.append((self.step + o - 1, request))

    def result(self, clients: int, measured: Optional[tuple[int, int]]) -> SteppedRun:
        t = max(self.t, self.streamed)
        first_idx, end_idx = measured or (0, self.requests)
        chosen = range(first_idx, end_idx)
        count = max(len(chosen), 1)
        o = self.o
        ttft = sum(self.first[i] - self.arrival[i] for i in chosen) / count
        itl = sum(self.done[i] - self.first[i] for i in chosen) / (count * (o - 1)) if o > 1 else 0.0
        if measured is None:
            throughput = self.requests / t
        else:  # a steady state: Little's law over the measured requests' cycles
            cycle = sum(self.done[i] - self.arrival[i] for i in chosen) / count + self.think_s
            throughput = clients / cycle
        return SteppedRun(
            ttft_s=ttft,
            itl_s=itl,
            throughput_rps=throughput,
            duration_s=t,
            resident=self.area_resident / t,
            decoding=self.area_decoding / t,
            waiting=self.area_waiting / t,
            steps_prefilling=sum(self.steps_to_first[i] for i in chosen) / count,
            step_s=t / self.step,
            prompt_step_s=self.prompt_time / self.prompt_steps if self.prompt_steps else 0.0,
            requests_per_step=self.requests / self.step,
            budget_bound=self.full_steps > self.prompt_steps / 2,
        )


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
    engine = _Engine(replica, input_tokens, output_tokens, clients, requests, cap, think_s)
    while engine.ended < requests:
        if engine.take_arrivals():
            engine.advance(*engine.schedule())
    return engine.result(clients, measured)
