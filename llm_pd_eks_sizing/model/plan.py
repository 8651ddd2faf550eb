"""The search: fewest replicas per side that meet the objectives, priced, and the whole answer."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from llm_pd_eks.catalog import GpuInstanceType, gpu_instance_type
from llm_pd_eks.config import GPU_MEMORY_BUDGET, StackConfig
from llm_pd_eks.kv_transfer import KvBand, kv_band
from llm_pd_eks.models import MODELS, ModelSpec
from llm_pd_eks.prices import PRICES_FILE
from llm_pd_eks_sizing.model.calibration import calibration_path, load_calibration
from llm_pd_eks_sizing.model.engine import (
    VLLM_BF16,
    EngineConstants,
    Replica,
    gpu_memory_gib,
    has_nvlink,
    tp_basis,
    vllm_step_budget,
)
from llm_pd_eks_sizing.model.kv import KvTransfer, kv_transfer
from llm_pd_eks_sizing.model.queueing import (
    _batch_cap,
    _decode_fixed_point,
    _Infeasible,
    _service_moments,
    aggregated_load,
    mg1_wait_quantile,
)
from llm_pd_eks_sizing.model.workload import Workload
from llm_pd_eks_tools.core.cli import ROOT, Exit, ToolError

# The model's mean TTFT under load read low against the engine it was fitted to: on the saved GPU
# calibration (llm_pd_eks_sizing/calibrate/data/gpu-calibration-2026-12-04, vLLM 0.26.0 on one H200),
# Llama-3.1-8B at 8-128 closed-loop clients came out at 0.65x (128-token prompts, 8 clients) to 1.02x
# of measured, 0.65-0.85x at 32 clients and up. Until the queueing model carries what it misses
# (per-request work in the API server and scheduler that grows with the clients), both layouts are
# sized to meet the TTFT objective with the predicted TTFT at most this fraction of it, so the
# verdict compares plans that hold at the measured TTFT, not at the model's.
# tests/unit/test_sizing_ttft_margin.py recomputes it from the saved run.
TTFT_UNDER_LOAD_RATIO = 0.65


def ttft_budget_s(workload: Workload) -> float:
    """The TTFT a plan may predict: the objective times TTFT_UNDER_LOAD_RATIO."""
    return workload.slo.ttft_ms / 1000 * TTFT_UNDER_LOAD_RATIO


MAX_REPLICAS = 512  # search bound: beyond this the answer is "this GPU type cannot serve it"


@dataclass
class Side:
    """Replicas of one role and the latency they reach at the workload's percentile."""

    role: str
    tp: int
    replicas: int
    replicas_per_node: int
    ttft_ms: Optional[float] = None
    itl_ms: Optional[float] = None
    batch: Optional[float] = None  # sequences a decode(-capable) replica holds on average
    # requests a replica holds on average at the sized load (Little's law): what Serve's
    # target_ongoing_requests counts (`make size WRITE=1` writes it)
    concurrency: Optional[float] = None

    @property
    def nodes(self) -> int:
        return math.ceil(self.replicas / self.replicas_per_node)

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp


@dataclass
class Plan:
    """One way of serving the workload (disaggregated or aggregated) or why it cannot be done."""

    mode: str
    sides: list[Side] = field(default_factory=list)
    feasible: bool = True
    reason: str = ""
    hourly: Optional[float] = None
    usd_per_mtok: Optional[float] = None
    usd_per_mtok_total: Optional[float] = None  # per million input + output tokens

    @property
    def nodes(self) -> int:
        return sum(s.nodes for s in self.sides)

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.sides)

    def side(self, role: str) -> Side:
        return next(s for s in self.sides if s.role == role)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "feasible": self.feasible,
            "reason": self.reason,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "hourly": self.hourly,
            "usd_per_mtok": self.usd_per_mtok,
            "usd_per_mtok_total": self.usd_per_mtok_total,
            "sides": [{**asdict(s), "nodes": s.nodes, "gpus": s.gpus} for s in self.sides],
        }


