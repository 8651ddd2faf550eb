"""Conditional disaggregation, inside the Ray LLM image: short prompts are prefilled on decode.

Imported by Serve as `llm_pd_eks_conditional_pd:build_pd_openai_app` (the ConfigMap on every Ray
pod's Python path) when a stack sets `serving.routing.decodeOnlyBelowTokens`. Written against the
image's Ray 2.58.0 / vLLM 0.26.0:
- Ray's P/D builder (ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py,
  `build_pd_openai_app`) binds the module-level `PDDecodeServer` as the decode deployment's class.
  `build_pd_openai_app` here runs that same builder with the name pointing at the subclass below for
  the duration of the call, so every other part of the graph (ingress, prefill, placement, NIXL port
  bases) is Ray's.
- `PDDecodeServer.chat/completions` always hand the request to `_pd_handle_request` (remote prefill,
  then local decode). The subclass counts the prompt with the decode engine's own tokenizer and,
  below the threshold, runs `LLMServer.chat/completions` instead: the decode engine prefills locally,
  its NixlConnector (kv_role kv_both) sees no kv_transfer_params and transfers nothing.
- The count: vLLM's tokenization endpoint through `LLMServer.engine.tokenize` (chat template
  applied) where Ray exposes it, else the engine client's tokenizer (`get_tokenizer()`). On the
  released pair the endpoint is never there: Ray 2.58's VLLMEngine reads vLLM's app state as
  `openai_serving_tokenization`, which vLLM 0.26 names `serving_tokenization`, so `tokenize` answers
  "does not support the 'tokenization' task" (seen on the GPU run, where every request went through
  prefill until the tokenizer counted).
- Each decision is counted (`llm_pd_eks_pd_path_requests`, tag `path`: decode_only | disaggregated),
  exported by Ray as `ray_llm_pd_eks_pd_path_requests_total`.
Anything that cannot be counted (a tokenizer error, an unknown request shape) goes through prefill:
the feature only ever removes a hop it is sure of.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional

from ray.llm._internal.serve.core.configs.openai_api_models import (
    ChatCompletionRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
)
from ray.llm._internal.serve.core.server.llm_server import LLMServer
from ray.llm._internal.serve.serving_patterns.prefill_decode import builder as _pd_builder
from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import PDDecodeServer
from ray.serve.metrics import Counter

THRESHOLD_KEY = "llm_pd_eks_decode_only_below_tokens"
PATH_METRIC = "llm_pd_eks_pd_path_requests"
DECODE_ONLY, DISAGGREGATED = "decode_only", "disaggregated"


def prompt_token_ids(request: Any) -> Optional[int]:
    """The prompt's length when the request already carries token ids (no tokenizer needed)."""
    prompt = getattr(request, "prompt", None)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    return None


def tokenize_request(request: Any) -> Any:
    """The vLLM tokenization request that counts what the engine would prefill for `request`."""
    if isinstance(request, ChatCompletionRequest):
        return TokenizeChatRequest(model=request.model, messages=request.messages, add_generation_prompt=True)
    prompt = getattr(request, "prompt", None)
    if isinstance(prompt, str):
        return TokenizeCompletionRequest(model=request.model, prompt=prompt)
    return None


class ConditionalPDDecodeServer(PDDecodeServer):
    """Ray's decode server, keeping prompts below the threshold on its own engine."""

    async def __init__(self, llm_config: Any, **kwargs: Any) -> None:  # type: ignore[misc]  # Serve awaits it
        await super().__init__(llm_config, **kwargs)
        self._decode_only_below = int(self._llm_config.experimental_configs.get(THRESHOLD_KEY) or 0)
        self._paths = Counter(
            PATH_METRIC,
            description="P/D requests by path: decode_only (prefilled on decode) or disaggregated.",
            tag_keys=("path",),
        )

    async def _prompt_tokens(self, request: Any) -> Optional[int]:
        known = prompt_token_ids(request)
        if known is not None:
            return known
        if self.engine is None:
            return None
        try:
            counted = await self._endpoint_count(request)
            return counted if counted is not None else await self._tokenizer_count(request)
        except Exception:  # any tokenizer failure means "cannot tell": disaggregate
            return None

    async def _endpoint_count(self, request: Any) -> Optional[int]:
        """vLLM's tokenization endpoint's count, or None where it answers with an error."""
        asked = tokenize_request(request)
        if asked is None or self.engine is None:
            return None
        async for reply in self.engine.tokenize(asked):
            count = getattr(reply, "count", None)
            return int(count) if isinstance(count, int) else None
        return None

    async def _tokenizer_count(self, request: Any) -> Optional[int]:
        """The engine client's tokenizer's count: the chat template applied to chat messages, special
        tokens added to a completion's prompt, as vLLM's own preprocessing does."""
        client = getattr(self.engine, "_engine_client", None)
        if client is None:
            return None
        tokenizer = client.get_tokenizer()
        if inspect.isawaitable(tokenizer):  # a coroutine in older vLLM releases
            tokenizer = await tokenizer
        if isinstance(request, ChatCompletionRequest):
            messages = [m if isinstance(m, dict) else m.model_dump(exclude_none=True) for m in request.messages]
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return len(tokenizer.encode(text, add_special_tokens=False))
        prompt = getattr(request, "prompt", None)
        return len(tokenizer.encode(prompt)) if isinstance(prompt, str) else None

    async def _decode_only(self, request: Any) -> bool:
        if self._decode_only_below <= 0:
            return False
        tokens = await self._prompt_tokens(request)
        keep = tokens is not None and tokens < self._decode_only_below
        self._paths.inc(tags={"path": DECODE_ONLY if keep else DISAGGREGATED})
        return keep

    async def chat(self, request: Any, raw_request_info: Any = None) -> Any:
        if await self._decode_only(request):
            return await LLMServer.chat(self, request, raw_request_info)
        return await super().chat(request, raw_request_info)

    async def completions(self, request: Any, raw_request_info: Any = None) -> Any:
        if await self._decode_only(request):
            return await LLMServer.completions(self, request, raw_request_info)
        return await super().completions(request, raw_request_info)


def build_pd_openai_app(pd_serving_args: dict) -> Any:
    """Ray's `build_pd_openai_app`, binding ConditionalPDDecodeServer where it binds PDDecodeServer."""
    bound = _pd_builder.PDDecodeServer
    _pd_builder.PDDecodeServer = ConditionalPDDecodeServer  # type: ignore[misc]
    try:
        return _pd_builder.build_pd_openai_app(pd_serving_args)
    finally:
        _pd_builder.PDDecodeServer = bound  # type: ignore[misc]
