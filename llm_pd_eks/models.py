"""The models this project knows how to lay out, one data file each under llm_pd_eks/data/models/.

A model is `<org>--<name>.json` (its Hugging Face id with `/` as `--`): the shape keys of its Hugging
Face `config.json` as published (`config`, with `source` naming that file), its parameter count and
bf16 weight size, whether the repository is gated, and how its native context relates to rope
scaling. Every field is required: a file missing one fails the import with one line naming the file
and the field, so no figure falls back to zero. `MODELS` and `NATIVE_CONTEXT` are built from them.

KV-cache bytes per token = 2 (K and V) x layers x KV heads x head dim x dtype bytes; head dim is
config.json's `head_dim`, or hidden_size / num_attention_heads where it has none (Hugging Face
transformers' default for Llama and Qwen2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError


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
    # config.json: hidden_size, intermediate_size (the MLP), vocab_size, tie_word_embeddings (one matrix
    # for the input embedding and the LM head), max_position_embeddings (the native context)
    hidden_size: int = 0
    intermediate_size: int = 0
    vocab_size: int = 0
    tie_word_embeddings: bool = False
    native_context: int = 0

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

    def embedding_params(self) -> tuple[float, float]:
        """(input embedding, LM head) parameter counts: vocab_size x hidden_size each, the LM head none of
        its own when tie_word_embeddings shares the one matrix (Hugging Face config.json's keys)."""
        embed = float(self.vocab_size * self.hidden_size)
        return embed, 0.0 if self.tie_word_embeddings else embed

    def weight_bytes(self, dtype_bytes: float = 2) -> float:
        """Bytes of weights a decode step streams from memory (bf16 = 2 bytes a parameter, fp8 = 1)."""
        return self.weights_gib_bf16 * 2**30 * dtype_bytes / 2


MODELS_DIR = Path(__file__).parent / "data" / "models"


class ModelDataError(ValueError):
    """A model data file that is missing a field, has one of the wrong type, or is not JSON."""


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class HfConfig(_Strict):
    """The keys of the model's Hugging Face config.json this project reads, with config.json's names."""

    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: Optional[int] = Field(gt=0, description="null where config.json has none")
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool
    max_position_embeddings: int = Field(gt=0)


class ModelFile(_Strict):
    """One file of llm_pd_eks/data/models/."""

    model_id: str = Field(description="Hugging Face id, `<org>/<name>`")
    source: str = Field(pattern=r"^https://huggingface\.co/.+/config\.json$", description="the config.json read")
    params_billion: float = Field(gt=0, description="parameters, billions (model card)")
    weights_gib_bf16: float = Field(gt=0, description="GiB of weights at bf16, to check they fit the GPUs")
    gated: bool = Field(description="the licence must be accepted on Hugging Face before a download")
    config: HfConfig
    context_note: str = Field(min_length=1, description="how max_position_embeddings relates to rope scaling")

    def spec(self) -> ModelSpec:
        c = self.config
        return ModelSpec(
            model_id=self.model_id,
            params_billion=self.params_billion,
            layers=c.num_hidden_layers,
            kv_heads=c.num_key_value_heads,
            head_dim=c.head_dim if c.head_dim is not None else c.hidden_size // c.num_attention_heads,
            weights_gib_bf16=self.weights_gib_bf16,
            gated=self.gated,
            attention_heads=c.num_attention_heads,
            hidden_size=c.hidden_size,
            intermediate_size=c.intermediate_size,
            vocab_size=c.vocab_size,
            tie_word_embeddings=c.tie_word_embeddings,
            native_context=c.max_position_embeddings,
        )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"key {repeated[0]!r} is given twice")
    return dict(pairs)


def load_model_file(path: Path) -> ModelSpec:
    """The model `path` describes; ModelDataError (one line: file, field, problem) when it is incomplete."""
    name = f"llm_pd_eks/data/models/{path.name}" if path.parent == MODELS_DIR else str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_no_duplicates)
        model = ModelFile.model_validate(data)
    except ValidationError as error:
        problems = [f"{'.'.join(str(p) for p in e['loc']) or '(the file)'}: {e['msg']}" for e in error.errors()]
        raise ModelDataError(f"{name}: {'; '.join(problems)}") from None
    except ValueError as error:  # not JSON, or a repeated key
        raise ModelDataError(f"{name}: not a model file: {' '.join(str(error).split())}") from None
    expected = model.model_id.replace("/", "--") + ".json"
    if path.name != expected:
        raise ModelDataError(f"{name}: model_id {model.model_id!r} belongs in {expected}")
    return model.spec()


def load_models(directory: Path = MODELS_DIR) -> dict[str, ModelSpec]:
    """Every model file under `directory`, smallest model first."""
    specs = [load_model_file(p) for p in sorted(directory.glob("*.json"))]
    return {s.model_id: s for s in sorted(specs, key=lambda s: (s.params_billion, s.model_id))}


MODELS: dict[str, ModelSpec] = load_models()

# The context each model is served at without RoPE scaling added: `max_position_embeddings` of its
# config.json as published (each file's context_note says how rope scaling enters). vLLM refuses a
# max_model_len above it (unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set).
NATIVE_CONTEXT: dict[str, int] = {model_id: spec.native_context for model_id, spec in MODELS.items()}
