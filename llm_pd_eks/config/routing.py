"""`serving.routing`: how requests find replicas, and which requests skip the prefill hop.

Two features beyond Ray Serve LLM's defaults (the real-run measurements in docs/real-run.md are what
each default rests on):
- prefix-cache-aware routing per role, on by default: Ray Serve LLM's own `PrefixCacheAffinityRouter`
  (ray.serve.llm.request_router, Ray 2.58.0) with Serve's FIFOMixin in front, in place of Serve's
  power-of-two choice, so requests that share a prompt prefix reach the replica whose vLLM prefix cache
  already holds it;
- conditional disaggregation: a prompt shorter than `decodeOnlyBelowTokens` is prefilled on the decode
  replica itself (no prefill hop, no KV transfer), the rest go through prefill as before; off unless
  a stack sets the threshold.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from .base import Strict


class PrefixAwareRoles(Strict):
    """Which roles route by prompt prefix."""

    prefill: bool = Field(
        default=True,
        description="Route prefill requests (decode -> prefill handle) by prompt prefix: repeated system "
        "prompts and conversation history are prefilled once per replica instead of once per request.",
    )
    decode: bool = Field(
        default=True,
        description="Route decode requests (ingress -> decode) by prompt prefix: the decode replica's own "
        "prefix cache then already holds the shared blocks, so fewer KV blocks are pulled over NIXL.",
    )


class RoutingConfig(Strict):
    """Request routing for the P/D application."""

    prefix_aware: PrefixAwareRoles = Field(
        default=PrefixAwareRoles(),
        description="Prefix-cache-aware routing per role (Ray Serve LLM's PrefixCacheAffinityRouter with "
        "Serve's FIFOMixin, llm_pd_eks/runtime/prefix_router.py); turns on vLLM's prefix caching on that role "
        "explicitly. On by default: on an H100 with shared prefixes it answered every request at the sizing "
        "model's hit rate, with a lower median TTFT and higher throughput than Serve's default router at 4, 8 "
        "and 16 clients (docs/routing.md). With one replica, or prefixes every replica can hold, it saves "
        "nothing (`make size`); turn a role off to go back to power-of-two choice.",
    )
    imbalanced_threshold: Optional[int] = Field(
        default=None,
        ge=1,
        le=10_000,
        description="Queue-length difference between replicas above which the prefix router falls back to "
        "power-of-two load balancing (Ray's own default, infinity, never does: one hot prefix would pin "
        "all its traffic to one replica). Unset: the role's targetOngoingRequests, rounded up.",
    )
    match_rate_threshold: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description="Smallest share of a prompt that must match a replica's known prefixes for the prefix "
        "router to prefer it (Ray's default, 0.1); below it, the replica holding the least cached text wins.",
    )
    decode_only_below_tokens: Optional[int] = Field(
        default=None,
        ge=1,
        description="Prompts shorter than this many tokens (counted by the decode engine's own tokenizer, "
        "chat template applied) are prefilled on the decode replica: no prefill hop, no KV transfer. "
        "Unset: every request goes through prefill. `make size` says where the hop, the KV handoff and "
        "the prefill queue's wait cost more than the prefill interference it saves, on an idle prefill "
        "stage and at the sized load (llm_pd_eks_sizing/model/routing.py).",
    )
