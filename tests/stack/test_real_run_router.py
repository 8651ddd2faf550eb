"""`make realrun-router`: Ray Serve's routers on the CPU with stand-in replicas. Its pieces here, and
the saved run replayed: it ran the routers the prefix arms render, and its hit rates meet the model."""

from __future__ import annotations

import asyncio
import inspect
import json
import types
from pathlib import Path

import pytest
from helpers import run_async

from llm_pd_eks_sizing.realrun import doc as real_run_doc
from llm_pd_eks_sizing.realrun import router_run, routing_evidence
from llm_pd_eks_tools.core.cli import Exit, ToolError

RUN = routing_evidence.router_run()

RECORD = json.loads(RUN.read_text()) if RUN else {}
# The run that found why Ray's prefix router stalls (its arms: Serve's default, Ray's class counted, and
# the same yielding on a round with nothing to route); the analysis in docs/real-run.md rests on it.
FIRST = json.loads((router_run.DATA / "2026-12-06.json").read_text())


def test_a_stand_in_replica_holds_whole_prefixes_and_evicts_the_least_recently_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray.serve

    context = types.SimpleNamespace(replica_id=types.SimpleNamespace(unique_id="r1"))
    monkeypatch.setattr(ray.serve, "get_replica_context", lambda: context)
    replica = router_run.CacheReplica(capacity=2, hit_s=0.0, miss_s=0.0)
    hits = [run_async(replica(types.SimpleNamespace(prefix=k)))["hit"] for k in ("a", "b", "a", "c", "b", "a")]
    # a, b miss; a hits (now most recent); c evicts b; b misses and evicts a; a misses
    assert hits == [False, False, True, False, False, False]


def test_a_loads_figures_count_hits_replicas_a_prefix_and_the_split() -> None:
    rows = [
        {"prefix": 0, "replica": "x", "hit": False},
        {"prefix": 0, "replica": "x", "hit": True},
        {"prefix": 1, "replica": "y", "hit": False},
        {"prefix": 1, "replica": "x", "hit": False},
    ]
    got = router_run.level(rows, clients=2, asked=5)
    assert (got["requests"], got["answered"], got["hit_rate"]) == (5, 4, 0.25)
    assert got["mean_replicas_per_prefix"] == 1.5 and got["replica_shares"] == [0.25, 0.75]
    assert router_run.level([], clients=4, asked=96)["hit_rate"] is None  # a load that answered nothing


def test_a_load_that_does_not_finish_in_time_is_a_stall_with_what_it_answered() -> None:
    class Handle:
        def __init__(self) -> None:
            self.sent = 0

        async def answer(self, request: object) -> dict[str, object]:
            self.sent += 1
            if self.sent > 2:
                await asyncio.sleep(60)  # the router stopped answering
            return {"replica": "x", "hit": False}

        def remote(self, request: object) -> object:
            return self.answer(request)

    requests = [{"n": n, "prefix": n, "key": f"0-{n}", "prompt": "p"} for n in range(5)]
    seen: list[str] = []
    rows, stalled = run_async(
        router_run.closed_loop(Handle(), requests, clients=1, timeout_s=0.5, on_stall=lambda: seen.append("stall"))
    )
    assert stalled and [r["n"] for r in rows] == [0, 1]
    assert seen == ["stall"]  # called once, at the stall, before the requests are cancelled


