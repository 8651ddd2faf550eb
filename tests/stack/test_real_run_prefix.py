"""The real run's prefix-routing arms (`mix-prefix-pd`, `mix-prefix`), offline.

The bundle: both arms are the dev stack's rendered P/D app with overrides.yaml's entries and its
`prefix_run` ones, differing only in each role's request router; Ray Serve's own build accepts both
with two quarter-GPU replicas a role, and the prefix raylets hold them. The workload generator, the
closed loop (against a fake streaming server), the prefix-cache hit rate read from Prometheus text,
and the raylets' port layout against the NIXL side-channel ports Ray Serve LLM's own code picks.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import types
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

import pytest
from helpers import (
    FakeCompletions,
    bindable,
    changed_paths,
    free_port_window,
    runtime_module_on_path,
    serve_build,
)

from llm_pd_eks import metrics as m
from llm_pd_eks import serve_routing
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.models import MODELS
from llm_pd_eks.ray_resources import role_resource
from llm_pd_eks.serving_names import RAY_VERSION, ROLES
from llm_pd_eks_sizing.realrun import doc as real_run_doc
from llm_pd_eks_sizing.realrun import evidence, gpu_load, gpu_main, routing_evidence
from llm_pd_eks_sizing.realrun.render import (
    PREFIX_ARMS,
    ROLE_SLOT,
    load_overrides,
    rendered_stack,
    run_inputs,
    write_bundle,
)

OVERRIDES = load_overrides()
INPUTS = run_inputs(OVERRIDES)
PREFIX_LLM = OVERRIDES["prefix_run"]["llm_config"]
pytestmark = pytest.mark.filterwarnings("ignore:coroutine .LLMServer.__del__. was never awaited")


pytestmark = pytest.mark.usefixtures("ray_standins")


def app(arm: str) -> dict[str, Any]:
    (application,) = INPUTS["serve_prefix"][arm]["applications"]
    return application


# --- the bundle -------------------------------------------------------------------------------------


def test_the_two_arms_differ_only_in_each_roles_request_router() -> None:
    plain, routed = app("prefix-pd"), app("prefix")
    diff = changed_paths(plain, routed)
    assert diff and all(".deployment_config.request_router_config." in p for p in diff), diff
    assert {p.split(".")[1] for p in diff} == {f"{role}_config" for role in ROLES}
    for role in ROLES:
        assert "request_router_config" not in plain["args"][f"{role}_config"]["deployment_config"]
        router = routed["args"][f"{role}_config"]["deployment_config"]["request_router_config"]
        assert router["request_router_class"] == serve_routing.PREFIX_ROUTER_CLASS
        for arm in PREFIX_ARMS:  # prefix caching on in both: the router is the one difference
            assert app(arm)["args"][f"{role}_config"]["engine_kwargs"]["enable_prefix_caching"] is True


def test_the_prefix_arms_are_the_pd_run_but_for_the_prefix_run_entries() -> None:
    """The routed arm is the P/D run as the stack renders it (prefix routing on by default), changed by
    the prefix_run entries and nothing else."""
    (pd,) = INPUTS["serve_pd"]["applications"]

    def at(config: dict[str, Any], path: str) -> Any:
        node: Any = config
        for key in path.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        return node

    diff = {p.removesuffix(".0").removesuffix(".1") for p in changed_paths(pd, app("prefix"))}
    expected = {
        f"args.{r}_config.{i['path']}"
        for r in ROLES
        for i in PREFIX_LLM
        if at(pd["args"][f"{r}_config"], i["path"]) != i["value"]
    }
    assert diff == expected and expected
    for item in PREFIX_LLM:  # each entry is what both arms run with, in both roles
        for role in ROLES:
            for arm in PREFIX_ARMS:
                assert at(app(arm)["args"][f"{role}_config"], item["path"]) == item["value"], (arm, item["path"])


def test_every_prefix_run_entry_says_why(tmp_path: Path) -> None:
    entries = [i for s in ("llm_config", "raylet") for i in OVERRIDES["prefix_run"][s]]
    assert len(entries) <= 12, "each entry is a way the arms are not the deployment: keep them few"
    assert all(len(i["reason"].split()) >= 5 for i in entries)
    broken = json.loads(json.dumps(OVERRIDES))
    broken["prefix_run"]["raylet"][0]["reason"] = " "
    path = tmp_path / "overrides.yaml"
    path.write_text(json.dumps(broken))  # JSON is YAML
    with pytest.raises(ValueError, match=re.escape("prefix_run.raylet override resources.ROLE_SLOT has no reason")):
        load_overrides(path)


def by_role(built: Any) -> dict[str, Any]:
    return {d.name.split(":")[0].lower(): d for d in built.deployments}


@pytest.mark.parametrize("arm", sorted(PREFIX_ARMS))
def test_ray_serve_builds_each_arm_with_two_quarter_gpu_replicas_a_role(arm: str) -> None:
    from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import PrefixCacheAffinityRouter
    from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter

    deployments = by_role(serve_build(app(arm)))
    stack = rendered_stack(OVERRIDES)
    serving = stack.serving
    instance = GPU_INSTANCE_TYPES[stack.gpu_nodes.instance_type]
    routed = serving.routing.model_copy(
        update={"prefix_aware": serving.routing.prefix_aware.model_copy(update={"prefill": True, "decode": True})}
    )
    for role in ROLES:
        d = deployments[role]
        auto = d._deployment_config.autoscaling_config
        assert (auto.min_replicas, auto.max_replicas) == (2, 2)
        (bundle,) = d._replica_config.placement_group_bundles
        assert bundle["GPU"] == 0.25 and bundle[role_resource(role)] == 1
        llm_config = d._replica_config.init_kwargs["llm_config"]
        # vLLM's engine core, a child of the replica, reads VLLM_RAY_PER_WORKER_GPUS from the replica's own
        # environment: Ray Serve's build puts the LLMConfig's runtime_env in the replica's actor options
        replica_env = d._replica_config.ray_actor_options["runtime_env"]["env_vars"]
        assert replica_env["VLLM_RAY_PER_WORKER_GPUS"] == "0.25"  # the bundle's share
        # what Ray Serve LLM derives from the bundle itself goes to its callback, not to the replica (the
        # run of 2026-12-06: every engine asked for a whole GPU without the entry above)
        callback_env = VLLMEngineConfig.from_llm_config(llm_config).get_runtime_env_with_local_env_vars()["env_vars"]
        assert callback_env["VLLM_RAY_PER_WORKER_GPUS"] == "0.25"
        engine = llm_config.engine_kwargs
        assert engine["kv_cache_memory_bytes"] == 2 * 2**30 and engine["max_model_len"] == 4096
        assert engine["enforce_eager"] is True and "compilation_config" not in engine
        router = d._deployment_config.request_router_config
        if PREFIX_ARMS[arm]:
            with runtime_module_on_path():
                cls = router.get_request_router_class()
            assert issubclass(cls, PrefixCacheAffinityRouter) and cls.__module__ == serve_routing.PREFIX_ROUTER_MODULE
            wanted = serve_routing.request_router_config(serving.model_copy(update={"routing": routed}), role, instance)
            assert wanted is not None and router.request_router_kwargs == wanted["request_router_kwargs"]
        else:
            assert router.get_request_router_class() is PowerOfTwoChoicesRequestRouter


def test_the_prefix_raylets_hold_both_replicas_of_their_role() -> None:
    deployments = by_role(serve_build(app("prefix")))
    plain, prefix = INPUTS["raylets"], INPUTS["raylets_prefix"]
    for role in ROLES:
        start = prefix[role]["start"]
        slot = role_resource(role)
        assert (start["resources"][slot], plain[role]["start"]["resources"][slot]) == (2, 1)
        held = {"GPU": start["num-gpus"], "CPU": start["num-cpus"], **start["resources"]}
        (bundle,) = deployments[role]._replica_config.placement_group_bundles
        for resource, amount in bundle.items():  # two replicas' bundles, as Ray Serve LLM computes them
            assert 2 * amount <= held[resource], (role, resource)
        assert {k: v for k, v in start.items() if k != "resources"} == {
            k: v for k, v in plain[role]["start"].items() if k != "resources"
        }
    assert [i["path"] for i in OVERRIDES["prefix_run"]["raylet"]] == [f"resources.{ROLE_SLOT}"]


def test_two_gib_of_kv_holds_fewer_tokens_than_every_prefix_and_more_than_half() -> None:
    """What makes routing visible in the hit rate (docs/real-run.md): one replica cannot keep all 24."""
    (kv,) = [i["value"] for i in PREFIX_LLM if i["path"] == "engine_kwargs.kv_cache_memory_bytes"]
    serving = rendered_stack(OVERRIDES).serving
    assert serving.kv_cache_dtype == "auto"  # the model's bf16
    tokens = kv // MODELS[serving.model_id].kv_bytes_per_token(2)
    every = gpu_load.PREFIX_COUNT * gpu_load.PREFIX_TOKENS
    assert every // 2 < tokens < every
    assert (tokens, every) == (37_449, 49_152)  # the figures the page gives


def test_the_bundle_has_the_files_each_prefix_phase_reads(tmp_path: Path) -> None:
    write_bundle(tmp_path, OVERRIDES)
    for phase, arm in gpu_main.PREFIX_PHASES.items():
        assert json.loads((tmp_path / f"serve-{arm}.json").read_text()) == INPUTS["serve_prefix"][arm], phase
    assert set(gpu_main.PREFIX_PHASES.values()) == set(PREFIX_ARMS)
    raylets = json.loads((tmp_path / "raylets-prefix.json").read_text())
    assert raylets == {"head": INPUTS["head"], **INPUTS["raylets_prefix"]}


# --- the workload -----------------------------------------------------------------------------------


def test_the_workload_asks_each_of_24_distinct_2048_token_prefixes_several_times_shuffled() -> None:
    requests = gpu_load.prefix_workload(seed=0)
    assert len(requests) == gpu_load.PREFIX_COUNT * gpu_load.PREFIX_REPEATS
    by_prefix: dict[int, list[dict[str, Any]]] = {}
    for r in requests:
        by_prefix.setdefault(r["prefix"], []).append(r)
    assert sorted(by_prefix) == list(range(24)) and all(len(v) == gpu_load.PREFIX_REPEATS for v in by_prefix.values())
    texts = {}
    for p, rs in by_prefix.items():
        words = [r["prompt"].split(" Request ")[0] for r in rs]
        assert len(set(words)) == 1  # the same prefix text every time it is asked
        texts[p] = words[0]
        assert all(r["prefix_tokens"] == 2048 == gpu_load.word_count(words[0]) for r in rs)
    assert len({" ".join(t.split()[:16]) for t in texts.values()}) == 24  # distinct from their first block
    assert len({r["prompt"] for r in requests}) == len(requests)  # every suffix its own
    order = [r["prefix"] for r in requests]
    assert order != sorted(order) and len(set(order[:24])) > 12  # shuffled: the first quarter mixes many prefixes
    assert [r["n"] for r in requests] == list(range(len(requests)))


def test_the_workload_is_the_same_for_a_seed_and_another_for_another_seed() -> None:
    a, b, c = gpu_load.prefix_workload(seed=0), gpu_load.prefix_workload(seed=0), gpu_load.prefix_workload(seed=1)
    assert a == b
    assert {r["prompt"].split(" Request ")[0] for r in a}.isdisjoint({r["prompt"].split(" Request ")[0] for r in c})


def test_a_request_fits_the_arms_context() -> None:
    (limit,) = [i["value"] for i in PREFIX_LLM if i["path"] == "engine_kwargs.max_model_len"]
    for r in gpu_load.prefix_workload(seed=2):
        assert gpu_load.word_count(r["prompt"]) + gpu_load.PREFIX_OUTPUT_TOKENS < limit / 1.5  # room for 2-token words


def test_a_prefix_is_fitted_by_the_tokenizer_it_is_given() -> None:
    """Where some words are two tokens, the prefix is fitted to the count, never past it."""

    def two_for_long_words(text: str) -> int:
        return sum(2 if len(w) > 5 else 1 for w in text.split())

    requests = gpu_load.prefix_workload(seed=3, count=3, repeats=2, count_tokens=two_for_long_words)
    for r in requests:
        prefix = r["prompt"].split(" Request ")[0]
        assert r["prefix_tokens"] == two_for_long_words(prefix)
        assert 2047 <= r["prefix_tokens"] <= 2048
        assert gpu_load.word_count(prefix) < 2000  # fewer words than tokens: the count was the tokenizer's


# --- the closed loop, against a fake streaming server ----------------------------------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCompletions]:
    server = FakeCompletions()
    monkeypatch.setattr(gpu_load, "SERVE", server.url)
    yield server
    server.close()
    assert not server.server.errors


def test_a_streamed_request_is_timed_from_its_first_token_and_counted_by_the_usage_chunk(fake: FakeCompletions) -> None:
    row = gpu_load.streamed_completion("m", "alpha beta gamma", max_tokens=5)
    assert row["status"] == 200 and row["chunks"] == 5
    assert (row["prompt_tokens"], row["output_tokens"]) == (3, 5)
    assert 0.015 < row["ttft_s"] < row["e2e_s"]
    assert 0.015 < row["itl_s"] < 0.2  # four gaps of 20 ms over four tokens after the first
    (body,) = fake.bodies
    assert body["stream"] and body["stream_options"] == {"include_usage": True} and body["ignore_eos"]
    assert (body["model"], body["prompt"], body["max_tokens"]) == ("m", "alpha beta gamma", 5)


def test_an_unreachable_server_is_a_row_with_the_error_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_load, "SERVE", "http://127.0.0.1:9")
    row = gpu_load.streamed_completion("m", "x")
    assert row["status"] == 0 and "error" in row and "ttft_s" not in row


def test_the_closed_loop_sends_every_request_once_with_at_most_its_clients_in_flight(fake: FakeCompletions) -> None:
    requests = gpu_load.prefix_workload(seed=0, count=4, tokens=20, repeats=3)
    rows = gpu_load.closed_loop(requests, 3, lambda r: gpu_load.streamed_completion("m", r["prompt"], 5))
    assert [r["n"] for r in rows] == [r["n"] for r in requests] and all(r["status"] == 200 for r in rows)
    assert sorted(b["prompt"] for b in fake.bodies) == sorted(r["prompt"] for r in requests)
    assert fake.most == 3  # closed loop: three clients, never more in flight
    assert {r["client"] for r in rows} == {0, 1, 2} and "prompt" not in rows[0]
    s = gpu_load.summary(rows, wall_s=2.0)
    assert (s["requests"], s["completed"]) == (12, 12) and s["output_tok_s"] == 12 * 5 / 2.0
    assert s["p50_ttft_ms"] <= s["p90_ttft_ms"] <= s["p99_ttft_ms"]


def test_a_request_that_gets_no_byte_within_its_timeout_is_a_stalled_row(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeCompletions(tokens=1, gap_s=1.0)
    monkeypatch.setattr(gpu_load, "SERVE", server.url)
    try:
        row = gpu_load.streamed_completion("m", "x", timeout_s=0.2)
    finally:
        server.close()
    assert row["stalled"] is True and row["status"] == 200 and "ttft_s" not in row


def test_once_a_request_stalls_the_loop_sends_no_more_and_the_load_says_it_stalled() -> None:
    requests = gpu_load.prefix_workload(seed=0, count=4, tokens=20, repeats=3)
    sent: list[int] = []

    def send(request: dict[str, Any]) -> dict[str, Any]:
        sent.append(request["n"])
        return {"status": 0, "error": "timed out", "stalled": True} if request["n"] == 1 else {"status": 200}

    rows = gpu_load.closed_loop(requests, 1, send)
    assert sent == [0, 1]
    assert [r.get("not_sent", False) for r in rows] == [False, False] + [True] * 10
    assert [r["n"] for r in rows] == [r["n"] for r in requests] and "prompt" not in rows[5]
    assert gpu_load.summary(rows, wall_s=1.0)["stalled"] is True
    assert "stalled" not in gpu_load.summary(rows[:1], wall_s=1.0)


def test_the_prefix_loads_after_a_stalled_one_are_skipped_not_sent() -> None:
    sent: list[str] = []

    def send(model: str, prompt: str) -> dict[str, Any]:
        sent.append(prompt)
        return {"status": 0, "error": "timed out", "stalled": True}

    levels = gpu_load.prefix_loads("m", dict, send=send, wait_s=0, concurrencies=(1, 4, 8), sleep=lambda s: None)
    assert len(sent) == 1 and levels[0]["summary"]["stalled"] is True
    assert [lv.get("skipped") for lv in levels[1:]] == [gpu_load.STALLED_BEFORE] * 2


def test_percentiles_are_numpys_linear_ones() -> None:
    assert gpu_load.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert gpu_load.percentile([10.0, 0.0], 90) == pytest.approx(9.0)
    assert gpu_load.percentile([], 50) is None


# --- the prefix-cache hit rate, from Prometheus text -----------------------------------------------

SAMPLE = """\
# HELP ray_vllm_prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE ray_vllm_prefix_cache_queries_total counter
ray_vllm_prefix_cache_queries_total{{ReplicaId="a",engine="0",model_name="m"}} {qa}
ray_vllm_prefix_cache_queries_total{{ReplicaId="b",engine="0",model_name="m"}} {qb}
# TYPE ray_vllm_prefix_cache_hits_total counter
ray_vllm_prefix_cache_hits_total{{ReplicaId="a",engine="0",model_name="m"}} {ha}
ray_vllm_prefix_cache_hits_total{{ReplicaId="b",engine="0",model_name="m"}} {hb}
ray_vllm_external_prefix_cache_hits_total{{ReplicaId="a",engine="0",model_name="m"}} 999999.0
ray_vllm_nixl_bytes_transferred_count{{ReplicaId="a"}} {pulls}
"""


def text(qa: float = 0, qb: float = 0, ha: float = 0, hb: float = 0, pulls: float = 0) -> str:
    return SAMPLE.format(qa=qa, qb=qb, ha=ha, hb=hb, pulls=pulls)


def test_the_runner_reads_the_counters_the_project_names() -> None:
    assert (gpu_load.PREFIX_HITS, gpu_load.PREFIX_QUERIES) == (m.PREFIX_CACHE_HITS, m.PREFIX_CACHE_QUERIES)
    assert gpu_load.KV_PULLS == m.NIXL_BYTES + "_count" and gpu_load.KV_BYTES == m.NIXL_BYTES + "_sum"


def test_the_hit_rate_is_the_growth_of_hits_over_queries_per_role_and_replica() -> None:
    before = {"prefill": text(qa=1000, qb=500, ha=100, hb=0), "head": "# nothing of vLLM here\n"}
    after = {"prefill": text(qa=5000, qb=4500, ha=3100, hb=1000), "head": "# nothing of vLLM here\n"}
    got = gpu_load.prefix_cache(before, after)
    assert set(got) == {"prefill"}  # a node without engines has no entry
    prefill = got["prefill"]
    assert (prefill["queries"], prefill["hits"]) == (8000, 4000) and prefill["hit_rate"] == 0.5
    assert prefill["replicas"]["a"] == {"queries": 4000, "hits": 3000, "hit_rate": 0.75}  # not the external counter
    assert prefill["replicas"]["b"]["hit_rate"] == 0.25


def test_a_replica_first_seen_after_counts_from_zero_and_an_idle_one_has_no_rate() -> None:
    got = gpu_load.prefix_cache({"decode": ""}, {"decode": text(qa=200, ha=50)})["decode"]
    assert got["replicas"]["a"]["hit_rate"] == 0.25 and got["replicas"]["b"]["hit_rate"] is None
    assert gpu_load.deltas({"decode": text(pulls=3)}, {"decode": text(pulls=10)}, gpu_load.KV_PULLS) == {"decode": 7}


def test_the_saved_runs_live_scrape_reads_as_the_same_counters_evidence_reads() -> None:
    """The parser against what Ray really exported (llm_pd_eks_sizing/realrun/data/), node by node."""
    scrape = evidence.scrape_text(evidence.latest(), "metrics-pd-after-bench")
    nodes: dict[str, str] = {}
    node = ""
    for line in scrape.splitlines():
        if line.startswith("# node "):
            node = line.removeprefix("# node ").strip()
            nodes[node] = ""
        else:
            nodes[node] += line + "\n"
    got = gpu_load.prefix_cache({}, nodes)
    for role in ROLES:
        samples = [s for s in evidence.samples(scrape) if s.node == role]
        hits = sum(s.value for s in samples if s.name == m.PREFIX_CACHE_HITS)
        queries = sum(s.value for s in samples if s.name == m.PREFIX_CACHE_QUERIES)
        assert queries > 0 and (got[role]["hits"], got[role]["queries"]) == (hits, queries)
        assert len(got[role]["replicas"]) == 1  # one replica a role in that run
    assert "head" not in got


def test_each_load_is_scraped_before_and_after_and_one_past_the_budget_is_skipped() -> None:
    scrapes = iter(
        [
            {"prefill": text(qa=0, ha=0)},
            {"prefill": text(qa=1000, ha=600)},  # after the first load
            {"prefill": text(qa=1000, ha=600)},
            {"prefill": text(qa=3000, ha=1000)},
        ]
    )
    sent: list[str] = []
    waited: list[float] = []

    def send(model: str, prompt: str) -> dict[str, Any]:
        sent.append(prompt)
        return {"status": 200, "ttft_s": 0.1, "itl_s": 0.01, "output_tokens": 32, "e2e_s": 0.5}

    levels = gpu_load.prefix_loads(
        "m",
        lambda: next(scrapes),
        deadline=time.monotonic() + 600,
        send=send,
        wait_s=12,
        concurrencies=(2, 4),
        sleep=waited.append,
    )
    assert [lv["clients"] for lv in levels] == [2, 4] and [lv["seed"] for lv in levels] == [0, 1]
    assert [lv["prefix_cache"]["prefill"]["hit_rate"] for lv in levels] == [0.6, 0.2]
    assert waited == [12, 12] and len(sent) == 2 * 96
    assert levels[0]["summary"]["completed"] == 96 and len(levels[0]["requests"]) == 96
    skipped = gpu_load.prefix_loads("m", dict, deadline=time.monotonic() + 5, send=send, wait_s=12, sleep=waited.append)
    assert all(lv.get("skipped") for lv in skipped) and len(sent) == 2 * 96


# --- the raylets' ports ----------------------------------------------------------------------------


def nixl_side_channel_ports() -> set[int]:
    """The ports Ray Serve LLM's own NixlConnectorBackend gives each replica of each prefix arm
    (decode's base from PDServingArgs), ranks 0 .. max_replicas - 1."""
    from ray import serve
    from ray.llm._internal.serve.engines.vllm.kv_transfer.nixl import NixlConnectorBackend
    from ray.llm._internal.serve.serving_patterns.prefill_decode.builder import PDServingArgs

    envs = types.ModuleType("vllm.envs")
    envs.is_set = lambda name: False  # type: ignore[attr-defined]
    ports = set()
    for arm in PREFIX_ARMS:
        with runtime_module_on_path():  # Ray imports the router class the deployment config names
            pd = PDServingArgs.model_validate(json.loads(json.dumps(app(arm)["args"])))
        for config in (pd.prefill_config, pd.decode_config):
            for rank in range(config.deployment_config["autoscaling_config"]["max_replicas"]):
                context = types.SimpleNamespace(rank=types.SimpleNamespace(rank=rank))
                with (
                    mock.patch.dict(sys.modules, {"vllm.envs": envs}),
                    mock.patch.object(serve, "get_replica_context", return_value=context),
                    mock.patch.dict(os.environ),
                ):
                    os.environ.pop("VLLM_NIXL_SIDE_CHANNEL_PORT", None)
                    NixlConnectorBackend(config)._set_side_channel_port()
                    ports.add(int(os.environ["VLLM_NIXL_SIDE_CHANNEL_PORT"]))
    return ports


def test_no_raylet_port_is_a_nixl_side_channel_or_a_served_port() -> None:
    nixl = nixl_side_channel_ports()
    assert nixl == {20000, 20001, 22000, 22001}  # two replicas a role, Ray's two bases
    taken: list[int] = []
    for n in range(len(ROLES) + 1):
        ports = gpu_main.raylet_ports(n)
        workers = range(ports["min-worker-port"], ports["max-worker-port"] + 1)
        assert len(workers) >= 500  # room for every worker a raylet starts here
        taken += [*workers, *(p for f, p in ports.items() if not f.endswith("worker-port"))]
    served = {gpu_main.HEAD_PORT, 8265, 8000, *gpu_main.METRICS_PORTS.values()}
    assert not (nixl | served) & set(taken), sorted((nixl | served) & set(taken))
    assert len(taken) == len(set(taken))  # no two raylets share a port
    assert min(taken) >= 30000 and max(taken) < 32768  # below Linux's default ephemeral range


def test_the_raylets_start_with_those_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_bundle(tmp_path, OVERRIDES)
    started: list[list[str]] = []
    monkeypatch.setattr(gpu_main, "run_detached", lambda cmd, env: started.append(cmd))
    monkeypatch.setattr(gpu_main, "RAYLETS_MARK", tmp_path / "mark")
    gpu_main.start_raylets(tmp_path, "raylets-prefix.json")
    assert (tmp_path / "mark").read_text() == "raylets-prefix.json"  # what the next arm may reuse
    head, *roles = started
    assert "--min-worker-port=30100" in head and "--max-worker-port=30899" in head
    assert not any(a.startswith("--node-manager-port") for a in head)  # the head's daemons: Ray's defaults
    for n, (role, cmd) in enumerate(zip(ROLES, roles), start=1):
        for flag, port in gpu_main.raylet_ports(n).items():
            assert f"--{flag}={port}" in cmd, (role, flag)
        (resources,) = [json.loads(a.split("=", 1)[1]) for a in cmd if a.startswith("--resources=")]
        assert resources[role_resource(role)] == 2


def fake_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mark: str | None
) -> tuple[Path, Path, list[Any], dict[str, Any]]:
    """gpu_main with its cluster faked: a running dashboard whose raylets came from `mark` (None: from
    no run of this script), Serve answering RUNNING, the loads recorded."""
    bundle, out = tmp_path / "bundle", tmp_path / "out"
    write_bundle(bundle, OVERRIDES)
    out.mkdir()
    if mark is not None:
        (tmp_path / "mark").write_text(mark)
    monkeypatch.setattr(gpu_main, "RAYLETS_MARK", tmp_path / "mark")
    calls: list[Any] = []
    apps = {"applications": {"llm": {"status": "RUNNING"}}}

    def http(method: str, url: str, *a: Any, **k: Any) -> tuple[int, str]:
        if method == "DELETE":
            calls.append(("delete", url))
            apps["applications"] = {}
        return 200, json.dumps(apps if url.endswith("/api/serve/applications/") else {})

    def deploy(config: dict[str, Any], timeout_s: float, put: bool = True) -> dict[str, Any]:
        assert 0 < timeout_s <= gpu_main.START_TIMEOUT_S
        calls.append(("deploy" if put else "wait", config))
        return {"applications": {"llm": {"status": "RUNNING"}}}

    monkeypatch.setattr(gpu_main, "http", http)
    stopped = types.SimpleNamespace(returncode=0, stdout="... Stopped all 13 Ray processes.\n")
    monkeypatch.setattr(gpu_main.subprocess, "run", lambda cmd, **k: calls.append(("run", cmd[-2:])) or stopped)
    monkeypatch.setattr(gpu_main.gpu_installed, "versions", lambda: {"ray": "2.58.0"})
    monkeypatch.setattr(gpu_main, "build_tokenizer", lambda b: calls.append(("tokenizer", b)))
    monkeypatch.setattr(gpu_main, "start_raylets", lambda b, name: calls.append(("raylets", name)) or {})
    monkeypatch.setattr(gpu_main, "deploy", deploy)
    monkeypatch.setattr(gpu_main, "scrape", lambda: {"prefill": text(qa=10, ha=5)})
    monkeypatch.setattr(gpu_main.time, "sleep", lambda s: None)
    monkeypatch.setattr(gpu_load, "streamed_completion", lambda model, prompt, n=32: {"status": 200})
    loads: dict[str, Any] = {}

    def prefix_loads(model: str, scrape: Any, count: Any, **kw: Any) -> list[dict[str, Any]]:
        loads.update(model=model, count=count("a b c"), **kw)
        return [{"clients": 4}]

    monkeypatch.setattr(gpu_load, "prefix_loads", prefix_loads)
    tokenizers = types.ModuleType("tokenizers")
    encoded = types.SimpleNamespace(ids=[1, 2, 3, 4])
    tokenizers.Tokenizer = types.SimpleNamespace(  # type: ignore[attr-defined]
        from_file=lambda path: types.SimpleNamespace(encode=lambda t: encoded)
    )
    monkeypatch.setitem(sys.modules, "tokenizers", tokenizers)
    return bundle, out, calls, loads


