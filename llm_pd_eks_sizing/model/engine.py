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

    One engine step (`Replica.step_seconds`) carrying d decode tokens and p prompt tokens takes
    ``decode_step_s`` (+ ``prefill_step_s`` when it carries prompt tokens) + the linear layers, the
    slower of FLOPs / (tp x peak x ``prefill_mfu`` x tp_factor) and weight bytes / (tp x bandwidth x
    ``decode_mbu``), + prompt attention FLOPs at the same compute rate + the decode sequences' KV bytes
    at the same bandwidth + the TP all-reduces (`Replica.allreduce_seconds`).
    tp_factor = ``tp_efficiency`` ** log2(tp): what each doubling of the tensor-parallel group keeps of
    the GEMM rate (smaller shards); it is not applied to memory bandwidth (each GPU streams its own shard).

    With ``intercepts_per_layer`` the two intercepts are seconds a layer (times the model's layers): the
    per-step cost a real engine shows beyond the roofline grows with the layers it launches (on one H200,
    vLLM 0.26.0: 0.32 ms of prefill and 0.04 ms of decode a layer for the 32-layer Llama-3.1-8B, 0.29 and
    0.03 for the 64-layer Qwen2.5-32B), so one row serves models of any depth.

    ``data``, ``date`` and ``method`` say where the figures come from (the provenance a fitted row keeps).
    """

    prefill_mfu: float
    prefill_step_s: float
    decode_mbu: float
    decode_step_s: float
    tp_efficiency: float
    source: str
    data: str = ""
    date: str = ""
    method: str = ""
    intercepts_per_layer: bool = False
    stream_token_s: float = 0.0  # API-server seconds a streamed output token (the closed loop's host ceiling)

    def intercepts(self, model: ModelSpec) -> tuple[float, float]:
        """(prefill, decode) seconds a step adds beyond the roofline for `model`."""
        scale = model.layers if self.intercepts_per_layer else 1
        return self.prefill_step_s * scale, self.decode_step_s * scale

    def tp_factor(self, tp: int) -> float:
        return float(self.tp_efficiency ** math.log2(tp))


# The vLLM bf16 row is the GPU calibration of the release's engine (vLLM 0.26.0, torch 2.11.0+cu130) on one
# NVIDIA H200, the GPU of p5en (llm_pd_eks_sizing/calibrate/data/gpu-calibration-2026-12-04/, SOURCE):
# TTFT at one client for prompts of 128 to 16k tokens and ITL at one client for contexts of 256 to 16k,
# for Llama-3.1-8B (32 layers) and Qwen2.5-32B (64 layers), fitted together (calibrate/gpu_fit.py:
# fit_row) with the intercepts a layer; the API server's cost a streamed token is fitted on the run's
# highest-throughput level (fit_stream). The closed-loop sweeps (1 to 256 clients at 128, 1k and 8k-token
# prompts) are held out and judge it (tests/unit/test_sizing_gpu_replay.py). The TP term is the H200 kernel
# probe's (llm_pd_eks_sizing/calibrate/data/h200-probe.json: a TP8 GEMM shard keeps 0.74^(1/3) = 0.90 of
# the TP1 rate a doubling); the run was TP 1, so a TP > 1 answer says the term is assumed.
CALIBRATION_RUN = "llm_pd_eks_sizing/calibrate/data/gpu-calibration-2026-12-04"
VLLM_BF16 = EngineConstants(
    prefill_mfu=0.6578,
    prefill_step_s=0.0003121,
    decode_mbu=0.8774,
    decode_step_s=0.0000376,
    tp_efficiency=0.90,
    source="GPU calibration 2026-12-04: vLLM 0.26.0 on one H200, Llama-3.1-8B and Qwen2.5-32B "
    f"({CALIBRATION_RUN}); TP term from the H200 kernel probe",
    data=f"{CALIBRATION_RUN} (24 prefill and decode levels); llm_pd_eks_sizing/calibrate/data/h200-probe.json",
    date="2026-12-04 (engine), 2026-12-01 (probe)",
    method="relative least squares over both models' one-client levels, intercepts a layer "
    "(llm_pd_eks_sizing/calibrate/gpu_fit.py: fit_row); stream cost fitted on the highest-throughput level "
    "(fit_stream); TP efficiency a doubling from the probe's GEMM shards",
    intercepts_per_layer=True,
    stream_token_s=0.0000633,
)
# Rows fitted (llm_pd_eks_sizing/calibrate/fit.py, on the points not marked held_out) to the engines the published
# points ran; kept to check the fit method, not used for the stacks (they run vLLM bf16).
TRTLLM_BF16 = EngineConstants(
    prefill_mfu=0.4283,
    prefill_step_s=0.0002,
    decode_mbu=0.6759,
    decode_step_s=0.00201,
    tp_efficiency=1.0,
    source="fit on NVIDIA NeMo Llama-2-7B TP1 latency points (tests/data/sizing-calibration, source 2)",
    data="tests/data/sizing-calibration/points.yaml (engine trtllm, not held out)",
    date="2026-11-30 (pages retrieved)",
    method="relative least squares (llm_pd_eks_sizing/calibrate/fit.py)",
)
NIM_FP8 = EngineConstants(
    prefill_mfu=0.4821,
    prefill_step_s=0.0,
    decode_mbu=0.6043,
    decode_step_s=0.0,
    tp_efficiency=1.0,
    source="fit on NVIDIA NIM Llama-3.3-70B fp8 TP2 points (tests/data/sizing-calibration, source 1)",
    data="tests/data/sizing-calibration/points.yaml (engine nim, not held out)",
    date="2026-11-30 (pages retrieved)",
    method="relative least squares (llm_pd_eks_sizing/calibrate/fit.py), the TP2 all-reduce taken off as assumed",
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


# Embedding and LM-head parameters come from the model's data file (llm_pd_eks/data/models/, its
# config.json's vocab_size x hidden_size, once more when tie_word_embeddings is false). Prefill
# multiplies neither per token (the embedding is a lookup, the LM head runs for the last position
# only); a decode step reads the LM head whole and one embedding row. The one model sized here that
# no stack serves is the published calibration points' Llama-2-7b (tests/data/sizing-calibration):
CALIBRATION_ONLY_EMBEDDINGS: dict[str, tuple[int, int, bool]] = {  # model id: (vocab_size, hidden_size, tied)
    "meta-llama/Llama-2-7b-hf": (32000, 4096, False),
}


def embedding_params(model: ModelSpec) -> tuple[float, float]:
    """(input embedding, LM head) parameter counts of `model`; a model without its shapes is an error."""
    if model.vocab_size and model.hidden_size:
        return model.embedding_params()
    shape = CALIBRATION_ONLY_EMBEDDINGS.get(model.model_id)
    if shape is None:
        raise ValueError(
            f"{model.model_id}: no vocab_size/hidden_size; add its llm_pd_eks/data/models/ file (config.json's keys)"
        )
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


def gpu_memory_gib(instance: GpuInstanceType) -> float:
    """GiB per GPU as EC2 states it (the catalog's GpuInfo.Gpus[].MemoryInfo.SizeInMiB, not a rounded
    figure): an L40S is 45,776 MiB = 44.7 GiB there, not the 48 GB of its datasheet; an A10G 22,888 MiB."""
    return instance.gpu_memory_mib / 1024


# -- the hardware a replica runs on -------------------------------------------------------------------
# NVLink between the GPUs of one node, per GPU model: the SXM parts (A100, H100, H200) have it; the L40S
# has none (NVIDIA L40S datasheet: "NVLink support: No"; PCIe Gen4 x16) and neither has the A10G (PCIe
# only). Without it, vLLM's TP all-reduce goes over PCIe.
NVLINK: dict[str, bool] = {"A100": True, "H100": True, "H200": True, "L40S": False, "A10G": False}
# The all-reduce a TP group runs twice a layer (after attention and after the MLP, Megatron-LM's layout
# that vLLM's row-parallel layers follow), as latency + ring bytes over the link. No measurement of it is
# in the repository: the figures are assumed and every answer for TP > 1 says so (`tp_basis`).
# NVLink: ~8 us a small all-reduce (vLLM's custom one-shot kernel) and 450 GB/s a direction (NVLink 4;
# A100 NVLink 3 300 GB/s); PCIe Gen4 x16 ~25 GB/s usable and ~25 us (NCCL over PCIe).
ALLREDUCE_ASSUMED: dict[bool, tuple[float, float]] = {True: (8e-6, 450e9), False: (25e-6, 25e9)}
A100_NVLINK_BYTES_S = 300e9


def has_nvlink(instance: GpuInstanceType) -> bool:
    """Whether the node's GPUs talk over NVLink; False for a GPU model the table does not know."""
    return NVLINK.get(instance.gpu_model, False)


def tp_basis(instance: GpuInstanceType, tp: int) -> str:
    """Where the TP term of an answer comes from, said plainly."""
    if tp == 1:
        return "TP 1: no all-reduce"
    link = "NVLink" if has_nvlink(instance) else f"PCIe (no NVLink on {instance.gpu_model})"
    return (
        f"assumed: TP {tp} all-reduce over {link}, twice a layer, not measured; GEMM-shard factor from the "
        "H200 kernel probe"
    )


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

    @property
    def hidden_size(self) -> int:
        return self.model.attention_heads * self.model.head_dim

    @property
    def compute_rate(self) -> float:
        """FLOP/s the GEMMs reach on this TP group."""
        return self.peak_flops * self._mfu * self.constants.tp_factor(self.tp)

    def allreduce_seconds(self, tokens: float) -> float:
        """The TP all-reduces of one forward over `tokens` tokens: 2 a layer, latency + ring bytes."""
        if self.tp == 1 or tokens <= 0:
            return 0.0
        latency, link = ALLREDUCE_ASSUMED[has_nvlink(self.instance)]
        if has_nvlink(self.instance) and self.instance.gpu_model == "A100":
            link = A100_NVLINK_BYTES_S
        ring = 2 * (self.tp - 1) / self.tp * tokens * self.hidden_size * self.kv_dtype_bytes
        return 2 * self.model.layers * (latency + ring / link)

    def step_seconds(
        self, decode_seqs: float, decode_context: float, prompt_tokens: float = 0.0, prompt_attended: float = 0.0
    ) -> float:
        """One vLLM engine step: `decode_seqs` sequences of `decode_context` tokens each emit one token and
        `prompt_tokens` prompt tokens (chunks of one or more prompts) attend to `prompt_attended` earlier
        positions on average (L/2 for a whole prompt of L; offset + chunk/2 for a later chunk).

        The linear layers read the weights once for every token of the step, so they take the slower of
        their FLOPs and their weight bytes; attention is added on top (prompt tokens by FLOPs, decode
        tokens by the KV bytes they read), then the TP all-reduces and the per-step intercepts.
        """
        tokens = decode_seqs + prompt_tokens
        if tokens <= 0:
            return 0.0
        embed, head = embedding_params(self.model)
        dense_flops = 2 * (self.model.params_billion * 1e9 - embed - head) * tokens
        bandwidth = self.memory_bandwidth * self._mbu
        linear = max(
            dense_flops / self.compute_rate, decode_weight_bytes(self.model, self.weight_dtype_bytes) / bandwidth
        )
        width = 4 * self.model.layers * self.model.attention_heads * self.model.head_dim
        prompt_attention = width * prompt_tokens * prompt_attended / self.compute_rate
        decode_attention = decode_seqs * decode_context * self.kv_bytes_per_token / bandwidth
        prefill_intercept, decode_intercept = self.constants.intercepts(self.model)
        intercept = decode_intercept + (prefill_intercept if prompt_tokens > 0 else 0.0)
        return intercept + linear + prompt_attention + decode_attention + self.allreduce_seconds(tokens)

    def prefill_seconds(self, tokens: float) -> float:
        """One prompt of `tokens`, alone on the replica: the per-forward intercept plus compute and all-reduce."""
        return (
            self.constants.intercepts(self.model)[0]
            + prefill_flops(self.model, tokens) / self.compute_rate
            + self.allreduce_seconds(tokens)
        )

    def prefill_coefficients(self) -> tuple[float, float, float]:
        """(c, a, b) with prefill_seconds(L) = c + a L + b L^2: intercept, dense and attention part."""
        c = self.constants.intercepts(self.model)[0] + (
            2 * self.model.layers * ALLREDUCE_ASSUMED[has_nvlink(self.instance)][0] if self.tp > 1 else 0.0
        )
        one = self.prefill_seconds(1.0) - c
        two = self.prefill_seconds(2.0) - c
        b = (two - 2 * one) / 2
        return c, one - b, b

    def decode_step_seconds(self, batch: float, context: float) -> float:
        """One decode-only step for `batch` sequences of `context` tokens (`step_seconds` without prompt tokens)."""
        return self.step_seconds(batch, context)
