"""Sizing before apply: from a workload to prefill/decode replicas, nodes, P:D ratio and $/Mtok.

A documented roofline with a queue in front, not a simulator. Every figure is per *replica* (one
vLLM engine over a tensor-parallel group of `tp` GPUs on one node) and comes from:

* **prefill is compute-bound**: time = forward FLOPs (`ModelSpec.forward_flops`) / (tp x the GPU's
  dense BF16 peak x `PREFILL_MFU`);
* **decode is memory-bound**: one step streams the weights once plus every running sequence's KV cache
  (`ModelSpec.kv_bytes_per_token`) at tp x memory bandwidth x `DECODE_MBU` (or the compute roof, if higher);
* **queueing**: each prefill replica is an M/G/1 queue (Poisson arrivals split evenly; DistServe, OSDI'24,
  §4.1 models a prefill instance as M/D/1; Pollaczek-Khinchine gives the mean wait for any service
  distribution) with the usual exponential tail for the percentile; a decode replica holds as many
  sequences as Little's law says (rate x output tokens x step time);
* **KV transfer** per `kv_band`: the node's EFA line rate, the measured NIXL/EFA figure where one
  exists, and a single TCP flow; sizing plans on the measured figure, or on the TCP floor where no
  measurement exists (an unmeasured EFA path is not assumed to reach line rate);
* **aggregated** (no disaggregation, for comparison): the same replicas do both, vLLM chunked prefill
  riding prefill chunks on decode steps, so a step that carries a chunk is slower (the interference
  DistServe and Splitwise avoid by splitting).

The two efficiency factors are fitted to public measurements (tests/data/sizing-calibration/) and the
calibration tests hold the model to them within a stated tolerance. Where the model is weak is in the
README (section `sizing`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, Callable, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from components.catalog import GpuInstanceType, gpu_instance_type
from components.config import GPU_MEMORY_BUDGET, StackConfig
from components.models import ModelSpec
from components.prices import PRICES_FILE
from tools.cli import Exit, ToolError, one_line

# Fitted to the calibration points in tests/data/sizing-calibration/points.yaml (NVIDIA NIM and NeMo
# published latencies): the fraction of dense peak a prefill reaches, and of memory bandwidth a decode
# step reaches. Typical published MFU for inference prefill is 40-60 %, MBU for decode 50-70 %.
PREFILL_MFU = 0.45
DECODE_MBU = 0.58
DECODE_MFU = PREFILL_MFU  # the compute roof of a large decode batch: same GEMMs as prefill

# vLLM's default scheduler budgets for an OpenAI-API server (vllm/engine/arg_utils.py, EngineArgs
# batch defaults): GPUs with >= 70 GiB that are not A100s get 8192 batched tokens and 1024 sequences a
# step, every other GPU 2048 and 256. The token budget is the chunk size of chunked prefill.
VLLM_LARGE_GPU_GIB = 70


def vllm_step_budget(instance: GpuInstanceType) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM defaults to on this GPU."""
    if instance.gpu_memory_gib >= VLLM_LARGE_GPU_GIB and instance.gpu_model != "A100":
        return 8192, 1024
    return 2048, 256


# -- the workload file ---------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True, allow_inf_nan=False
    )


class TokenLengths(_Strict):
    """A token-length distribution: its mean and spread, lognormal (long-tailed, like real prompts)."""

    mean: float = Field(gt=0, description="Mean tokens per request.")
    cv: float = Field(
        default=0.0, ge=0, le=4,
        description="Coefficient of variation (standard deviation / mean); 0 means every request has `mean`.",
    )

    @property
    def _sigma2(self) -> float:
        return math.log1p(self.cv**2)

    def moment(self, k: int) -> float:
        """E[L^k] of the lognormal with this mean and cv (exactly mean^k when cv is 0)."""
        mu = math.log(self.mean) - self._sigma2 / 2
        return math.exp(k * mu + k * k * self._sigma2 / 2)

    def quantile(self, p: float) -> float:
        if self.cv == 0:
            return self.mean
        mu = math.log(self.mean) - self._sigma2 / 2
        return math.exp(mu + math.sqrt(self._sigma2) * NormalDist().inv_cdf(p))


class Slo(_Strict):
    """Latency objectives, each met at `percentile` (DistServe's goodput: requests meeting both)."""

    ttft_ms: float = Field(gt=0, description="Time to first token, milliseconds.")
    itl_ms: float = Field(gt=0, description="Inter-token latency (time per output token), milliseconds.")
    percentile: float = Field(gt=50, lt=100, description="The percentile both objectives hold at, e.g. 90 or 99.")