def test_a_prefix_phase_runs_on_fresh_prefix_raylets_and_writes_its_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """phase_prefix's order on raylets another phase started: those stopped, the prefix raylets
    started, the arm's serve config deployed, the loads run with the run's tokenizer, the timings kept."""
    bundle, out, calls, loads = fake_cluster(tmp_path, monkeypatch, mark="raylets.json")
    got = gpu_main.phase_prefix(bundle, out, "mix-prefix")
    assert [c[0] for c in calls] == ["run", "tokenizer", "raylets", "deploy"]
    assert calls[0][1] == ["stop", "--force"] and calls[2][1] == "raylets-prefix.json"
    assert calls[3][1] == INPUTS["serve_prefix"]["prefix"]
    assert got["app_status"] == "RUNNING" and got["loads"] == [{"clients": 4}]
    assert got["raylets"] == "started (raylets-prefix.json)"
    assert got["routers"]["decode"]["request_router_class"] == serve_routing.PREFIX_ROUTER_CLASS
    assert loads["count"] == 4 and loads["model"] == "Qwen/Qwen2.5-7B-Instruct"  # the tokenizer's count
    assert loads["deadline"] > time.monotonic()  # the phase's own budget, from its start
    assert (out / "metrics-mix-prefix.prom").read_text().startswith("# node prefill\n")
    assert set(got["timings"]) == {"raylets_s", "deploy_s", "loads_s", "phase_s"}


