"""The project's prefix router keeps answering when its prefix tree goes away, on a local Ray 2.58 and
Serve: two stand-in replicas behind Ray Serve's own handle and router machinery, the router class the
stacks render (llm_pd_eks/runtime/prefix_router.py), and the tree actor killed in the middle of a load
(once as a crash Ray restarts, once removed for good). Every request must be answered, and the tree
must come back with the replicas entered again, so prefix routing resumes.

Deterministic on a loaded two-core machine: no assertion on time; the waits are bounds on a condition
(a request answered, the tree filled again), generous, never a fixed sleep that an outcome rests on.
"""

from __future__ import annotations

import asyncio
import os
import types
from typing import Any, Iterator

import pytest
from helpers import ROOT, run_async

from llm_pd_eks.runtime import prefix_router

APP, DEPLOYMENT = "resilience", "prefill"
TREE_NAMESPACE = f"serve::{APP}::{DEPLOYMENT}"
REQUESTS, CLIENTS, KILL_AFTER = 60, 6, 15
ANSWER_BOUND_S = 180.0  # a request not answered within this is a stall
REFILL_ROUNDS = 240  # requests sent, half a second apart, while waiting for the tree to be filled again

# Ray's settings for a loaded machine (as tests/integration/test_ray_placement.py): workers start one at a time.
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_enable_worker_prestart": "0",
    "RAY_worker_maximum_startup_concurrency": "1",
    "RAY_gcs_server_port_wait_time_s": "180",
}


@pytest.fixture(scope="module")
def handle() -> Iterator[Any]:
    import ray
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    saved = {k: os.environ.get(k) for k in (*RAY_ENV, "PYTHONPATH")}
    os.environ.update(RAY_ENV)
    # the raylet's workers import the router class from this checkout, as the pods import the ConfigMap
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), saved["PYTHONPATH"]) if p)
    # a cluster of its own, whatever an earlier module of this worker left in RAY_ADDRESS
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False, configure_logging=False)

    class Replica:
        """A stand-in engine: answers with its replica id after a short wait."""

        async def __call__(self, request: Any) -> str:
            await asyncio.sleep(0.02)
            return serve.get_replica_context().replica_id.unique_id

    router = RequestRouterConfig(
        request_router_class=prefix_router.PrefixCacheAffinityFifoRouter,
        request_router_kwargs={"imbalanced_threshold": 4, "do_eviction": True},
    )
    deployment = serve.deployment(name=DEPLOYMENT)(Replica).options(
        num_replicas=2, max_ongoing_requests=4, request_router_config=router
    )
    try:
        yield serve.run(deployment.bind(), name=APP, route_prefix=None)
    finally:
        serve.shutdown()
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def prompt(n: int) -> Any:
    """What Ray's router reads (`.prompt`): eight shared prefixes, each asked repeatedly."""
    return types.SimpleNamespace(prompt=f"system prompt {n % 8}: " + "context " * 40 + f"question {n}")


def tree() -> Any:
    import ray

    return ray.get_actor(prefix_router.TREE_ACTOR_NAME, namespace=TREE_NAMESPACE)


async def load_with_a_kill(handle: Any, no_restart: bool) -> list[str]:
    """REQUESTS through CLIENTS closed-loop clients; the tree actor is killed after KILL_AFTER answers."""
    import ray

    queue = list(range(REQUESTS))
    answers: list[str] = []
    killed = False

    async def client() -> None:
        nonlocal killed
        while queue:
            n = queue.pop(0)
            answers.append(await asyncio.wait_for(handle.remote(prompt(n)), ANSWER_BOUND_S))
            if len(answers) >= KILL_AFTER and not killed:
                killed = True
                ray.kill(tree(), no_restart=no_restart)

    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return answers


def refilled(handle: Any) -> list[str]:
    """The tree's tenants once the router has entered the replicas into the new tree (bounded)."""
    import ray

    tenants: list[str] = []
    for n in range(REFILL_ROUNDS):
        run_async(asyncio.wait_for(handle.remote(prompt(n)), ANSWER_BOUND_S))
        try:
            tenants = ray.get(tree().tenants.remote(), timeout=30)
        except (ValueError, ray.exceptions.RayError):  # not there again yet
            tenants = []
        if len(tenants) == 2:
            return tenants
        run_async(asyncio.sleep(0.5))
    return tenants


@pytest.mark.parametrize("no_restart", [False, True], ids=["crash-restarted", "removed"])
def test_every_request_is_answered_when_the_tree_dies_mid_load_and_the_tree_comes_back(handle, no_restart):
    answers = run_async(load_with_a_kill(handle, no_restart))
    assert len(answers) == REQUESTS
    assert len(set(answers)) == 2  # both replicas served
    tenants = refilled(handle)
    assert len(tenants) == 2 and all(DEPLOYMENT in t for t in tenants)


def test_the_tree_runs_without_a_cpu_and_is_restarted_by_ray(handle):
    import ray

    run_async(asyncio.wait_for(handle.remote(prompt(0)), ANSWER_BOUND_S))
    before = ray.get(tree().incarnation.remote(), timeout=60)
    ray.kill(tree(), no_restart=False)
    after = before
    for _ in range(REFILL_ROUNDS):  # Ray restarts it under the same name (max_restarts=-1)
        try:
            after = ray.get(tree().incarnation.remote(), timeout=30)
        except ray.exceptions.RayError:
            pass
        if after != before:
            break
        run_async(asyncio.sleep(0.5))
    assert after != before
    assert prefix_router.TREE_ACTOR_OPTIONS["num_cpus"] == 0
