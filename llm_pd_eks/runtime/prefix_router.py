"""Prefix-cache-aware routing that answers every request and cannot stall, inside the Ray LLM image.

Serve imports `llm_pd_eks_prefix_router.PrefixCacheAffinityFifoRouter` (the ConfigMap on every Ray
pod's Python path) as a role's `request_router_class` where `serving.routing.prefixAware` is on for
that role (the default). Written against the image's Ray 2.58.0.

Ray Serve LLM's `PrefixCacheAffinityRouter` (public: `ray.serve.llm.request_router`) with Serve's
`FIFOMixin` in front (public: `ray.serve.request_router`), and its prefix tree kept where it survives:
- FIFO: `RequestRouter._fulfill_pending_requests` lets a routing task leave once there are more tasks
  than requests it counts, also right after it took a request from the queue: that request is then
  neither routed nor queued again. Without `FIFOMixin`, `_fulfill_next_pending_request` only hands a
  replica to the request the task itself holds, so the dropped request waits until its client gives up.
  With it, such a task gives its replica to the oldest request still waiting, as Serve's default router
  does. Seen when run: Ray's class answered 2 of 96 requests on one H100 and none from four clients on
  a CPU; this class answered every request at 1 to 16 clients (docs/routing.md, docs/real-run.md).
- The tree: Ray's class keeps it in one detached actor per deployment, plain `@ray.remote` (no
  restarts, one CPU), so it lands on a GPU worker (the head has `num-cpus: 0`) and a drain of that node
  leaves every router holding a dead handle, and its `ray.get` calls on the router's event loop have
  no timeout. Here the tree is an actor of the project's own name, on the head (Ray's built-in
  `node:__internal_head__` resource, no CPU; the head pod is on the system nodes, which no GPU-node
  roll or scale-down touches), restarted by Ray without limit (`max_restarts=-1`). Every call to it is
  bounded (`TREE_CALL_TIMEOUT_S`; the first, when a router is made, `TREE_START_TIMEOUT_S`, as the
  actor's process may still be starting); the insert after a routed request is sent without waiting,
  so a routed request costs one blocking round trip (two when its prompt matches too little). On any
  error the router routes by Serve's power-of-two choices, and after `RETRY_AFTER_S` (doubling up to
  `RETRY_AFTER_MAX_S`) fetches the actor again by name (creating it if it is gone). A restarted tree is
  empty: the router notices by the tree's incarnation id and enters the current replicas again.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Optional

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_tree import PrefixTree
from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE
from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter

logger = logging.getLogger("ray.serve")

try:
    from ray.serve.llm.request_router import PrefixCacheAffinityRouter
except ImportError as missing:  # the public module also imports the KV-aware router, which needs vLLM
    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import (  # type: ignore[assignment]
        PrefixCacheAffinityRouter,  # the same class: the public name re-exports it
    )

    logger.warning("ray.serve.llm.request_router not importable (%s); using the class it re-exports", missing)
try:
    from ray.serve.request_router import FIFOMixin
except ImportError as missing:
    from ray.serve._private.request_router.request_router import FIFOMixin

    logger.warning("ray.serve.request_router not importable (%s); using the module that defines FIFOMixin", missing)

TREE_ACTOR_NAME = "LlmPdEksPrefixTree"
HEAD_RESOURCE = "node:__internal_head__"  # Ray's own (ray/_common/constants.py HEAD_NODE_RESOURCE_NAME)
TREE_ACTOR_OPTIONS: dict[str, Any] = {
    "num_cpus": 0,
    "resources": {HEAD_RESOURCE: 0.001},
    "max_restarts": -1,
    "max_task_retries": 0,  # a call in flight when it dies fails at once; the router falls back
    "lifetime": "detached",
    "get_if_exists": True,
}
TREE_CALL_TIMEOUT_S = 0.5  # a healthy call takes about a millisecond
# The first answer, once per router when it is made: the actor's process may be starting (seconds).
TREE_START_TIMEOUT_S = 30.0
RETRY_AFTER_S = 1.0
RETRY_AFTER_MAX_S = 30.0
INCARNATION_CHECK_S = 5.0  # how often a router asks whether the tree restarted behind its back


class TreeUnavailable(Exception):
    """The prefix tree did not answer in time, or its actor is dead or restarting."""


class IncarnatedPrefixTree(PrefixTree):
    """Ray Serve LLM's prefix tree with an id that changes when its actor restarts (empty again)."""

    def __init__(self) -> None:
        super().__init__()
        self._incarnation = uuid.uuid4().hex

    def incarnation(self) -> str:
        return self._incarnation

    def tenants(self) -> list[str]:
        with self.lock:
            return sorted(self.tenant_to_char_count)


