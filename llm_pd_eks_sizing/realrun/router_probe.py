"""The prefix routers as `make realrun-router` runs them: Ray Serve LLM's PrefixCacheAffinityRouter as is,
and the project's (llm_pd_eks/runtime/prefix_router.py: Ray's with Serve's FIFOMixin in front), each
unchanged but for a count of the rounds a routing task makes with no request to route and a note of
which task took each request from the queue of requests to route. Imported only in the run's child
process (it needs Ray's router at import).

Why count them. Ray 2.58.0's RequestRouter keeps as many routing tasks as `_pending_requests_to_fulfill`
holds, a deque it cleans only from the front ("lazy cleanup", `num_pending_requests`). A task whose
`_get_next_pending_request_to_route()` finds nothing goes round `choose_replicas(pending_request=None)`
-> `_select_from_candidate_replicas` -> `_fulfill_next_pending_request(replica, None)`, and round again
(`_fulfill_pending_requests`). In Ray's prefix router that hand-off assigns nothing (it matches only the
request a task holds), and where the queue-length cache answers none of those awaits suspends, so such a
task keeps the router's event loop to itself; a request a leaving task took and dropped is then served
by no one. With FIFOMixin the hand-off gives the replica to the oldest waiting request, as in Serve's
default router, which also cleans the deque's front, so the tasks wind down.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import PrefixCacheAffinityRouter

from llm_pd_eks.runtime.prefix_router import PrefixCacheAffinityFifoRouter

# Rounds made with no request to route, in this process (the handle's router runs in the caller's
# process): read by router_run after each load.
IDLE_ROUNDS = {"count": 0}


class CountingPrefixRouter(PrefixCacheAffinityRouter):
    """Ray's router, its rounds with no request counted and, for each request a routing task takes
    from the queue of requests to route, that task remembered (router_state reads both)."""

    def _get_next_pending_request_to_route(self) -> Optional[Any]:
        taken = super()._get_next_pending_request_to_route()
        if taken is not None:
            self.__dict__.setdefault("_taken_by", {})[id(taken)] = asyncio.current_task()
        return taken

    async def choose_replicas(self, candidate_replicas: list, pending_request: Optional[Any] = None) -> Any:
        if pending_request is None:
            # the module as imported in this process: Serve may carry this class to the router by value,
            # with a copy of the globals it was defined with
            from llm_pd_eks_sizing.realrun import router_probe

            router_probe.IDLE_ROUNDS["count"] += 1
        return await super().choose_replicas(candidate_replicas, pending_request)


class CountingProjectRouter(PrefixCacheAffinityFifoRouter, CountingPrefixRouter):
    """The project's router (FIFOMixin before Ray's), counted as above."""


def router_state() -> dict[str, int]:
    """The prefix routers of this process at this moment (read from another thread: a snapshot):
    requests waiting for a replica, how many of those are still queued to be routed, how many were
    taken from that queue by a routing task that has since finished, and the routing tasks running. A
    waiting request not queued is one no routing task will pick up again."""
    import gc

    state = {"waiting": 0, "queued_to_route": 0, "taken_by_a_finished_task": 0, "routing_tasks": 0}
    for router in [o for o in gc.get_objects() if isinstance(o, CountingPrefixRouter)]:
        waiting = [pr for pr in list(router._pending_requests_by_id.values()) if not pr.future.done()]
        queued = {id(pr) for pr in list(router._pending_requests_to_route)}
        taken_by = dict(router.__dict__.get("_taken_by", {}))
        state["waiting"] += len(waiting)
        state["queued_to_route"] += sum(id(pr) in queued for pr in waiting)
        state["taken_by_a_finished_task"] += sum(
            id(pr) not in queued and id(pr) in taken_by and taken_by[id(pr)].done() for pr in waiting
        )
        state["routing_tasks"] += len(router._routing_tasks)
    return state