def size_decode(replica: Replica, workload: Workload) -> Side:
    """Fewest decode replicas whose step time meets the ITL objective and whose batch fits memory."""
    context = workload.input_tokens.mean + workload.output_tokens.mean / 2  # a sequence's average live length
    tokens_s = workload.request_rate * workload.output_tokens.mean
    cap, slo = _batch_cap(replica, workload), workload.slo.itl_ms / 1000
    per_node = replica.instance.gpus // replica.tp
    if replica.decode_step_seconds(1, context) > slo:
        raise _Infeasible(
            f"decode: one sequence alone takes {replica.decode_step_seconds(1, context) * 1e3:.1f} ms a step on "
            f"TP {replica.tp} x {replica.instance.gpu_model}, above the {workload.slo.itl_ms:g} ms ITL objective"
        )
    if cap < 1:
        raise _Infeasible(
            f"decode: a {workload.input_tokens.mean + workload.output_tokens.mean:.0f}-token sequence's "
            f"KV cache does not fit beside the weights on TP {replica.tp}"
        )
    for replicas in range(1, MAX_REPLICAS + 1):
        batch = _decode_fixed_point(replica, tokens_s / replicas, context)
        if batch <= cap and replica.decode_step_seconds(max(1.0, batch), context) <= slo:
            itl = replica.decode_step_seconds(max(1.0, batch), context)  # a sequence sees itself
            return Side("decode", replica.tp, replicas, per_node, itl_ms=itl * 1e3, batch=batch, concurrency=batch)
    raise _Infeasible(f"decode: more than {MAX_REPLICAS} replicas needed")


def size_prefill(replica: Replica, workload: Workload, transfer_s_per_token: float, first_step_s: float = 0.0) -> Side:
    """Fewest prefill replicas whose percentile TTFT meets the objective.

    TTFT = queue + prefill + KV transfer + the decode replica's first step: Ray Serve LLM's PD proxy
    sends the prefill replica the request with max_tokens=1 and stream=False, then streams the client's
    tokens, the first included, from the decode replica that pulled the KV cache
    (ray.llm PDProxyServer._prepare_prefill_request / _prepare_decode_request).
    """
    p = workload.slo.percentile / 100
    c, a, b = replica.prefill_coefficients()
    mean_s, second_s = _service_moments(c, a, b, workload.input_tokens)
    tail_len = workload.input_tokens.quantile(p)
    own = replica.prefill_seconds(tail_len) + transfer_s_per_token * tail_len + first_step_s
    slo = ttft_budget_s(workload)
    per_node = replica.instance.gpus // replica.tp
    if own > slo:
        raise _Infeasible(
            f"prefill: a p{workload.slo.percentile:g} prompt ({tail_len:,.0f} tokens) takes {own * 1e3:,.0f} ms "
            f"to prefill, hand over and decode its first token on TP {replica.tp} x {replica.instance.gpu_model}, "
            f"above {slo * 1e3:,.0f} ms ({TTFT_UNDER_LOAD_RATIO:g} of the {workload.slo.ttft_ms:g} ms TTFT objective, "
            "the model's measured shortfall under load) at any replica count"
        )
    for replicas in range(1, MAX_REPLICAS + 1):
        rate = workload.request_rate / replicas
        wait = mg1_wait_quantile(rate, mean_s, second_s, p)
        if wait + own <= slo:
            mean_wait = rate * second_s / (2 * (1 - rate * mean_s))  # Pollaczek-Khinchine
            return Side(
                "prefill",
                replica.tp,
                replicas,
                per_node,
                ttft_ms=(wait + own) * 1e3,
                concurrency=rate * (mean_wait + mean_s),
            )
    raise _Infeasible(f"prefill: more than {MAX_REPLICAS} replicas needed")


def size_aggregated(replica: Replica, workload: Workload) -> Side:
    """Fewest replicas doing both phases (vLLM chunked prefill) that meet both objectives (`aggregated_load`)."""
    per_node = replica.instance.gpus // replica.tp
    for replicas in range(1, MAX_REPLICAS + 1):
        load = aggregated_load(replica, workload, workload.request_rate / replicas)
        if load is None:
            continue
        if load.itl_tail_s * 1e3 <= workload.slo.itl_ms and load.ttft_tail_s <= ttft_budget_s(workload):
            return Side(
                "aggregated",
                replica.tp,
                replicas,
                per_node,
                ttft_ms=load.ttft_tail_s * 1e3,
                itl_ms=load.itl_tail_s * 1e3,
                batch=load.batch,
                concurrency=load.batch,
            )
    chunk = vllm_step_budget(replica.instance)[0]
    chunk_s = replica.prefill_seconds(min(chunk, workload.input_tokens.quantile(workload.slo.percentile / 100)))
    raise _Infeasible(
        f"aggregated: no replica count up to {MAX_REPLICAS} meets both objectives (prefill chunks of {chunk} "
        f"tokens stall decode steps by {chunk_s * 1e3:.0f} ms against a {workload.slo.itl_ms:g} ms ITL objective)"
    )


