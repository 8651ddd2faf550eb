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

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """The one KV-cache formula (the preview's figures and any sizing use it): K and V for every
        layer and KV head, `head_dim` elements each, `dtype_bytes` per element."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


MODELS: dict[str, ModelSpec] = {
    m.model_id: m
    for m in (
        ModelSpec("Qwen/Qwen2.5-7B-Instruct", 7.6, 28, 4, 128, 14.2),
        ModelSpec("meta-llama/Llama-3.1-8B-Instruct", 8.0, 32, 8, 128, 15.0),
        ModelSpec("Qwen/Qwen2.5-32B-Instruct", 32.8, 64, 8, 128, 61.0),
        ModelSpec("meta-llama/Llama-3.3-70B-Instruct", 70.6, 80, 8, 128, 131.5),
    )
}