def test_the_second_prefix_arm_reuses_the_first_arms_raylets_with_serve_cleared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Raylets started from raylets-prefix.json are kept: Serve is shut down (its replicas' GPU memory
    freed) and the arm deployed on them, no `ray stop`, no new `ray start`."""
    bundle, out, calls, _ = fake_cluster(tmp_path, monkeypatch, mark="raylets-prefix.json")
    got = gpu_main.phase_prefix(bundle, out, "mix-prefix-pd")
    assert [c[0] for c in calls] == ["delete", "deploy"]
    assert calls[0][1].endswith("/api/serve/applications/")
    assert calls[1][1] == INPUTS["serve_prefix"]["prefix-pd"]
    assert got["raylets"] == "reused (raylets-prefix.json)" and got["app_status"] == "RUNNING"


def test_a_resumed_prefix_arm_waits_for_the_application_left_starting_without_clearing_or_deploying(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REALRUN_RESUME: a start that outlasted one command goes on in the next; the raylets and the
    application on them are kept (no DELETE, no PUT), the phase waits for it and then runs its loads."""
    bundle, out, calls, _ = fake_cluster(tmp_path, monkeypatch, mark="raylets-prefix.json")
    monkeypatch.setattr(gpu_main, "RESUME", True)
    got = gpu_main.phase_prefix(bundle, out, "mix-prefix")
    assert [c[0] for c in calls] == ["wait"] and calls[0][1] == INPUTS["serve_prefix"]["prefix"]
    assert got["raylets"] == "reused (raylets-prefix.json), its application kept" and got["resumed"] is True
    assert got["app_status"] == "RUNNING" and got["loads"] == [{"clients": 4}]