# -- cost ------------------------------------------------------------------------------------------
def hourly_price(region: str, instance_type: str, path: Path = PRICES_FILE) -> Optional[float]:
    """On-demand list price per hour from llm_pd_eks/data/prices.json (the preview's table); None if unpriced."""
    prices = json.loads(Path(path).read_text())
    return prices["regions"].get(region, {}).get("instances", {}).get(instance_type)


def usd_per_million_output_tokens(hourly: float, output_tokens_s: float) -> float:
    """$ per million OUTPUT tokens: the whole GPU nodes' on-demand list price per hour, over the output
    tokens/s the workload demands (not the peak the nodes could do)."""
    return hourly / (output_tokens_s * 3600) * 1e6


def usd_per_million_total_tokens(hourly: float, total_tokens_s: float) -> float:
    """The same price over input + output tokens/s (how most API price lists count)."""
    return hourly / (total_tokens_s * 3600) * 1e6


COST_BASIS = (
    "whole GPU nodes at the on-demand list price, as many as the workload's demand needs; "
    "$/Mtok counts output tokens unless it says input + output"
)


# -- the whole answer -----------------------------------------------------------------------------------
@dataclass
class Sizing:
    stack: str
    model_id: str
    instance_type: str
    region: str
    workload: Workload
    band: KvBand
    disaggregated: Plan
    aggregated: Plan
    price_hourly: Optional[float]
    placement: Optional[Placement] = None  # the cheapest TP per side, as advice (not written)
    constants: Optional[EngineConstants] = None  # the efficiency row the answer rests on
    calibration: Optional[str] = None  # calibration/<stack>.yaml when it supplied the constants
    kv_plan: Optional[KvTransfer] = None  # the handoff the plan prices: the p-th prompt's message size
    flags: list[str] = field(default_factory=list)  # what the answer assumes rather than measures

    @property
    def output_tokens_s(self) -> float:
        return self.workload.request_rate * self.workload.output_tokens.mean

    @property
    def total_tokens_s(self) -> float:
        return self.workload.request_rate * (self.workload.input_tokens.mean + self.workload.output_tokens.mean)

    def recommended(self) -> Optional[Plan]:
        """The layout the verdict recommends: the feasible plan on fewer nodes (a draw: disaggregated)."""
        feasible = [p for p in (self.disaggregated, self.aggregated) if p.feasible]
        return min(feasible, key=lambda p: (p.nodes, p.mode != "disaggregated")) if feasible else None

    @property
    def pd_ratio(self) -> Optional[str]:
        if not self.disaggregated.feasible:
            return None
        p, d = self.disaggregated.side("prefill").replicas, self.disaggregated.side("decode").replicas
        g = math.gcd(p, d)
        return f"{p // g}:{d // g}"

    def verdict(self) -> str:
        dis, agg = self.disaggregated, self.aggregated
        if not dis.feasible and not agg.feasible:
            return (
                "neither layout meets the objectives on this GPU type: change the SLOs, the model or the instance type"
            )
        if not dis.feasible:
            return f"disaggregation does not pay here: it cannot meet the objectives ({dis.reason}); serve aggregated"
        if not agg.feasible:
            return (
                "disaggregation pays here: aggregated serving cannot meet the objectives "
                f"({agg.reason}); prefill/decode on separate nodes can"
            )
        if dis.nodes < agg.nodes:
            return f"disaggregation pays here: {dis.nodes} node(s) against {agg.nodes} aggregated for the same SLOs"
        if dis.nodes == agg.nodes:
            return (
                f"a draw on nodes ({dis.nodes} each): disaggregation buys latency isolation, not throughput "
                "(vLLM's own note), at the cost of the KV handoff"
            )
        return (
            f"disaggregation does not pay here: {dis.nodes} node(s) against {agg.nodes} aggregated; "
            "it trades GPUs for latency control this workload does not need"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "model_id": self.model_id,
            "instance_type": self.instance_type,
            "region": self.region,
            "workload": self.workload.model_dump(by_alias=True),
            "kv_band": self.band.as_dict(),
            "disaggregated": self.disaggregated.as_dict(),
            "aggregated": self.aggregated.as_dict(),
            "pd_ratio": self.pd_ratio,
            "output_tokens_s": self.output_tokens_s,
            "total_tokens_s": self.total_tokens_s,
            "price_hourly": self.price_hourly,
            "verdict": self.verdict(),
            "recommended": None if self.recommended() is None else self.recommended().mode,  # type: ignore[union-attr]
            "cost_basis": COST_BASIS,
            "constants": asdict(self.constants) if self.constants else None,
            "calibration": self.calibration,
            "kv_plan": None if self.kv_plan is None else asdict(self.kv_plan),
            "placement": None if self.placement is None else asdict(self.placement),
            "flags": self.flags,
        }


