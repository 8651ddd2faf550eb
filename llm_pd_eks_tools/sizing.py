"""Sizing before apply: from a workload to prefill/decode replicas, nodes, P:D ratio and $/Mtok.

A documented roofline with a queue in front, not a simulator. Every figure is per *replica* (one
vLLM engine over a tensor-parallel group of `tp` GPUs on one node) and comes from:

* **prefill is compute-bound**: time = a per-forward intercept + FLOPs on the non-embedding parameters
  plus attention (`prefill_flops`) / (tp x the GPU's dense BF16 peak x MFU x the TP term);
* **decode is memory-bound**: one step = an intercept + the weights it streams (`decode_weight_bytes`)
  plus every running sequence's KV cache (`ModelSpec.kv_bytes_per_token`) at tp x memory bandwidth x
  MBU x the TP term (or the compute roof, if higher); the constants are one `EngineConstants` row per
  engine and dtype (`ENGINE_CONSTANTS`), or calibration/<stack>.yaml's (`make calibrate`);
* **queueing**: each prefill replica is an M/G/1 queue (Poisson arrivals split evenly; DistServe, OSDI'24,
  §4.1 models a prefill instance as M/D/1; Pollaczek-Khinchine gives the mean wait for any service
  distribution) with the usual exponential tail for the percentile; a decode replica holds as many
  sequences as Little's law says (rate x output tokens x step time);
* **KV transfer** per `kv_band`, per TP rank over its own EFA interfaces: line rate as the bound, the
  measured per-interface NIXL efficiency as the plan, one TCP flow only where the type has no
  GPUDirect RDMA (the failure case);
* **aggregated** (no disaggregation, for comparison): the same replicas do both, vLLM chunked prefill
  riding prefill chunks on decode steps, so a step that carries a chunk is slower (the interference
  DistServe and Splitwise avoid by splitting).

The rows' sources are at each constant; tests/data/sizing-calibration/ holds the published points
that fit (or, held out, judge) them. Where the model is weak is in the
docs/sizing.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, Callable, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from llm_pd_eks.catalog import GpuInstanceType, gpu_instance_type
from llm_pd_eks.config import GPU_MEMORY_BUDGET, StackConfig

# -- the KV-transfer band: the one model, in the library (llm_pd_eks/kv_transfer.py), which the
# program's alerts, the preview and `make verify` use too.
from llm_pd_eks.kv_transfer import (
    NIXL_EFA_EFFICIENCY,
    NIXL_EFA_INTERFACE_GBPS,
    NIXL_EFA_MEASURED_GBPS,
    NIXL_EFA_MEASURED_INTERFACES,
    NIXL_EFA_SOURCE,
    KvBand,
    kv_band,
    kv_rank_floor_gbps,
)
from llm_pd_eks.models import ModelSpec
from llm_pd_eks.prices import PRICES_FILE
from llm_pd_eks_tools.cli import Exit, ToolError, one_line


# -- efficiency constants per GPU, dtype and engine ------------------------------------------------------
@dataclass(frozen=True)
class EngineConstants:
    """How close one engine gets to a GPU's roofline, for one weight dtype.

    prefill: seconds = ``prefill_step_s`` + FLOPs / (tp x peak x ``prefill_mfu`` x tp_factor), FLOPs on the
    non-embedding parameters plus attention (``prefill_flops``);
    decode step: seconds = ``decode_step_s`` + bytes / (tp x bandwidth x ``decode_mbu`` x tp_factor), bytes
    = weights a step reads (``decode_weight_bytes``) plus every running sequence's KV cache;
    tp_factor = ``tp_efficiency`` ** log2(tp): what each doubling of the tensor-parallel group keeps (its
    all-reduce and smaller, less efficient GEMM shards).
    """

    prefill_mfu: float
    prefill_step_s: float
    decode_mbu: float
    decode_step_s: float
    tp_efficiency: float
    source: str

    def tp_factor(self, tp: int) -> float:
        return float(self.tp_efficiency ** math.log2(tp))


# The H200 row rests on the kernel probe (llm_pd_eks_tools/calibrate/gpu_probe.py, numbers in
# llm_pd_eks_tools/calibrate/data/h200-probe.json): bf16 GEMMs of Llama-3.1 layer shards reach 0.73-0.80 of the
# 989 TF dense peak at 1-8k tokens (0.55 at 256), causal flash attention 0.40-0.57; batched GEMV over a
# TP1/TP4 shard streams weights at 3.45 TB/s (0.72 of 4.8 TB/s). Per doubling of TP the GEMM shards at 1k
# tokens keep 0.74^(1/3) = 0.90 (TP8 560 TF vs TP1 755 TF). A kernel probe has no engine overhead: the
# per-step intercepts are the vLLM-bf16 fit's (the A100/H100 rows), and NVLink all-reduce is not in it.
# vLLM runs CUDA graphs for decode and the same cuBLAS/flash kernels for prefill on every NVIDIA GPU here,
# so the probe's fractions of peak are the bf16 vLLM row for each GPU until `make calibrate` measures
# the stack's own; the per-step intercepts are 0 (a kernel probe cannot see them; calibrate fits them).
# The published vLLM bf16 points in tests/data/sizing-calibration/points.yaml are not fitted on: they
# are held out and judge this row.
VLLM_BF16 = EngineConstants(
    prefill_mfu=0.70,
    prefill_step_s=0.0,
    decode_mbu=0.72,
    decode_step_s=0.0,
    tp_efficiency=0.90,
    source="H200 kernel probe 2026-12-01 (llm_pd_eks_tools/calibrate/data/h200-probe.json)",
)
# Rows fitted (llm_pd_eks_tools/calibrate/fit.py, on the points not marked held_out) to the engines the published
# points ran; kept to check the fit method, not used for the stacks (they run vLLM bf16).
TRTLLM_BF16 = EngineConstants(
    prefill_mfu=0.4283,
    prefill_step_s=0.0002,
    decode_mbu=0.6759,
    decode_step_s=0.00201,
    tp_efficiency=1.0,
    source="fit on NVIDIA NeMo Llama-2-7B TP1 latency points (tests/data/sizing-calibration, source 2)",
)
NIM_FP8 = EngineConstants(
    prefill_mfu=0.446,
    prefill_step_s=0.0,
    decode_mbu=0.5628,
    decode_step_s=0.0,
    tp_efficiency=1.0,
    source="fit on NVIDIA NIM Llama-3.3-70B fp8 TP2 points (tests/data/sizing-calibration, source 1)",
)
ENGINE_CONSTANTS: dict[tuple[str, str], EngineConstants] = {
    ("vllm", "bf16"): VLLM_BF16,
    ("trtllm", "bf16"): TRTLLM_BF16,
    ("nim", "fp8"): NIM_FP8,
}


def engine_constants(engine: str = "vllm", dtype: str = "bf16") -> EngineConstants:
    """The constants row for `engine` at weight `dtype`; KeyError names the rows that exist."""
    try:
        return ENGINE_CONSTANTS[(engine, dtype)]
    except KeyError:
        rows = ", ".join(f"{e}/{d}" for e, d in ENGINE_CONSTANTS)
        raise KeyError(f"no efficiency constants for {engine}/{dtype}; known: {rows}") from None


# Embedding and LM-head parameters (Hugging Face config.json: vocab_size x hidden_size, once more when
# tie_word_embeddings is false). Prefill multiplies neither per token (the embedding is a lookup, the LM
# head runs for the last position only); a decode step reads the LM head whole and one embedding row.
EMBEDDING_SHAPES: dict[str, tuple[int, int, bool]] = {  # model id: (vocab_size, hidden_size, tied)
    "Qwen/Qwen2.5-7B-Instruct": (152064, 3584, False),
    "meta-llama/Llama-3.1-8B-Instruct": (128256, 4096, False),
    "Qwen/Qwen2.5-32B-Instruct": (152064, 5120, False),
    "meta-llama/Llama-3.3-70B-Instruct": (128256, 8192, False),
    "meta-llama/Llama-2-7b-hf": (32000, 4096, False),
}


def embedding_params(model: ModelSpec) -> tuple[float, float]:
    """(input embedding, LM head) parameter counts of `model`; (0, 0) for a model not in the table."""
    shape = EMBEDDING_SHAPES.get(model.model_id)
    if shape is None:
        return 0.0, 0.0
    vocab, hidden, tied = shape
    return float(vocab * hidden), 0.0 if tied else float(vocab * hidden)


def prefill_flops(model: ModelSpec, tokens: float) -> float:
    """FLOPs of one causal prefill of `tokens`: 2 per non-embedding parameter per token plus attention."""
    embed, head = embedding_params(model)
    dense = 2 * (model.params_billion * 1e9 - embed - head) * tokens
    attention = 4 * model.layers * model.attention_heads * model.head_dim * (tokens / 2) * tokens
    return dense + attention


def decode_weight_bytes(model: ModelSpec, dtype_bytes: float) -> float:
    """Weight bytes one decode step streams: everything but the input embedding (one row of it is read)."""
    embed, _ = embedding_params(model)
    return model.weight_bytes(dtype_bytes) - embed * dtype_bytes


# vLLM's default scheduler budgets for an OpenAI-API server (vllm/engine/arg_utils.py, EngineArgs
# batch defaults): GPUs with >= 70 GiB that are not A100s get 8192 batched tokens and 1024 sequences a
# step, every other GPU 2048 and 256. The token budget is the chunk size of chunked prefill.
VLLM_LARGE_GPU_GIB = 70


def vllm_step_budget(instance: GpuInstanceType) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM defaults to on this GPU."""
    if gpu_memory_gib(instance) >= VLLM_LARGE_GPU_GIB and instance.gpu_model != "A100":
        return 8192, 1024
    return 2048, 256