class Workload(_Strict):
    """What `make size` sizes for: Poisson arrivals, token-length distributions, SLOs."""

    description: str = Field(default="", description="What traffic this is.")
    request_rate: float = Field(gt=0, description="Requests per second (Poisson arrivals).")
    input_tokens: TokenLengths = Field(description="Prompt length distribution.")
    output_tokens: TokenLengths = Field(description="Generated length distribution.")
    slo: Slo = Field(description="Latency objectives.")


def _location(loc: tuple[Any, ...]) -> str:
    return ".".join(to_camel(str(p)) if isinstance(p, str) else str(p) for p in loc) or "(top level)"


def parse_workload(data: Any, source: str = "workload") -> Workload:
    """A validated `Workload`; ToolError(USAGE) naming every bad key on one line."""
    if not isinstance(data, dict):
        raise ToolError(Exit.USAGE, f"{source}: expected a mapping of workload keys, got {type(data).__name__}")
    try:
        return Workload.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_location(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ToolError(Exit.USAGE, one_line(f"{source}: {problems}", 600)) from None


def load_workload(path: Path) -> Workload:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ToolError(Exit.USAGE, f"{path}: no such workload file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(Exit.USAGE, one_line(f"{path}: cannot read it ({exc})")) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", exc)
        raise ToolError(Exit.USAGE, one_line(f"{path}: not valid YAML{where}: {problem}")) from None
    return parse_workload(data, str(path))


# -- the hardware a replica runs on -------------------------------------------------------------------
@dataclass(frozen=True)
class Replica:
    """One vLLM engine: `tp` GPUs of one node, its weights, efficiency factors and KV dtype."""

    model: ModelSpec
    instance: GpuInstanceType
    tp: int
    kv_dtype_bytes: int = 2
    weight_dtype_bytes: float = 2.0
    compute_scale: float = 1.0  # tensor peak relative to dense BF16 (2 for FP8 on Hopper: H100 datasheet)
    prefill_mfu: float = PREFILL_MFU
    decode_mbu: float = DECODE_MBU

    @property
    def peak_flops(self) -> float:
        return self.tp * self.instance.peak_bf16_dense_tflops * 1e12 * self.compute_scale

    @property
    def memory_bandwidth(self) -> float:
        return self.tp * self.instance.memory_bandwidth_gbytes_s * 1e9

    @property
    def kv_bytes_per_token(self) -> int:
        return self.model.kv_bytes_per_token(self.kv_dtype_bytes)

    @property
    def kv_budget_bytes(self) -> float:
        """GPU memory vLLM leaves for the KV cache: its budget minus the weights."""
        total = self.tp * self.instance.gpu_memory_gib * 2**30 * GPU_MEMORY_BUDGET
        return total - self.model.weight_bytes(self.weight_dtype_bytes)

    def prefill_seconds(self, tokens: float) -> float:
        """One prompt of `tokens`, alone on the replica (causal: attends to tokens/2 on average)."""
        return self.model.forward_flops(1, tokens / 2) * tokens / (self.peak_flops * self.prefill_mfu)

    def prefill_coefficients(self) -> tuple[float, float]:
        """(a, b) with prefill_seconds(L) = a L + b L^2: the dense and the attention part."""
        one = self.prefill_seconds(1.0)
        two = self.prefill_seconds(2.0)
        b = (two - 2 * one) / 2
        return one - b, b

    def decode_step_seconds(self, batch: float, context: float) -> float:
        """One decode step for `batch` sequences of `context` tokens each: the slower of memory and compute."""
        memory = (self.model.weight_bytes(self.weight_dtype_bytes) + batch * context * self.kv_bytes_per_token) / (
            self.memory_bandwidth * self.decode_mbu
        )
        compute = self.model.forward_flops(1, context) * batch / (self.peak_flops * DECODE_MFU)
        return max(memory, compute)


# -- the KV-transfer band -------------------------------------------------------------------------
@dataclass(frozen=True)
class KvBand:
    """Moving one request's KV cache from a prefill to a decode node, three ways.

    line rate: the node's aggregate EFA bandwidth (an upper bound no transfer reaches);
    measured: what NIXL over EFA has been measured to do between two such nodes (catalog; None if unknown);
    tcp: one TCP flow (what NIXL's UCX backend falls back to when it cannot drive EFA).
    """

    tokens: int
    bytes: int
    line_rate_gbps: float
    measured_gbps: Optional[float]
    measured_source: Optional[str]
    tcp_gbps: float

    @staticmethod
    def _seconds(num_bytes: int, gbps: float) -> float:
        return num_bytes * 8 / (gbps * 1e9)

    @property
    def line_rate_seconds(self) -> float:
        return self._seconds(self.bytes, self.line_rate_gbps)

    @property
    def measured_seconds(self) -> Optional[float]:
        return None if self.measured_gbps is None else self._seconds(self.bytes, self.measured_gbps)

    @property
    def tcp_seconds(self) -> float:
        return self._seconds(self.bytes, self.tcp_gbps)

    @property
    def planning_gbps(self) -> float:
        """What sizing plans on: the measured figure, else the single-flow TCP floor."""
        return self.measured_gbps if self.measured_gbps is not None else self.tcp_gbps

    @property
    def planning_basis(self) -> str:
        return "measured NIXL/EFA" if self.measured_gbps is not None else "single-flow TCP (no NIXL/EFA measurement)"

    @property
    def planning_seconds(self) -> float:
        return self._seconds(self.bytes, self.planning_gbps)

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "line_rate_seconds": self.line_rate_seconds,
            "measured_seconds": self.measured_seconds,
            "tcp_seconds": self.tcp_seconds,
            "planning_seconds": self.planning_seconds,
            "planning_basis": self.planning_basis,
        }


