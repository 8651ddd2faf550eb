"""The point query: one layout at one load (`python -m llm_pd_eks_sizing.size --point`).

`concurrency` closed-loop clients (`vllm bench serve --max-concurrency`), or an open-loop Poisson
`rate`, on one aggregated engine (llm_pd_eks_sizing/model/loop.py) or on one prefill plus one decode
engine with the KV handoff between them (llm_pd_eks_sizing/model/kv.py: kv_transfer). What the answer
cannot price it refuses or flags: prompts beyond the model's native context and a KV cache that does
not fit are refused; a TP term without a measurement and disaggregation without GPUDirect RDMA are
flagged in `flags`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from llm_pd_eks.catalog import GpuInstanceType
from llm_pd_eks.models import NATIVE_CONTEXT, ModelSpec
from llm_pd_eks_sizing.model.engine import VLLM_BF16, EngineConstants, Replica, has_nvlink, tp_basis, vllm_step_budget
from llm_pd_eks_sizing.model.kv import KvTransfer, kv_transfer
from llm_pd_eks_sizing.model.loop import MAX_ITERATIONS, closed_loop, open_loop, resident_cap
from llm_pd_eks_tools.core.cli import Exit, ToolError


@dataclass(frozen=True)
class PointAnswer:
    """Mean latencies at one load on one replica (aggregated) or one prefill plus one decode replica
    (disaggregated); `request_rate` is what the loop settles at (closed) or was given (open)."""

    mode: str
    ttft_ms: float
    itl_ms: float
    e2e_ms: float
    output_tokens_per_s: float  # per replica (disaggregated: per prefill + decode pair)
    kv_transfer_ms: float
    request_rate: float
    loop: str = "closed"  # closed (N clients) or open (a Poisson rate)
    saturated: bool = False  # a token budget or the resident cap binds: TTFT grows with the load
    queued: float = 0.0  # requests waiting for a slot, past capacity
    tp_basis: str = ""
    kv_basis: str = ""
    constants: str = ""
    flags: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _refuse_unservable(model: ModelSpec, replica: Replica, input_tokens: int, output_tokens: int) -> None:
    native = NATIVE_CONTEXT.get(model.model_id)
    if native is not None and input_tokens + output_tokens > native:
        raise ToolError(
            Exit.USAGE,
            f"{input_tokens:,} + {output_tokens:,} tokens exceed {model.model_id}'s native context "
            f"({native:,}, config.json max_position_embeddings); vLLM refuses such a request",
        )
    if resident_cap(replica, input_tokens, output_tokens) < 1:
        raise ToolError(
            Exit.USAGE,
            f"one {input_tokens + output_tokens:,}-token request's KV cache does not fit beside the weights of "
            f"{model.model_id} on TP {replica.tp} x {replica.instance.gpu_model}",
        )


def _flags(replica: Replica, mode: str, kv: Optional[KvTransfer], constants: EngineConstants) -> list[str]:
    out = []
    if replica.tp > 1:
        out.append(tp_basis(replica.instance, replica.tp))
        if not has_nvlink(replica.instance):
            out.append(f"no NVLink on {replica.instance.gpu_model}: TP all-reduce over PCIe (assumed rate)")
    if constants.prefill_step_s == 0:
        out.append("prefill intercept not measured (0): short prompts read optimistic")
    if mode == "disaggregated" and kv is not None and not kv.rdma:
        out.append(kv.basis)
    return out


def _disaggregated(
    prefill: Replica, decode: Replica, p: int, o: int, clients: int, kv_s: float, think_s: float
) -> tuple[float, float, float, bool, float]:
    """(TTFT, ITL, requests/s, saturated, queued) of a prefill and a decode engine in series.

    The prefill engine runs prompt-only steps of up to its token budget (a burst of prompts shares a
    step; more than a step's worth stream at the budget a step); the decode engine holds the requests
    decoding. The loop settles where clients = X (TTFT + (O - 1) ITL + think) (fixed point)."""
    budget = vllm_step_budget(prefill.instance)[0]
    cap = resident_cap(decode, p, o)
    decode_steps = max(o - 1, 0)
    n = float(clients)
    for _ in range(MAX_ITERATIONS):
        tokens = min(float(budget), max(1.0, n) * p)
        step = prefill.step_seconds(0, 0, tokens, p / 2)
        streaming = n * p > budget
        own = (1 + (p - 1) / budget) if streaming else 1.0
        wait = 1.0 if streaming and clients > 1 else 0.0
        prefill_s = (own + wait) * step
        decoding = min(float(cap), n)
        itl = decode.step_seconds(decoding, p + o / 2)
        ttft = prefill_s + kv_s + itl
        cycle = ttft + decode_steps * itl + think_s
        x = clients / cycle
        prefill_rate = budget / p / step  # prompts a second at a full budget
        decode_rate = cap / (decode_steps * itl) if decode_steps else math.inf
        bound = x > min(prefill_rate, decode_rate)
        new = min(float(clients), clients * (cycle - think_s) / cycle)
        if abs(new - n) < 1e-6:
            break
        n = 0.5 * (n + new)
    queued = 0.0
    if bound:
        x = min(prefill_rate, decode_rate)
        ttft = max(ttft, clients / x - think_s - decode_steps * itl)
        queued = max(0.0, clients - x * (think_s + decode_steps * itl + prefill_s + kv_s + itl))
    return ttft, itl, x, bound, queued


def point_query(
    model: ModelSpec,
    instance: GpuInstanceType,
    tp: int,
    input_tokens: int,
    output_tokens: int,
    concurrency: Optional[int],
    mode: str = "aggregated",
    kv_dtype_bytes: int = 2,
    constants: Optional[EngineConstants] = None,
    kv_rows: Optional[list[tuple[int, float]]] = None,
    rate: Optional[float] = None,
    think_s: float = 0.0,
    prompts: Optional[int] = None,
    lockstep: bool = True,
) -> PointAnswer:
    """What the model says one layout does at one load: `concurrency` closed-loop clients (each with
    `think_s` between its requests; `prompts` requests in all, the first wave included) or, with
    `rate`, Poisson arrivals."""
    row = constants or VLLM_BF16
    replica = Replica(model, instance, tp, kv_dtype_bytes, constants=row)
    _refuse_unservable(model, replica, input_tokens, output_tokens)
    if mode not in ("aggregated", "disaggregated"):
        raise ToolError(Exit.USAGE, f"--mode {mode!r}: expected aggregated or disaggregated")
    if (rate is None) == (concurrency is None):
        raise ToolError(Exit.USAGE, "the point query needs a concurrency (closed loop) or a rate (open loop)")
    p, o = input_tokens, output_tokens
    kv = kv_transfer(model, p, kv_dtype_bytes, instance, tp, kv_rows) if mode == "disaggregated" else None
    kv_s = kv.seconds if kv is not None else 0.0
    saturated, queued = False, 0.0
    if mode == "aggregated" and rate is None:
        assert concurrency is not None
        load = closed_loop(replica, p, o, concurrency, think_s, prompts, lockstep)
        ttft, itl, x, saturated, queued = load.ttft_s, load.itl_s, load.throughput_rps, load.saturated, load.queued
    elif mode == "aggregated":
        assert rate is not None
        found = open_loop(replica, p, o, rate)
        if found is None:
            raise ToolError(
                Exit.FAILED,
                f"{rate:g} requests/s is past this replica's capacity: the queue grows without bound "
                "(ask a closed loop with --concurrency for the latency past it)",
            )
        ttft, itl, x = found.ttft_s, found.itl_s, rate
    elif rate is None:
        assert concurrency is not None
        ttft, itl, x, saturated, queued = _disaggregated(replica, replica, p, o, concurrency, kv_s, think_s)
    else:
        ttft, itl, x, saturated, queued = _disaggregated(replica, replica, p, o, 10**6, kv_s, 1e6 / rate)
        if saturated:
            raise ToolError(Exit.FAILED, f"{rate:g} requests/s is past this prefill/decode pair's capacity")
    e2e = ttft + max(o - 1, 0) * itl
    return PointAnswer(
        mode=mode,
        ttft_ms=ttft * 1e3,
        itl_ms=itl * 1e3,
        e2e_ms=e2e * 1e3,
        output_tokens_per_s=x * o,
        kv_transfer_ms=kv_s * 1e3,
        request_rate=x,
        loop="open" if rate is not None else "closed",
        saturated=saturated,
        queued=queued,
        tp_basis=tp_basis(instance, tp),
        kv_basis=kv.basis if kv is not None else "",
        constants=row.source,
        flags=_flags(replica, mode, kv, row) + _loop_flags(mode, rate, concurrency, prompts, lockstep),
    )


def _loop_flags(
    mode: str, rate: Optional[float], clients: Optional[int], prompts: Optional[int], lockstep: bool
) -> list[str]:
    if rate is not None or clients is None or clients < 2:
        return []
    if mode == "disaggregated":
        return [
            "disaggregated closed loop: steady state, prompts streamed at the prefill budget (no convoy, no first wave)"
        ]
    out = [] if lockstep else ["clients drift apart (--no-lockstep): no convoy"]
    if prompts is None:
        out.append("steady state: the first wave (all clients starting together) is left out; pass --prompts")
    return out
