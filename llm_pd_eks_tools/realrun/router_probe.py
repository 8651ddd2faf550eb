"""Ray Serve LLM's PrefixCacheAffinityRouter as `make realrun-router` runs it: unchanged but for a count of
the rounds a routing task makes with no request to route, and a variant that yields the event loop on
such a round. Imported only in the run's child process (it needs Ray's router at import).

Why count them. Ray 2.58.0's RequestRouter keeps as many routing tasks as `_pending_requests_to_fulfill`
holds, a deque it cleans only from the front ("lazy cleanup", `num_pending_requests`). A task whose
`_get_next_pending_request_to_route()` finds nothing goes round `choose_replicas(pending_request=None)`
-> `_select_from_candidate_replicas` -> `_fulfill_next_pending_request(replica, None)`, which assigns
nothing, and round again (`_fulfill_pending_requests`). Where the queue-length cache answers, none of
those awaits suspends, so such a task keeps the router's event loop to itself: the task routing a real
request, suspended on a probe or the prefix tree, never resumes. Power of two choices routes a request
without suspending, so its tasks rarely interleave; the prefix router suspends on every request it
routes (`_prefix_match_best_replicas` probes queue lengths), so from two clients on a task can spin.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import PrefixCacheAffinityRouter

# Rounds made with no request to route, in this process (the handle's router runs in the caller's
# process): read by router_run after each load.
IDLE_ROUNDS = {"count": 0}
# What the yielding variant sleeps on such a round: long enough that a spinning task leaves the loop
# to the others, short beside any routing decision the run times.
IDLE_YIELD_S = 0.01


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
            from llm_pd_eks_tools.realrun import router_probe

            router_probe.IDLE_ROUNDS["count"] += 1
        return await super().choose_replicas(candidate_replicas, pending_request)


class YieldingPrefixRouter(CountingPrefixRouter):
    """The same, yielding the event loop for IDLE_YIELD_S on a round with no request to route."""

    async def choose_replicas(self, candidate_replicas: list, pending_request: Optional[Any] = None) -> Any:
        if pending_request is None:
            await asyncio.sleep(IDLE_YIELD_S)
        return await super().choose_replicas(candidate_replicas, pending_request)


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