def kv_band(model: ModelSpec, tokens: int, kv_dtype_bytes: int, instance: GpuInstanceType) -> KvBand:
    """The one KV-transfer band computation (`make size`, the preview and its summary all use it)."""
    return KvBand(
        tokens=int(tokens),
        bytes=model.kv_bytes_per_token(kv_dtype_bytes) * int(tokens),
        line_rate_gbps=float(instance.network_gbps),
        measured_gbps=instance.nixl_efa_measured_gbps,
        measured_source=instance.nixl_efa_measured_source,
        tcp_gbps=float(instance.single_flow_tcp_gbps),
    )


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def band_text(band: dict[str, Any]) -> str:
    """One line for a `KvBand.as_dict()`: line rate · measured (or that none exists) · single-flow TCP."""
    measured = (
        f"measured NIXL/EFA {band['measured_gbps']:g} Gbit/s: {_duration(band['measured_seconds'])} "
        f"({band['measured_source']})"
        if band["measured_gbps"] is not None
        else "measured NIXL/EFA: none published for this type"
    )
    return (
        f"line-rate bound {band['line_rate_gbps']:g} Gbit/s: {_duration(band['line_rate_seconds'])} · {measured} · "
        f"single-flow TCP {band['tcp_gbps']:g} Gbit/s: {_duration(band['tcp_seconds'])}"
    )


# -- queueing -------------------------------------------------------------------------------------
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


def _service_moments(a: float, b: float, lengths: TokenLengths) -> tuple[float, float]:
    """E[S], E[S^2] for S = a L + b L^2 with L lognormal (closed form from the lognormal moments)."""
    m = lengths.moment
    return a * m(1) + b * m(2), a * a * m(2) + 2 * a * b * m(3) + b * b * m(4)


# -- sizing -----------------------------------------------------------------------------------------
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
            "mode": self.mode, "feasible": self.feasible, "reason": self.reason, "nodes": self.nodes,
            "gpus": self.gpus, "hourly": self.hourly, "usd_per_mtok": self.usd_per_mtok,
            "sides": [{**asdict(s), "nodes": s.nodes, "gpus": s.gpus} for s in self.sides],
        }


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
        raise _Infeasible(f"decode: a {workload.input_tokens.mean + workload.output_tokens.mean:.0f}-token sequence's "
                          f"KV cache does not fit beside the weights on TP {replica.tp}")
    for replicas in range(1, MAX_REPLICAS + 1):
        batch = _decode_fixed_point(replica, tokens_s / replicas, context)
        if batch <= cap and replica.decode_step_seconds(batch, context) <= slo:
            itl = replica.decode_step_seconds(batch, context)
            return Side("decode", replica.tp, replicas, per_node, itl_ms=itl * 1e3, batch=batch)
    raise _Infeasible(f"decode: more than {MAX_REPLICAS} replicas needed")