def _priced(plan: Plan, price: Optional[float], output_tokens_s: float, total_tokens_s: float) -> Plan:
    if plan.feasible and price is not None:
        plan.hourly = plan.nodes * price
        plan.usd_per_mtok = usd_per_million_output_tokens(plan.hourly, output_tokens_s)
        plan.usd_per_mtok_total = usd_per_million_total_tokens(plan.hourly, total_tokens_s)
    return plan


def tp_options(model: ModelSpec, instance: GpuInstanceType) -> list[int]:
    """Tensor-parallel sizes a replica can use on this node: powers of two dividing its GPUs, weights fitting."""
    options = []
    tp = 1
    while tp <= instance.gpus:
        if instance.gpus % tp == 0 and model.weights_gib_bf16 / tp <= gpu_memory_gib(instance) * GPU_MEMORY_BUDGET:
            options.append(tp)
        tp *= 2
    return options


@dataclass(frozen=True)
class Placement:
    """The cheapest tensor-parallel layout per side (DistServe-style placement search over TP only)."""

    prefill: Optional[Side]
    decode: Optional[Side]
    aggregated: Optional[Side]

    @property
    def disaggregated_nodes(self) -> Optional[int]:
        return None if self.prefill is None or self.decode is None else self.prefill.nodes + self.decode.nodes


def search_placement(
    model: ModelSpec,
    instance: GpuInstanceType,
    kv_dtype_bytes: int,
    workload: Workload,
    transfer_s_per_token: float,
    constants: EngineConstants = VLLM_BF16,
) -> Placement:
    """For each side (and aggregated), the TP that needs the fewest nodes, then the fewest GPUs.

    Decode first: its step time is part of every TTFT (the first token comes from the decode replica).
    """
    replicas = [Replica(model, instance, tp, kv_dtype_bytes, constants=constants) for tp in tp_options(model, instance)]

    def best(sizer: Callable[[Replica], Side]) -> Optional[Side]:
        sides = []
        for replica in replicas:
            try:
                sides.append(sizer(replica))
            except _Infeasible:
                pass
        return min(sides, key=lambda s: (s.nodes, s.gpus)) if sides else None

    decode = best(lambda r: size_decode(r, workload))
    prefill = None
    if decode is not None:
        first_step = (decode.itl_ms or 0.0) / 1e3
        # each prefill rank moves 1/tp of the KV cache over its own interfaces: per token, tp1 / tp
        prefill = best(lambda r: size_prefill(r, workload, transfer_s_per_token / r.tp, first_step))
    return Placement(prefill, decode, best(lambda r: size_aggregated(r, workload)))


