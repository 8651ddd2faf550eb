"""One vLLM engine on one GPU type: the roofline constants, FLOPs and bytes a phase costs, the
scheduler's budgets, and the replica (`tp` GPUs of one node) they combine into."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from llm_pd_eks.catalog import GpuInstanceType
from llm_pd_eks.config import GPU_MEMORY_BUDGET
from llm_pd_eks.models import ModelSpec


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