def size_prefill(replica: Replica, workload: Workload, transfer_s_per_token: float, first_step_s: float = 0.0) -> Side:
    """Fewest prefill replicas whose percentile TTFT meets the objective.

    TTFT = queue + prefill + KV transfer + the decode replica's first step: Ray Serve LLM's PD proxy
    sends the prefill replica the request with max_tokens=1 and stream=False, then streams the client's
    tokens, the first included, from the decode replica that pulled the KV cache
    (ray.llm PDProxyServer._prepare_prefill_request / _prepare_decode_request).
    """
    p = workload.slo.percentile / 100
    a, b = replica.prefill_coefficients()
    mean_s, second_s = _service_moments(a, b, workload.input_tokens)
    tail_len = workload.input_tokens.quantile(p)
    own = replica.prefill_seconds(tail_len) + transfer_s_per_token * tail_len + first_step_s
    slo = workload.slo.ttft_ms / 1000
    per_node = replica.instance.gpus // replica.tp
    if own > slo:
        raise _Infeasible(
            f"prefill: a p{workload.slo.percentile:g} prompt ({tail_len:,.0f} tokens) takes {own * 1e3:,.0f} ms "
            f"to prefill, hand over and decode its first token on TP {replica.tp} x {replica.instance.gpu_model}, "
            f"above the {workload.slo.ttft_ms:g} ms TTFT objective at any replica count"
        )
    for replicas in range(1, MAX_REPLICAS + 1):
        wait = mg1_wait_quantile(workload.request_rate / replicas, mean_s, second_s, p)
        if wait + own <= slo:
            return Side("prefill", replica.tp, replicas, per_node, ttft_ms=(wait + own) * 1e3)
    raise _Infeasible(f"prefill: more than {MAX_REPLICAS} replicas needed")


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
    Little's law stretched by 1/(1-u). A step that carries a prefill chunk (vLLM's token budget) takes
    that chunk's prefill time longer; when more than (1 - percentile) of steps carry one, the percentile
    ITL is such a step. A prompt's prefill is spread over ceil(L / chunk) steps, each also carrying the
    decode batch, and waits in an M/G/1 queue.
    """
    p = workload.slo.percentile / 100
    chunk = vllm_step_budget(replica.instance)[0]
    context = workload.input_tokens.mean + workload.output_tokens.mean / 2
    a, b = replica.prefill_coefficients()
    mean_prefill, _ = _service_moments(a, b, workload.input_tokens)
    share = rate * mean_prefill
    if share >= 1:
        return None
    batch = _decode_fixed_point(replica, rate * workload.output_tokens.mean, context, 1 / (1 - share))
    if batch > _batch_cap(replica, workload):
        return None
    step = replica.decode_step_seconds(batch, context)
    steps_s = (1 - share) / step
    chunk_fraction = min(1.0, rate * workload.input_tokens.mean / chunk / steps_s)
    tail_len = workload.input_tokens.quantile(p)
    chunk_s = replica.prefill_seconds(min(chunk, tail_len))
    # prefill stretched by the decode step each chunk rides with: S'(L) = S(L) + (L / chunk) x step
    mean_s, second_s = _service_moments(a + step / chunk, b, workload.input_tokens)
    if rate * mean_s >= 1:
        return None
    mean_wait = rate * second_s / (2 * (1 - rate * mean_s))
    return AggregatedLoad(
        batch=batch,
        step_s=step,
        chunk_fraction=chunk_fraction,
        itl_mean_s=step + chunk_fraction * replica.prefill_seconds(min(chunk, workload.input_tokens.mean)),
        itl_tail_s=step + chunk_s if chunk_fraction > 1 - p else step,
        ttft_mean_s=mean_wait + mean_s,
        ttft_tail_s=mg1_wait_quantile(rate, mean_s, second_s, p)
        + replica.prefill_seconds(tail_len) + math.ceil(tail_len / chunk) * step,
    )


def size_aggregated(replica: Replica, workload: Workload) -> Side:
    """Fewest replicas doing both phases (vLLM chunked prefill) that meet both objectives (`aggregated_load`)."""
    per_node = replica.instance.gpus // replica.tp
    for replicas in range(1, MAX_REPLICAS + 1):
        load = aggregated_load(replica, workload, workload.request_rate / replicas)
        if load is None:
            continue
        if load.itl_tail_s * 1e3 <= workload.slo.itl_ms and load.ttft_tail_s * 1e3 <= workload.slo.ttft_ms:
            return Side("aggregated", replica.tp, replicas, per_node, ttft_ms=load.ttft_tail_s * 1e3,
                        itl_ms=load.itl_tail_s * 1e3, batch=load.batch)
    chunk = vllm_step_budget(replica.instance)[0]
    chunk_s = replica.prefill_seconds(min(chunk, workload.input_tokens.quantile(workload.slo.percentile / 100)))
    raise _Infeasible(
        f"aggregated: no replica count up to {MAX_REPLICAS} meets both objectives (prefill chunks of {chunk} "
        f"tokens stall decode steps by {chunk_s * 1e3:.0f} ms against a {workload.slo.itl_ms:g} ms ITL objective)"
    )


class _Infeasible(Exception):
    pass


# -- cost ------------------------------------------------------------------------------------------
def hourly_price(region: str, instance_type: str, path: Path = PRICES_FILE) -> Optional[float]:
    """On-demand list price per hour from components/data/prices.json (the preview's table); None if unpriced."""
    prices = json.loads(Path(path).read_text())
    return prices["regions"].get(region, {}).get("instances", {}).get(instance_type)


def usd_per_million_output_tokens(hourly: float, output_tokens_s: float) -> float:
    return hourly / (output_tokens_s * 3600) * 1e6


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

    @property
    def output_tokens_s(self) -> float:
        return self.workload.request_rate * self.workload.output_tokens.mean

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
            return ("neither layout meets the objectives on this GPU type: "
                    "change the SLOs, the model or the instance type")
        if not dis.feasible:
            return f"disaggregation does not pay here: it cannot meet the objectives ({dis.reason}); serve aggregated"
        if not agg.feasible:
            return ("disaggregation pays here: aggregated serving cannot meet the objectives "
                    f"({agg.reason}); prefill/decode on separate nodes can")
        if dis.nodes < agg.nodes:
            return f"disaggregation pays here: {dis.nodes} node(s) against {agg.nodes} aggregated for the same SLOs"
        if dis.nodes == agg.nodes:
            return (f"a draw on nodes ({dis.nodes} each): disaggregation buys latency isolation, not throughput "
                    "(vLLM's own note), at the cost of the KV handoff")
        return (f"disaggregation does not pay here: {dis.nodes} node(s) against {agg.nodes} aggregated; "
                "it trades GPUs for latency control this workload does not need")

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack, "model_id": self.model_id, "instance_type": self.instance_type,
            "region": self.region, "workload": self.workload.model_dump(by_alias=True),
            "kv_band": self.band.as_dict(), "disaggregated": self.disaggregated.as_dict(),
            "aggregated": self.aggregated.as_dict(), "pd_ratio": self.pd_ratio,
            "output_tokens_s": self.output_tokens_s, "price_hourly": self.price_hourly, "verdict": self.verdict(),
            "placement": None if self.placement is None else asdict(self.placement),
        }