def test_a_deploy_waits_no_longer_than_the_phase_has_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """A start still going at the phase's deadline is recorded as such (the next command resumes it),
    not waited past the machine's command limit."""
    seen: list[float] = []
    monkeypatch.setattr(
        gpu_main,
        "deploy",
        lambda config, timeout_s, put=True: (
            seen.append(timeout_s) or {"applications": {"llm": {"status": "DEPLOYING"}}}
        ),
    )
    clock = gpu_main.Clock()
    clock.deadline = time.monotonic() + 100
    evidence: dict[str, Any] = {}
    assert not gpu_main.deployed(evidence, {}, clock)
    assert 90 < seen[0] <= 100 and evidence["app_status"] == "DEPLOYING" and evidence["resumed"] is False
    clock.deadline = time.monotonic() + 10_000
    gpu_main.deployed(evidence, {}, clock)
    assert seen[1] == gpu_main.START_TIMEOUT_S


def test_the_tcpstore_window_is_held_while_the_engines_start_and_freed_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the deploy waits, no port of the window can be bound (so vLLM's scan finds it full and
    takes a kernel-chosen port); after it, every one can."""
    window = free_port_window(4)  # away from the real window, which only root may bind
    monkeypatch.setattr(gpu_main, "TCPSTORE_WINDOW", window)

    during: list[bool] = []
    monkeypatch.setattr(
        gpu_main,
        "deploy",
        lambda config, timeout_s, put=True: (
            during.extend(bindable(p) for p in window) or {"applications": {"llm": {"status": "RUNNING"}}}
        ),
    )
    evidence: dict[str, Any] = {}
    assert gpu_main.deployed(evidence, {}, gpu_main.Clock())
    assert during == [False] * 4 and evidence["tcpstore_ports_held"] == 4
    assert all(bindable(p) for p in window)


def test_serve_that_does_not_shut_down_ends_the_phase_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_main, "http", lambda method, url, *a, **k: (200, '{"applications": {"llm": {}}}'))
    clock = iter(range(0, 10_000, 60))
    monkeypatch.setattr(gpu_main.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(gpu_main.time, "sleep", lambda s: None)
    with pytest.raises(SystemExit, match="still there after 180 s"):
        gpu_main.clear_apps()


# --- the saved evidence, read back for docs/real-run.md ---------------------------------------------


def level(clients: int, p50: float, prefill: float | None, decode: float, pulls: float) -> dict[str, Any]:
    summary = {"requests": 96, "completed": 96, "p50_ttft_ms": p50, "p90_ttft_ms": 2 * p50, "p50_itl_ms": 4.5}
    summary["output_tok_s"] = 321.0
    return {
        "clients": clients,
        "summary": summary,
        "prefix_cache": {"prefill": {"hit_rate": prefill}, "decode": {"hit_rate": decode}},
        "kv_pulls": {"decode": pulls, "prefill": 0},
        "kv_bytes": {"decode": pulls * 2.5e7, "prefill": 0},
    }


def test_the_page_table_has_a_row_per_arm_and_load_from_the_saved_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "2026-12-05T1000Z"
    run.mkdir()
    (run / "run.json").write_text("{}")
    plain = {"loads": [level(4, 900.0, 0.3, 0.25, 96), {"clients": 16, "skipped": "the phase's time budget"}]}
    routed = {"loads": [level(4, 400.0, 0.7, 0.72, 96), level(16, 700.0, None, 0.7, 96)]}
    (run / "evidence-mix-prefix-pd.json").write_text(json.dumps(plain))
    (run / "evidence-mix-prefix.json").write_text(json.dumps(routed))
    rows = routing_evidence.prefix_rows(run)
    assert [(r["arm"], r["clients"]) for r in rows] == [
        ("P/D, Serve's default router", 4),
        ("P/D, prefix-aware routing", 4),
        ("P/D, prefix-aware routing", 16),  # the skipped load has no row
    ]
    assert rows[1]["prefill_hit_rate"] == 0.7 and rows[0]["decode_kv_pulls"] == 96
    table = routing_evidence.prefix_results_section(run)
    assert "| P/D, prefix-aware routing | 4 | 96 | 400 | 800 | 4.50 | 321 | 70% | 72% | 75% | 96 | 2.40 |" in table
    assert "| P/D, Serve's default router | 4 | 96 | 900 | 1,800 | 4.50 | 321 | 30% | 25% | 43% | 96 | 2.40 |" in table
    assert "| n/a |" in table  # a role with nothing looked up has no rate
    assert table.endswith("- P/D, Serve's default router, 16 clients: not sent (the phase's time budget).")
    monkeypatch.setattr(evidence, "DATA", tmp_path)
    assert routing_evidence.prefix_run() == run
    with pytest.raises(FileNotFoundError):  # the P/D phase's replay reads only runs that have it
        evidence.latest()


def test_an_arm_that_never_ran_is_a_line_with_its_state_and_the_first_saved_reason(tmp_path: Path) -> None:
    run = tmp_path / "2026-12-05T1000Z"
    run.mkdir()
    failed = {"app_status": "DEPLOY_FAILED", "timings": {"deploy_s": 207.7}}
    (run / "evidence-mix-prefix-pd.json").write_text(json.dumps(failed))
    (run / "failure-mix-prefix-pd.txt").write_text("ValueError: no bundle fits\nmore\n")
    table = routing_evidence.prefix_results_section(run)
    assert "- `mix-prefix-pd`: DEPLOY_FAILED after 208 s: ValueError: no bundle fits" in table
    (run / "failure-mix-prefix-pd.txt").unlink()
    assert "DEPLOY_FAILED after 208 s: no failure lines saved" in routing_evidence.prefix_results_section(run)
    assert routing_evidence.prefix_rows(run) == []


def test_the_saved_prefix_arm_failed_on_a_whole_gpu_asked_inside_its_quarter_gpu_bundle() -> None:
    run = evidence.DATA / "2026-12-06T0535Z"
    found = json.loads((run / "evidence-mix-prefix-pd.json").read_text())
    assert found["app_status"] == "DEPLOY_FAILED" and "loads" not in found
    why = (run / "failure-mix-prefix-pd.txt").read_text().splitlines()[0]
    assert "resource request {'CPU': 0, 'GPU': 1.0} cannot fit" in why and "'GPU': 0.25" in why
    # what the next run deploys: the replica's own environment carries the quarter
    for role in ROLES:
        env = app("prefix-pd")["args"][f"{role}_config"]["runtime_env"]["env_vars"]
        assert env == {"VLLM_RAY_PER_WORKER_GPUS": "0.25"}


def test_a_load_that_stalled_shows_what_it_answered_of_what_it_sent(tmp_path: Path) -> None:
    run = tmp_path / "2026-12-05T1000Z"
    run.mkdir()
    stalled = level(4, 30_000.0, 0.0, 0.0, 2)
    stalled["summary"].update(completed=2, stalled=True)
    routed = {"loads": [stalled, {"clients": 8, "skipped": gpu_load.STALLED_BEFORE}]}
    (run / "evidence-mix-prefix.json").write_text(json.dumps(routed))
    table = routing_evidence.prefix_results_section(run)
    assert "| P/D, prefix-aware routing | 4 | 2 of 96, stalled | 30,000 |" in table
    assert "- P/D, prefix-aware routing, 8 clients: not sent (a load before it stalled)." in table


def test_the_saved_prefix_pair_default_router_answered_everything_and_the_prefix_router_stalled() -> None:
    """The H100 run of 2026-12-06: Serve's default router answered all 96 requests of each load at the
    model's hit rate (within 10 points); PrefixCacheAffinityRouter answered 2 of 96 and then nothing, and
    the requests it held went on only once their clients gave up (the ingress log)."""
    run = evidence.DATA / "2026-12-06T0747Z"
    rows = routing_evidence.prefix_rows(run)
    plain = [r for r in rows if r["arm"] == "P/D, Serve's default router"]
    assert [r["clients"] for r in plain] == list(gpu_load.PREFIX_CONCURRENCIES)
    assert all(r["completed"] == r["sent"] == 96 and not r["stalled"] for r in plain)
    assert all(abs(r["prefill_hit_rate"] - r["model_hit_rate"]) < 0.10 for r in plain)
    (routed,) = [r for r in rows if r["arm"] == "P/D, prefix-aware routing (Ray's PrefixCacheAffinityRouter as is)"]
    assert routed["stalled"] and routed["completed"] < 4
    # the arm ran Ray's class as is, on the image's Ray: why the project renders its own
    saved = json.loads((run / "evidence-mix-prefix.json").read_text())
    assert saved["versions"]["ray"] == RAY_VERSION
    assert saved["routers"]["prefill"]["request_router_class"] == serve_routing.RAY_PREFIX_ROUTER_CLASS
    log = (run / "ingress-mix-prefix.log").read_text()
    assert log.count("CANCELLED 60") == 3
    sequential = json.loads((run / "prefix-router-sequential.json").read_text())["c1"]["summary"]
    assert sequential["stalled"] and sequential["completed"] < sequential["requests"]


def test_the_saved_pair_on_one_machine_the_projects_router_answered_everything_sooner_at_the_models_hit_rate() -> None:
    """The H100 run of 2026-12-06 09:35 (both arms on one machine and the same raylets): the project's
    router answered all 96 requests of every load at the model's hit rate, and beat Serve's default
    router on median TTFT and throughput at every client count: why prefix routing is on by default."""
    run = evidence.DATA / "2026-12-06T0935Z"
    rows = routing_evidence.prefix_rows(run)
    routed = {r["clients"]: r for r in rows if r["arm"] == "P/D, prefix-aware routing"}
    plain = {r["clients"]: r for r in rows if r["arm"] == "P/D, Serve's default router"}
    assert sorted(routed) == sorted(plain) == list(gpu_load.PREFIX_CONCURRENCIES)
    assert all(r["completed"] == r["sent"] == 96 and not r["stalled"] for r in rows)
    saved = json.loads((run / "evidence-mix-prefix.json").read_text())
    assert saved["versions"]["ray"] == RAY_VERSION and saved["probe_timeouts"] == {}
    assert {c["request_router_class"] for c in saved["routers"].values()} == {serve_routing.PREFIX_ROUTER_CLASS}
    for clients, r in routed.items():
        assert abs(r["prefill_hit_rate"] - r["model_hit_rate"]) < 0.05, clients
        assert abs(plain[clients]["prefill_hit_rate"] - plain[clients]["model_hit_rate"]) < 0.10, clients
        assert r["prefill_hit_rate"] > plain[clients]["prefill_hit_rate"] + 0.2, clients
        assert r["p50_ttft_ms"] < plain[clients]["p50_ttft_ms"] / 2, clients
        assert r["output_tok_s"] > 1.5 * plain[clients]["output_tok_s"], clients
        # decode affinity: NIXL pulls only the blocks the decode replica lacks
        assert r["decode_kv_bytes"] < plain[clients]["decode_kv_bytes"], clients


def test_the_first_saved_h100_attempt_lost_replica_starts_to_port_100_and_then_to_memory() -> None:
    """Why the TCPStore window is held and the prefix arms size vLLM's start-up profile."""
    run = evidence.DATA / "2026-12-06T0747Z"
    found = json.loads((run / "evidence-mix-prefix-pd-port-race.json").read_text())
    assert found["app_status"] == "DEPLOYING" and "tcpstore_ports_held" not in found
    why = (run / "failure-mix-prefix-pd-port-race.txt").read_text()
    ports = {int(p) for p in re.findall(r"port: (\d+), useIpv6: false, code: -98, name: EADDRINUSE", why)}
    assert ports and ports <= set(gpu_main.TCPSTORE_WINDOW)
    assert "is less than desired GPU memory utilization" in why
    for name in ("evidence-mix-prefix-pd.json", "evidence-mix-prefix.json"):
        assert json.loads((run / name).read_text())["tcpstore_ports_held"] == len(gpu_main.TCPSTORE_WINDOW)


def test_the_page_carries_the_newest_saved_prefix_arms_and_says_when_none_ran() -> None:
    assert "Not run yet" in routing_evidence.prefix_results_section(None)
    run = routing_evidence.prefix_run()
    assert run is not None and routing_evidence.prefix_results_section(run) in real_run_doc.DOC.read_text()