TreeActor = ray.remote(IncarnatedPrefixTree)


class _GuardedMethod:
    def __init__(self, router: "PrefixCacheAffinityFifoRouter", method: str) -> None:
        self._router, self._method = router, method

    def remote(self, *args: Any) -> Any:
        return self._router._tree_call(self._method, args)


class _GuardedTree:
    """What Ray's class holds as its tree actor: each `x.remote(...)` goes through the router's guard,
    which returns an already-resolved object reference, so Ray's own `ray.get` never waits."""

    def __init__(self, router: "PrefixCacheAffinityFifoRouter") -> None:
        self._router = router

    def __getattr__(self, method: str) -> _GuardedMethod:
        return _GuardedMethod(self._router, method)


class PrefixCacheAffinityFifoRouter(FIFOMixin, PrefixCacheAffinityRouter):
    """Ray Serve LLM's PrefixCacheAffinityRouter with Serve's FIFOMixin, its tree on the head and every
    tree call bounded, falling back to power-of-two choices while the tree is away."""

    def initialize_state(self, **kwargs: Any) -> None:  # type: ignore[override]  # passes every keyword on
        kwargs.pop("tree_actor", None)
        deployment = getattr(self, "_deployment_id", None)
        # Ray's own naming of a deployment's tree namespace: serve::<app>::<deployment>
        names = (getattr(deployment, "app_name", None), getattr(deployment, "name", None))
        parts = [SERVE_NAMESPACE, *(p for p in names if p)]
        self._tree_namespace = "::".join(parts)
        self._tree: Optional[Any] = None
        self._tree_incarnation: Optional[str] = None
        self._incarnation_checked = 0.0
        self._must_check = True
        self._tree_down_until = 0.0
        self._retry_after = RETRY_AFTER_S
        self._resolved = ray.put(None)  # what a call sent without waiting hands back to Ray's ray.get
        self._refetch = True
        super().initialize_state(tree_actor=_GuardedTree(self), **kwargs)  # type: ignore[arg-type]  # duck-typed handle
        # fetch (or create) the tree now and wait for its first answer, once: a tree still starting when
        # this gives up only defers prefix routing (power of two choices meanwhile)
        self._fetch_tree()
        try:
            self._check_incarnation(TREE_START_TIMEOUT_S)
        except TreeUnavailable:
            pass

    # --- the tree actor ------------------------------------------------------------------------------

    def _fetch_tree(self) -> None:
        """The tree actor by name, created on the head if there is none (never raises)."""
        self._refetch = False
        try:
            self._tree = TreeActor.options(
                name=TREE_ACTOR_NAME, namespace=self._tree_namespace, **TREE_ACTOR_OPTIONS
            ).remote()
        except Exception as error:  # GCS unreachable: route without the tree and try again later
            self._tree = None
            self._mark_down(error)
            return
        # `serve.shutdown()` removes it with the application, as Ray's class has its own tree removed
        # (sent without waiting; the controller's method is Serve's internal one).
        try:
            controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
            controller._register_shutdown_cleanup_actor.remote(self._tree)
        except Exception as error:
            logger.info("prefix tree %s not registered for removal at serve.shutdown: %s", TREE_ACTOR_NAME, error)

    def _mark_down(self, error: BaseException) -> None:
        now = time.monotonic()
        if now >= self._tree_down_until:
            logger.warning(
                "prefix tree %s/%s unavailable (%s: %s); routing by power of two choices for %.0f s",
                self._tree_namespace,
                TREE_ACTOR_NAME,
                type(error).__name__,
                error,
                self._retry_after,
            )
        self._tree_down_until = now + self._retry_after
        self._retry_after = min(RETRY_AFTER_MAX_S, self._retry_after * 2)
        self._must_check = True  # whatever answers next is checked, and filled again if it is a new start
        self._refetch = True

    def _tree_usable(self) -> bool:
        """False while the tree is marked down; once the wait is over, fetch it again and check it."""
        if time.monotonic() < self._tree_down_until:
            return False
        if self._refetch:
            self._fetch_tree()
        if self._must_check or time.monotonic() - self._incarnation_checked > INCARNATION_CHECK_S:
            try:
                self._check_incarnation()
            except TreeUnavailable:
                return False
        return True

    def _wait(self, ref: Any, timeout: float = TREE_CALL_TIMEOUT_S) -> Any:
        try:
            return ray.get(ref, timeout=timeout)
        except (GetTimeoutError, RayError) as error:
            self._mark_down(error)
            raise TreeUnavailable(str(error)) from error

    def _check_incarnation(self, timeout: float = TREE_CALL_TIMEOUT_S) -> None:
        """Ask the tree which start of its actor answers; a new one is empty: enter the replicas again."""
        if self._tree is None:
            raise TreeUnavailable("no tree actor")
        incarnation = self._wait(self._tree.incarnation.remote(), timeout)
        self._incarnation_checked, self._must_check = time.monotonic(), False
        if incarnation != self._tree_incarnation:
            replicas = [rid.to_full_id_str() for rid in getattr(self, "_replica_id_set", ())]
            if replicas:
                self._wait(self._tree.add_tenants.remote(replicas, time.time()))
            if getattr(self, "_do_eviction", False):
                self._wait(
                    self._tree.start_eviction_loop.remote(
                        self._eviction_threshold_chars, self._eviction_target_chars, self._eviction_interval_secs
                    )
                )
            if self._tree_incarnation is not None or replicas:
                logger.info("prefix tree %s: entered %d replica(s) into a new tree", TREE_ACTOR_NAME, len(replicas))
            self._tree_incarnation = incarnation
            self._retry_after = RETRY_AFTER_S

    def _tree_call(self, method: str, args: tuple) -> Any:
        """One call of Ray's class to its tree, bounded; `insert` is sent without waiting."""
        if not self._tree_usable() or self._tree is None:
            raise TreeUnavailable("the prefix tree is marked down")
        ref = getattr(self._tree, method).remote(*args)
        if method == "insert":
            return self._resolved
        self._wait(ref)
        return ref  # resolved: Ray's own ray.get returns at once

    # --- Ray's hooks, each able to go on without the tree ---------------------------------------------

    async def choose_replicas(self, candidate_replicas: list, pending_request: Any = None) -> list:
        try:
            return await super().choose_replicas(candidate_replicas, pending_request)
        except (TreeUnavailable, KeyError):  # KeyError: the tree named a replica this router no longer has
            return await PowerOfTwoChoicesRequestRouter.choose_replicas(
                self,  # type: ignore[arg-type]  # the plain power-of-two choice on this router's replicas
                candidate_replicas=candidate_replicas,
                pending_request=pending_request,
            )

    def on_request_routed(self, pending_request: Any, replica_id: Any, result: Any) -> None:
        try:
            super().on_request_routed(pending_request, replica_id, result)
        except TreeUnavailable:
            pass

    def update_replicas(self, replicas: list) -> None:
        try:
            super().update_replicas(replicas)
        except TreeUnavailable:
            pass  # the replica set is updated; the tree gets them when it is back (_check_incarnation)

    def on_replica_actor_died(self, replica_id: Any) -> None:
        try:
            super().on_replica_actor_died(replica_id)
        except TreeUnavailable:
            pass