def _priced(plan: Plan, price: Optional[float], output_tokens_s: float) -> Plan:
    if plan.feasible and price is not None:
        plan.hourly = plan.nodes * price
        plan.usd_per_mtok = usd_per_million_output_tokens(plan.hourly, output_tokens_s)
    return plan


def tp_options(model: ModelSpec, instance: GpuInstanceType) -> list[int]:
    """Tensor-parallel sizes a replica can use on this node: powers of two dividing its GPUs, weights fitting."""
    options = []
    tp = 1
    while tp <= instance.gpus:
        if instance.gpus % tp == 0 and model.weights_gib_bf16 / tp <= instance.gpu_memory_gib * GPU_MEMORY_BUDGET:
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


def search_placement(model: ModelSpec, instance: GpuInstanceType, kv_dtype_bytes: int, workload: Workload,
                     transfer_s_per_token: float) -> Placement:
    """For each side (and aggregated), the TP that needs the fewest nodes, then the fewest GPUs.

    Decode first: its step time is part of every TTFT (the first token comes from the decode replica).
    """
    replicas = [Replica(model, instance, tp, kv_dtype_bytes) for tp in tp_options(model, instance)]

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
        prefill = best(lambda r: size_prefill(r, workload, transfer_s_per_token, first_step))
    return Placement(prefill, decode, best(lambda r: size_aggregated(r, workload)))


def size(stack: str, config: StackConfig, workload: Workload) -> Sizing:
    """Size `workload` for the stack's model, GPU type and tensor-parallel layout."""
    if config.serving is None:
        raise ToolError(Exit.USAGE, f"Pulumi.{stack}.yaml has no serving section: there is no model to size for")
    from components.models import MODELS

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
    dtype = serving.kv_cache_dtype_bytes
    prefill = Replica(model, instance, serving.prefill.tensor_parallel_size, dtype)
    decode = Replica(model, instance, serving.decode.tensor_parallel_size, dtype)
    band = kv_band(model, round(workload.input_tokens.quantile(workload.slo.percentile / 100)), dtype, instance)
    per_token = model.kv_bytes_per_token(dtype) * 8 / (band.planning_gbps * 1e9)
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
    placement = search_placement(model, instance, dtype, workload, per_token)
    return Sizing(stack, model.model_id, instance.name, config.region, workload, band,
                  _priced(dis, price, out), _priced(agg, price, out), price, placement)