def test_only_the_projects_prefix_router_is_taken_from_its_defining_module() -> None:
    """The public name the arm configures re-exports exactly that class: read from Ray 2.58's own
    ray/serve/llm/request_router.py (importing it needs vLLM)."""
    import ast

    import ray
    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import PrefixCacheAffinityRouter

    public = Path(ray.__file__).parent / "serve" / "llm" / "request_router.py"
    sources = {
        alias.name: node.module
        for node in ast.walk(ast.parse(public.read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert sources["PrefixCacheAffinityRouter"] == PrefixCacheAffinityRouter.__module__

    from llm_pd_eks.runtime.prefix_router import PrefixCacheAffinityFifoRouter
    from llm_pd_eks.serve_routing import PREFIX_ROUTER_CLASS
    from llm_pd_eks_sizing.realrun import router_probe

    config = {"request_router_class": PREFIX_ROUTER_CLASS}
    assert router_run.router_class(config) is router_probe.CountingProjectRouter
    assert router_run.router_class(config, "prefix-ray") is router_probe.CountingPrefixRouter
    assert issubclass(router_probe.CountingProjectRouter, PrefixCacheAffinityFifoRouter)
    assert issubclass(router_probe.CountingPrefixRouter, PrefixCacheAffinityRouter)
    assert not issubclass(router_probe.CountingPrefixRouter, PrefixCacheAffinityFifoRouter)  # Ray's as is

    # nothing else overridden: the rounds counted, and which task took each request from the route queue
    def methods(cls: type) -> set[str]:
        return {k for k, v in vars(cls).items() if inspect.isfunction(v)}

    assert methods(router_probe.CountingPrefixRouter) == {"choose_replicas", "_get_next_pending_request_to_route"}
    assert methods(router_probe.CountingProjectRouter) == set()
    with pytest.raises(ToolError, match=r"not llm_pd_eks_prefix_router") as error:
        router_run.router_class({"request_router_class": "my.Router"})
    assert error.value.exit_code == Exit.FAILED


# --- the saved run, replayed --------------------------------------------------------------------------


def test_the_saved_run_is_of_the_routers_the_prefix_arms_render_now() -> None:
    assert RUN is not None, "no saved router run: `make realrun-router`"
    assert RECORD["options"] == router_run.arm_options(), "the arms changed since the run: `make realrun-router`"
    assert RECORD["replica"] == router_run.replica_shape()
    assert RECORD["versions"]["ray"] == "2.58.0" and RECORD["command"] == "make realrun-router"


def test_serve_default_router_meets_the_models_spread_hit_rate_at_every_load() -> None:
    """Power of two choices spreads each prefix over both replicas about as an even coin does: the
    model's (asks - R(1 - (1 - 1/R)^asks)) / asks of the cached share, within three binomial standard
    deviations of it for the load's asks (the router's choices are random: four runs gave 41 to 55 %)."""
    model = routing_evidence.router_model(RECORD, routed=False)
    levels = RECORD["arms"]["prefix-pd"]
    assert [lv["clients"] for lv in levels] == list(router_run.CONCURRENCIES)
    for lv in levels:
        assert not lv["stalled"] and lv["answered"] == lv["requests"]
        spread = 3 * (model * (1 - model) / lv["requests"]) ** 0.5
        assert abs(lv["hit_rate"] - model) <= spread, lv["clients"]
        assert lv["mean_replicas_per_prefix"] > 1.5  # most prefixes reach both replicas


def test_the_projects_router_answers_every_load_keeping_each_prefix_on_one_replica_as_the_model_says() -> None:
    model = routing_evidence.router_model(RECORD, routed=True)
    levels = RECORD["arms"]["prefix"]
    assert [lv["clients"] for lv in levels] == list(router_run.CONCURRENCIES)
    for lv in levels:
        assert not lv["stalled"] and lv["answered"] == lv["requests"], lv["clients"]
        assert all(0.4 <= share <= 0.6 for share in lv["replica_shares"])
        if lv["clients"] <= 8:
            assert lv["mean_replicas_per_prefix"] == 1.0 and lv["hit_rate"] == pytest.approx(model, abs=0.01)
        else:
            # past the replicas' max_ongoing_requests, FIFOMixin may hand a replica chosen for one
            # request's prefix to an older waiting request of another prefix: a prefix can reach a
            # second replica now and then (the run of 2026-12-07: one of 24 at 16 clients)
            assert lv["mean_replicas_per_prefix"] <= 1.1 and lv["hit_rate"] == pytest.approx(model, abs=0.03)


def test_rays_router_as_is_stalls_from_four_clients_in_the_same_run() -> None:
    one, four, *rest = RECORD["arms"]["prefix-ray"]
    assert one["clients"] == 1 and not one["stalled"] and one["answered"] == one["requests"]
    assert four["clients"] == 4 and four["stalled"] and four["answered"] < four["requests"]
    assert all(lv.get("skipped") == "a load before it stalled" for lv in rest)


def test_the_page_shows_the_saved_router_run_and_the_stall_it_recorded() -> None:
    text = real_run_doc.DOC.read_text()
    assert routing_evidence.router_section(RUN) in text
    stalled = [lv for lv in RECORD["arms"]["prefix-ray"] if lv.get("stalled")]
    assert ("stalls from four" in text) == bool(stalled and stalled[0]["clients"] == 4)


def test_the_router_table_says_not_run_without_a_saved_run(tmp_path: Path) -> None:
    assert routing_evidence.router_section(None) == "Not run yet (`make realrun-router`)."


def test_the_prefix_routers_stall_is_a_routing_task_going_round_with_no_request_to_route() -> None:
    """Ray 2.58's routing tasks outnumber the requests left to route (lazy cleanup), and a task with none
    goes round without suspending: at four clients the prefix router made over a hundred thousand such
    rounds and answered nothing; at one client about one a request."""
    one, four = FIRST["arms"]["prefix"][:2]
    assert one["clients"] == 1 and one["idle_rounds"] <= 2 * one["requests"]
    assert four["clients"] == 4 and four["stalled"] and four["answered"] == 0 and four["idle_rounds"] > 100_000
    assert all(lv["idle_rounds"] is None for lv in FIRST["arms"]["prefix-pd"])  # Serve's router: not counted


def test_yielding_on_those_rounds_lets_rays_router_route_at_the_models_rate_but_one() -> None:
    stalled, yielding = FIRST["arms"]["prefix"][1], FIRST["arms"]["prefix-yield"][1]
    assert yielding["clients"] == 4 and yielding["answered"] >= 0.9 * yielding["requests"]
    assert yielding["idle_rounds"] < stalled["idle_rounds"] / 50
    assert yielding["hit_rate"] == pytest.approx(routing_evidence.router_model(FIRST, routed=True), abs=0.02)
    assert yielding["mean_replicas_per_prefix"] == 1.0


def test_at_each_stall_one_request_waited_that_no_routing_task_would_route_again() -> None:
    """The router's state when the load stalled (router_probe.router_state): a request waiting for a
    replica but no longer queued to be routed, while routing tasks went round with nothing to route."""
    for arm in ("prefix", "prefix-yield"):
        four = FIRST["arms"][arm][1]
        assert four["stalled"] and four["router_at_stall"]["waiting"] >= 1, arm
        assert four["router_at_stall"]["queued_to_route"] == 0 and four["router_at_stall"]["routing_tasks"] >= 1
        # taken from the queue by a routing task that finished without routing or re-queueing it
        assert four["router_at_stall"]["taken_by_a_finished_task"] == four["router_at_stall"]["waiting"]