def size(stack: str, config: StackConfig, workload: Workload, root: Optional[Path] = None) -> Sizing:
    """Size `workload` for the stack's model, GPU type and tensor-parallel layout.

    The efficiency constants are calibration/<stack>.yaml's when `make calibrate` wrote one (under
    `root`, the checkout by default), else the vLLM bf16 row.
    """
    if config.serving is None:
        raise ToolError(Exit.USAGE, f"Pulumi.{stack}.yaml has no serving section: there is no model to size for")

    serving = config.serving
    model = MODELS[serving.model_id]
    instance = gpu_instance_type(config.gpu_nodes.instance_type)
    longest = workload.input_tokens.quantile(workload.slo.percentile / 100) + workload.output_tokens.quantile(
        workload.slo.percentile / 100
    )
    if longest > serving.max_model_len:
        raise ToolError(
            Exit.USAGE,
            f"workload: a p{workload.slo.percentile:g} request ({longest:,.0f} tokens in + out) exceeds the stack's "
            f"maxModelLen ({serving.max_model_len:,}); vLLM would refuse it",
        )
    found = load_calibration(stack, root if root is not None else ROOT, config)
    constants = found.engine_constants() if found is not None else VLLM_BF16
    kv_efficiency = found.kv_efficiency if found is not None else None
    calibration = str(calibration_path(stack, Path("."))) if found is not None else None
    dtype = serving.kv_cache_dtype_bytes
    prefill = Replica(model, instance, serving.prefill.tensor_parallel_size, dtype, constants=constants)
    decode = Replica(model, instance, serving.decode.tensor_parallel_size, dtype, constants=constants)
    band = kv_band(
        model,
        round(workload.input_tokens.quantile(workload.slo.percentile / 100)),
        dtype,
        instance,
        serving.prefill.tensor_parallel_size,
        kv_efficiency,
    )
    # the plan moves KV at the rate of the request's message size (nixlbench's table, the stack's own
    # if calibrated); the band stays the line-rate / measured / TCP picture the preview shows
    rows = found.kv_rows() if found is not None else None
    kv_plan = kv_transfer(model, band.tokens, dtype, instance, serving.prefill.tensor_parallel_size, rows)
    per_token = kv_plan.seconds / max(band.tokens, 1)
    dis = Plan("disaggregated")
    try:
        decode_side = size_decode(decode, workload)
        first_step = (decode_side.itl_ms or 0.0) / 1e3
        dis.sides = [size_prefill(prefill, workload, per_token, first_step), decode_side]
    except _Infeasible as exc:
        dis.feasible, dis.reason, dis.sides = False, str(exc), []
    agg = Plan("aggregated")
    try:
        agg.sides = [size_aggregated(decode, workload)]
    except _Infeasible as exc:
        agg.feasible, agg.reason = False, str(exc)
    price = hourly_price(config.region, instance.name)
    out = workload.request_rate * workload.output_tokens.mean
    tp1_per_token = kv_transfer(model, band.tokens, dtype, instance, 1, rows).seconds / max(band.tokens, 1)
    placement = search_placement(model, instance, dtype, workload, tp1_per_token, constants)
    total = workload.request_rate * (workload.input_tokens.mean + workload.output_tokens.mean)
    return Sizing(
        stack,
        model.model_id,
        instance.name,
        config.region,
        workload,
        band,
        _priced(dis, price, out, total),
        _priced(agg, price, out, total),
        price,
        placement,
        constants,
        calibration,
        kv_plan,
        sizing_flags(instance, serving.prefill.tensor_parallel_size, serving.decode.tensor_parallel_size, kv_plan),
    )


def sizing_flags(instance: GpuInstanceType, prefill_tp: int, decode_tp: int, kv_plan: KvTransfer) -> list[str]:
    """What a sizing rests on without a measurement: the TP all-reduce, PCIe instead of NVLink, and
    a KV handoff without GPUDirect RDMA (priced at one TCP flow, the failure case)."""
    out = [
        f"{role}: {tp_basis(instance, tp)}" for role, tp in (("prefill", prefill_tp), ("decode", decode_tp)) if tp > 1
    ]
    out.append(
        f"TTFT planned at {TTFT_UNDER_LOAD_RATIO:g} of the objective: the model's TTFT under load read "
        f"{TTFT_UNDER_LOAD_RATIO:g}-1.02x of measured on the GPU calibration (8B, 8-128 clients)"
    )
    if max(prefill_tp, decode_tp) > 1 and not has_nvlink(instance):
        out.append(f"no NVLink on {instance.gpu_model}: the TP all-reduce goes over PCIe (assumed rate)")
    if not kv_plan.rdma:
        out.append(kv_plan.basis)
    return out
