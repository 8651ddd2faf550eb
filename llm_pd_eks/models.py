"""The models this project knows how to lay out, with the shape figures the KV cache depends on.

KV-cache bytes per token = 2 (K and V) x layers x KV heads x head dim x dtype bytes; these come from
each model's Hugging Face `config.json` (num_hidden_layers, num_key_value_heads, head_dim or
hidden_size / num_attention_heads).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    model_id: str  # Hugging Face id
    params_billion: float
    layers: int
    kv_heads: int
    head_dim: int
    weights_gib_bf16: float  # weights at bf16, to check they fit the tensor-parallel group's GPUs
    # Gated on Hugging Face (the licence must be accepted; downloads without a token get 401): such a
    # stack needs a secret hfToken, or the workers retry the download until `pulumi up` times out.
    gated: bool = False
    # query heads (config.json num_attention_heads): attention FLOPs scale with heads x head_dim (sizing)
    attention_heads: int = 0

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """The one KV-cache formula (the preview's figures and any sizing use it): K and V for every
        layer and KV head, `head_dim` elements each, `dtype_bytes` per element."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    # --- sizing ---
    def forward_flops(self, tokens: int, context: float) -> float:
        """Forward FLOPs for `tokens` new tokens that each attend to `context` earlier positions on average.

        Dense part: 2 x parameters per token (a multiply-add per weight; Kaplan et al. 2020, "Scaling Laws
        for Neural Language Models", Table 1, C_forward ~ 2N). Attention part: QK^T and attention x V,
        2 FLOPs each per query head dim per attended position per layer: 4 x layers x heads x head_dim x
        context per token (PaLM, Chowdhery et al. 2022, Appendix B counts the same 4LHQT in its forward
        third of 6N + 12LHQT). A prefill of L tokens under a causal mask attends to L/2 on average.
        """
        dense = 2 * self.params_billion * 1e9
        attention = 4 * self.layers * self.attention_heads * self.head_dim * context
        return tokens * (dense + attention)

    def weight_bytes(self, dtype_bytes: float = 2) -> float:
        """Bytes of weights a decode step streams from memory (bf16 = 2 bytes a parameter, fp8 = 1)."""
        return self.weights_gib_bf16 * 2**30 * dtype_bytes / 2


MODELS: dict[str, ModelSpec] = {
    m.model_id: m
    for m in (
        ModelSpec("Qwen/Qwen2.5-7B-Instruct", 7.6, 28, 4, 128, 14.2, attention_heads=28),
        ModelSpec("meta-llama/Llama-3.1-8B-Instruct", 8.0, 32, 8, 128, 15.0, gated=True, attention_heads=32),
        ModelSpec("Qwen/Qwen2.5-32B-Instruct", 32.8, 64, 8, 128, 61.0, attention_heads=40),
        ModelSpec("meta-llama/Llama-3.3-70B-Instruct", 70.6, 80, 8, 128, 131.5, gated=True, attention_heads=64),
    )
}


# The context each model is served at without RoPE scaling added: `max_position_embeddings` of its
# Hugging Face config.json as published. vLLM refuses a max_model_len above it (unless
# VLLM_ALLOW_LONG_MAX_MODEL_LEN is set). Rope scaling, stated per model:
# - Llama 3.1 / 3.3: 131072, with `rope_scaling` {rope_type: llama3, factor 8,
#   original_max_position_embeddings 8192} already applied in that figure (vLLM does not multiply it).
# - Qwen2.5 Instruct: 32768 and no `rope_scaling` ("The current config.json is set for context length
#   up to 32,768 tokens"; 131072 needs YaRN, factor 4, added to config.json, which this project does not do).
NATIVE_CONTEXT: dict[str, int] = {
    "Qwen/Qwen2.5-7B-Instruct": 32_768,
    "meta-llama/Llama-3.1-8B-Instruct": 131_072,
    "Qwen/Qwen2.5-32B-Instruct": 32_768,
    "meta-llama/Llama-3.3-70B-Instruct": 131_072,
}