# GPU memory per GPU as EC2 reports it (DescribeInstanceTypes GpuInfo.Gpus[].MemoryInfo.SizeInMiB),
# transcribed from moto 5.2.5's moto/ec2/resources/instance_types.json.gz (EC2's own data; the test
# compares it with the installed moto). An L40S is 45,776 MiB = 44.7 GiB there, not the 48 GB of its
# datasheet; an A10G 22,888 MiB.
EC2_GPU_MEMORY_MIB: dict[str, int] = {
    "g6e.8xlarge": 45776,
    "g6e.12xlarge": 45776,
    "g6e.24xlarge": 45776,
    "g6e.48xlarge": 45776,
    "g5.48xlarge": 22888,
    "p4d.24xlarge": 40960,
    "p4de.24xlarge": 81920,
    "p5.48xlarge": 81920,
    "p5e.48xlarge": 144384,
    "p5en.48xlarge": 144384,
}


def gpu_memory_gib(instance: GpuInstanceType) -> float:
    """GiB per GPU from EC2's data; the catalog's round figure for a type the table lacks."""
    mib = EC2_GPU_MEMORY_MIB.get(instance.name)
    return mib / 1024 if mib is not None else float(instance.gpu_memory_gib)


# -- the workload file ---------------------------------------------------------------------------
class _Strict(BaseModel):
    """Like the stack config: camelCase keys only (snake_case is an unknown key), no coercion (`true`
    is not a number), every unknown key an error."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        frozen=True,
        allow_inf_nan=False,
        strict=True,
    )


class TokenLengths(_Strict):
    """A token-length distribution: its mean and spread, lognormal (long-tailed, like real prompts)."""

    mean: float = Field(gt=0, description="Mean tokens per request.")
    cv: float = Field(
        default=0.0,
        ge=0,
        le=4,
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
    # validated by alias: a location is the key as written (camelCase, or the unknown key itself)
    return ".".join(str(p) for p in loc) or "(top level)"


def parse_workload(data: Any, source: str = "workload") -> Workload:
    """A validated `Workload`; ToolError(USAGE) naming every bad key on one line."""
    if not isinstance(data, dict):
        raise ToolError(Exit.USAGE, f"{source}: expected a mapping of workload keys, got {type(data).__name__}")
    try:
        return Workload.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_location(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ToolError(Exit.USAGE, one_line(f"{source}: {problems}", 600)) from None


MAX_WORKLOAD_BYTES = 64 * 1024  # the example workloads are ~300 bytes


def load_workload(path: Path) -> Workload:
    """Read a workload file with the stack files' reader (llm_pd_eks_tools/stackfile.py: duplicate keys and aliases
    refused, YAML 1.2 booleans), then the strict model; every failure a one-line ToolError(USAGE)."""
    from llm_pd_eks_tools.stackfile import parse

    path = Path(path)
    try:
        if path.is_dir():
            raise ToolError(Exit.USAGE, f"{path}: is a directory, not a workload file")
        if path.stat().st_size > MAX_WORKLOAD_BYTES:
            raise ToolError(Exit.USAGE, f"{path}: larger than {MAX_WORKLOAD_BYTES // 1024} KiB; is it a workload file?")
        text = path.read_text()
    except FileNotFoundError:
        raise ToolError(Exit.USAGE, f"{path}: no such workload file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(Exit.USAGE, one_line(f"{path}: cannot read it ({exc})")) from None
    return parse_workload(parse(text, str(path)), str(path))


# -- the hardware a replica runs on -------------------------------------------------------------------
@dataclass(frozen=True)
class Replica:
    """One engine: `tp` GPUs of one node, its weights, its efficiency constants and KV dtype."""

    model: ModelSpec
    instance: GpuInstanceType
    tp: int
    kv_dtype_bytes: int = 2
    weight_dtype_bytes: float = 2.0
    compute_scale: float = 1.0  # tensor peak relative to dense BF16 (2 for FP8 on Hopper: H100 datasheet)
    constants: EngineConstants = VLLM_BF16
    prefill_mfu: Optional[float] = None  # overrides constants.prefill_mfu (tests)
    decode_mbu: Optional[float] = None  # overrides constants.decode_mbu (tests)
    gpu_memory_gib: Optional[float] = None  # per GPU; None: EC2's figure for the type (gpu_memory_gib())

    @property
    def _mfu(self) -> float:
        return self.constants.prefill_mfu if self.prefill_mfu is None else self.prefill_mfu

    @property
    def _mbu(self) -> float:
        return self.constants.decode_mbu if self.decode_mbu is None else self.decode_mbu

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
        per_gpu = self.gpu_memory_gib if self.gpu_memory_gib is not None else gpu_memory_gib(self.instance)
        total = self.tp * per_gpu * 2**30 * GPU_MEMORY_BUDGET
        return total - self.model.weight_bytes(self.weight_dtype_bytes)

    def prefill_seconds(self, tokens: float) -> float:
        """One prompt of `tokens`, alone on the replica: the per-forward intercept plus compute."""
        rate = self.peak_flops * self._mfu * self.constants.tp_factor(self.tp)
        return self.constants.prefill_step_s + prefill_flops(self.model, tokens) / rate

    def prefill_coefficients(self) -> tuple[float, float, float]:
        """(c, a, b) with prefill_seconds(L) = c + a L + b L^2: intercept, dense and attention part."""
        c = self.constants.prefill_step_s
        one = self.prefill_seconds(1.0) - c
        two = self.prefill_seconds(2.0) - c
        b = (two - 2 * one) / 2
        return c, one - b, b

    def decode_step_seconds(self, batch: float, context: float) -> float:
        """One decode step for `batch` sequences of `context` tokens: intercept + the slower of memory and compute."""
        tp_factor = self.constants.tp_factor(self.tp)
        streamed = decode_weight_bytes(self.model, self.weight_dtype_bytes) + batch * context * self.kv_bytes_per_token
        memory = streamed / (self.memory_bandwidth * self._mbu * tp_factor)
        compute = self.model.forward_flops(1, context) * batch / (self.peak_flops * self._mfu * tp_factor)
        return self.constants.decode_step_s + max(memory, compute)


__all__ = [
    "NIXL_EFA_EFFICIENCY",
    "NIXL_EFA_INTERFACE_GBPS",
    "NIXL_EFA_MEASURED_GBPS",
    "NIXL_EFA_MEASURED_INTERFACES",
    "NIXL_EFA_SOURCE",
    "KvBand",
    "kv_band",
    "kv_rank_floor_gbps",
]


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def band_text(band: dict[str, Any]) -> str:
    """One line for a `KvBand.as_dict()`: per rank, line rate · measured (or the TCP failure case) · TCP."""
    head = (
        f"per rank (TP {band['tp']}, {band['interfaces_per_rank']:g} EFA interface(s) of "
        f"{band['interface_gbps']:g} Gbit/s each): "
    )
    line = f"line-rate bound {band['line_rate_gbps']:g} Gbit/s: {_duration(band['line_rate_seconds'])}"
    if band["measured_gbps"] is not None:
        measured = (
            f"NIXL/EFA at {band['efficiency']:.3f} of line rate {band['measured_gbps']:.1f} Gbit/s: "
            f"{_duration(band['measured_seconds'])} ({band['measured_source']})"
        )
    else:
        measured = "NIXL/EFA: impossible on this type (no GPUDirect RDMA)"
    tcp = f"one TCP flow {band['tcp_gbps']:g} Gbit/s: {_duration(band['tcp_seconds'])}"
    if not band["rdma"]:
        tcp += " (the failure case sizing must plan on here)"
    return head + " · ".join([line, measured, tcp])


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


def _service_moments(c: float, a: float, b: float, lengths: TokenLengths) -> tuple[float, float]:
    """E[S], E[S^2] for S = c + a L + b L^2 with L lognormal (closed form from the lognormal moments)."""
    m = lengths.moment
    mean = c + a * m(1) + b * m(2)
    var_part = a * a * m(2) + 2 * a * b * m(3) + b * b * m(4)
    return mean, c * c + 2 * c * (a * m(1) + b * m(2)) + var_part


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
        raise _Infeasible(
            f"decode: a {workload.input_tokens.mean + workload.output_tokens.mean:.0f}-token sequence's "
            f"KV cache does not fit beside the weights on TP {replica.tp}"
        )
    for replicas in range(1, MAX_REPLICAS + 1):
        batch = _decode_fixed_point(replica, tokens_s / replicas, context)
        if batch <= cap and replica.decode_step_seconds(batch, context) <= slo:
            itl = replica.decode_step_seconds(batch, context)
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
    slo = workload.slo.ttft_ms / 1000
    per_node = replica.instance.gpus // replica.tp
    if own > slo:
        raise _Infeasible(
            f"prefill: a p{workload.slo.percentile:g} prompt ({tail_len:,.0f} tokens) takes {own * 1e3:,.0f} ms "
            f"to prefill, hand over and decode its first token on TP {replica.tp} x {replica.instance.gpu_model}, "
            f"above the {workload.slo.ttft_ms:g} ms TTFT objective at any replica count"
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
    c, a, b = replica.prefill_coefficients()
    mean_prefill, _ = _service_moments(c, a, b, workload.input_tokens)
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
    mean_s, second_s = _service_moments(c, a + step / chunk, b, workload.input_tokens)
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
        + replica.prefill_seconds(tail_len)
        + math.ceil(tail_len / chunk) * step,
    )


def size_aggregated(replica: Replica, workload: Workload) -> Side:
    """Fewest replicas doing both phases (vLLM chunked prefill) that meet both objectives (`aggregated_load`)."""
    per_node = replica.instance.gpus // replica.tp
    for replicas in range(1, MAX_REPLICAS + 1):
        load = aggregated_load(replica, workload, workload.request_rate / replicas)
        if load is None:
            continue
        if load.itl_tail_s * 1e3 <= workload.slo.itl_ms and load.ttft_tail_s * 1e3 <= workload.slo.ttft_ms:
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


class _Infeasible(Exception):
    pass


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
            "placement": None if self.placement is None else asdict(self.placement),
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


# -- calibration/<stack>.yaml: constants measured on the stack's own GPUs (`make calibrate`) ---------------
class CalibratedConstants(_Strict):
    """The fitted efficiency row (llm_pd_eks_tools/calibrate/fit.py) as the calibration file stores it."""

    prefill_mfu: float = Field(gt=0, le=1, description="Fraction of dense peak a prefill reaches.")
    prefill_step_s: float = Field(ge=0, description="Per-forward intercept of a prefill, seconds.")
    decode_mbu: float = Field(gt=0, le=1, description="Fraction of memory bandwidth a decode step reaches.")
    decode_step_s: float = Field(ge=0, description="Per-step intercept of a decode step, seconds.")
    tp_efficiency: float = Field(gt=0, le=1, description="What each doubling of TP keeps.")


class Calibration(_Strict):
    """What `make calibrate STACK=...` measured and fitted; `make size` and the preview use it."""

    stack: str = Field(description="The stack it was measured on.")
    measured_at: str = Field(description="UTC time of the run (ISO 8601).")
    model_id: str = Field(description="The model served during the run.")
    instance_type: str = Field(description="The GPU instance type of the run.")
    tensor_parallel_size: int = Field(ge=1, description="TP of the replicas benchmarked.")
    constants: CalibratedConstants = Field(description="The fitted efficiency row.")
    kv_efficiency: Optional[float] = Field(
        default=None,
        gt=0,
        le=1,
        description="nixlbench over LIBFABRIC, per EFA interface, as a fraction of line rate; None if not measured.",
    )
    points: int = Field(ge=1, description="Benchmark points the fit used.")
    source: str = Field(description="The commands that produced it.")

    def engine_constants(self) -> EngineConstants:
        c = self.constants
        return EngineConstants(
            c.prefill_mfu,
            c.prefill_step_s,
            c.decode_mbu,
            c.decode_step_s,
            c.tp_efficiency,
            f"calibration/{self.stack}.yaml ({self.measured_at}, {self.points} points)",
        )


def calibration_path(stack: str, root: Path) -> Path:
    return Path(root) / "calibration" / f"{stack}.yaml"


def load_calibration(stack: str, root: Path, config: StackConfig) -> Optional[Calibration]:
    """calibration/<stack>.yaml if present (read like a stack file, strict); USAGE if it does not fit the stack."""
    from llm_pd_eks_tools.stackfile import parse

    path = calibration_path(stack, root)
    if not path.is_file():
        return None
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(Exit.USAGE, one_line(f"{path}: cannot read it ({exc})")) from None
    data = parse(text, str(path))
    try:
        found = Calibration.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_location(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ToolError(Exit.USAGE, one_line(f"{path}: {problems}; re-run make calibrate STACK={stack}", 600)) from None
    serving = config.serving
    if serving is not None and (
        found.model_id != serving.model_id or found.instance_type != config.gpu_nodes.instance_type
    ):
        raise ToolError(
            Exit.USAGE,
            f"{path}: measured {found.model_id} on {found.instance_type}, the stack now runs "
            f"{serving.model_id} on {config.gpu_nodes.instance_type}; re-run make calibrate "
            f"STACK={stack} or delete the file",
        )
    return found


def size(stack: str, config: StackConfig, workload: Workload, root: Optional[Path] = None) -> Sizing:
    """Size `workload` for the stack's model, GPU type and tensor-parallel layout.

    The efficiency constants are calibration/<stack>.yaml's when `make calibrate` wrote one (under
    `root`, the checkout by default), else the vLLM bf16 row.
    """
    from llm_pd_eks_tools.cli import ROOT

    if config.serving is None:
        raise ToolError(Exit.USAGE, f"Pulumi.{stack}.yaml has no serving section: there is no model to size for")
    from llm_pd_eks.models import MODELS

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
    per_token = band.seconds_per_token()
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
    tp1_per_token = kv_band(model, band.tokens, dtype, instance, 1, kv_efficiency).seconds_per_token()
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
    )


# -- the point query: one question to the model ---------------------------------------------------------
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
