"""Prefix-cache-aware routing that answers every request, inside the Ray LLM image.

Serve imports `llm_pd_eks_prefix_router.PrefixCacheAffinityFifoRouter` (the ConfigMap on every Ray
pod's Python path) as a role's `request_router_class` where `serving.routing.prefixAware` is on for
that role (the default).
Written against the image's Ray 2.58.0:
- Ray Serve LLM's `PrefixCacheAffinityRouter` (ray/llm/_internal/serve/routing_policies/prefix_aware/
  prefix_aware_router.py) is `LocalityMixin, MultiplexMixin, RequestRouter`; Serve's default,
  `PowerOfTwoChoicesRequestRouter` (ray/serve/_private/request_router/pow_2_router.py), also mixes in
  `FIFOMixin`.
- `RequestRouter._fulfill_pending_requests` lets a routing task leave once there are more tasks than
  requests it counts (`target_num_routing_tasks`), also right after it took a request from the queue
  of requests to route: that request is then neither routed nor queued again. Without `FIFOMixin`,
  `_fulfill_next_pending_request` only hands a replica to the request the task itself holds, so a task
  with none in hand serves nobody and the dropped request waits until its client gives up. With it,
  such a task gives its replica to the oldest request still waiting, as Serve's default router does.
- Seen when run: Ray's class answered 2 of 96 requests on one H100 and none from four clients on a CPU
  (docs/routing.md); this class answered every request at 1 to 16 clients, on the CPU and on an H100
  beside real engines, at the sizing model's hit rate (docs/real-run.md).
So the class is Ray's own router with Serve's own mixin in front: no routing logic of the project's.
Both are imported from the modules that define them: the public `ray.serve.llm.request_router`
declares an empty subclass of the same router but also imports the KV-aware router, which needs vLLM
(absent where the router is exercised without an engine, `make realrun-router`).
"""

from __future__ import annotations

from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import PrefixCacheAffinityRouter
from ray.serve._private.request_router.request_router import FIFOMixin


class PrefixCacheAffinityFifoRouter(FIFOMixin, PrefixCacheAffinityRouter):
    """Ray Serve LLM's PrefixCacheAffinityRouter, with a replica that a routing task finds for no
    request of its own given to the oldest request still waiting (Serve's FIFOMixin)."""
