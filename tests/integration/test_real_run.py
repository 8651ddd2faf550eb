"""The real run on one GPU (llm_pd_eks_sizing/realrun, docs/real-run.md).

Two halves. The inputs: what the GPU machine runs is what the program renders for the dev stack, changed
only where `overrides.yaml` says, and its raylets are the ones KubeRay's operator starts for the worker
groups (judged by the transcription of KubeRay's `ray start`, tests/kuberay_start_params.py). The
evidence: what the saved run showed (llm_pd_eks_sizing/realrun/data/) is replayed against what the
project scrapes, alerts on and verifies, so a change that breaks what ran fails here, offline.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import ROOT, changed_paths
from kuberay_start_params import raylet_resources, worker_ray_start

from llm_pd_eks import metrics as m
from llm_pd_eks.models import MODELS
from llm_pd_eks.serving_names import ROLES
from llm_pd_eks_sizing.realrun import doc as real_run_doc
from llm_pd_eks_sizing.realrun import evidence
from llm_pd_eks_sizing.realrun.render import (
    MODEL_CONFIGS,
    OVERRIDE_SECTIONS,
    ROLE_SLOT,
    get_path,
    kuberay_raylet,
    load_overrides,
    rendered_spec,
    run_inputs,
)

OVERRIDES = load_overrides()
# A deviation is a cost: each one is a way the run is not the deployment. Keep the list short.
MOST_OVERRIDES = 12


def rendered_serve() -> dict[str, Any]:
    return yaml.safe_load(rendered_spec(OVERRIDES)["serveConfigV2"])


def test_the_override_file_stays_short_and_every_entry_says_why() -> None:
    entries = [item for section in OVERRIDE_SECTIONS for item in OVERRIDES[section]]
    assert len(entries) <= MOST_OVERRIDES, f"{len(entries)} deviations from the rendered config"
    assert all(len(item["reason"].split()) >= 5 for item in entries)
    assert len({(s, i["path"]) for s in OVERRIDE_SECTIONS for i in OVERRIDES[s]}) == len(entries)


def test_the_run_serves_what_the_program_renders_but_for_the_overrides() -> None:
    rendered, run = rendered_serve(), run_inputs(OVERRIDES)["serve_pd"]
    expected = {item["path"] for item in OVERRIDES["serve_config"]}
    for role in ROLES:
        base = f"applications.0.args.{role}_config."
        expected |= {base + item["path"] for item in OVERRIDES["llm_config"]}
    as_lists = json.loads(json.dumps(rendered)), json.loads(json.dumps(run))
    changed = changed_paths(*(_index_lists(t) for t in as_lists))
    # kv_connector_extra_config.backends is a list: its one element is what changes
    assert {p.removesuffix(".0") for p in changed} == expected


def _index_lists(tree: Any) -> Any:
    if isinstance(tree, list):
        return {str(i): _index_lists(v) for i, v in enumerate(tree)}
    if isinstance(tree, dict):
        return {k: _index_lists(v) for k, v in tree.items()}
    return tree


def test_every_llm_override_changes_what_was_rendered() -> None:
    decode = rendered_serve()["applications"][0]["args"]["decode_config"]
    for item in OVERRIDES["llm_config"]:
        try:
            before = get_path(copy.deepcopy(decode), item["path"])
        except KeyError:
            before = None
        assert before != item["value"], item["path"]


def test_the_run_keeps_the_rendered_kv_connector_and_roles() -> None:
    run = run_inputs(OVERRIDES)["serve_pd"]["applications"][0]
    assert run["import_path"] == "ray.serve.llm:build_pd_openai_app"
    for role in ROLES:
        config = run["args"][f"{role}_config"]
        kv = config["engine_kwargs"]["kv_transfer_config"]
        assert (kv["kv_connector"], kv["kv_role"]) == ("NixlConnector", "kv_both")
        assert config["engine_kwargs"]["tensor_parallel_size"] == 1
        assert config["placement_group_config"]["bundle_per_worker"]["GPU"] == 1


def test_the_aggregated_baseline_is_the_decode_config_without_the_connector() -> None:
    inputs = run_inputs(OVERRIDES)
    pd = inputs["serve_pd"]["applications"][0]["args"]["decode_config"]
    (agg,) = inputs["serve_agg"]["applications"][0]["args"]["llm_configs"]
    assert changed_paths(pd, agg) == {
        "engine_kwargs.kv_transfer_config.kv_connector",
        "engine_kwargs.kv_transfer_config.kv_role",
        "engine_kwargs.kv_transfer_config.kv_connector_extra_config.backends",
        "engine_kwargs.kv_transfer_config.kv_load_failure_policy",
        "engine_kwargs.gpu_memory_utilization",
    }
    assert agg["engine_kwargs"]["gpu_memory_utilization"] == pytest.approx(
        len(ROLES) * pd["engine_kwargs"]["gpu_memory_utilization"]
    )


def run_serve_configs() -> dict[str, dict[str, Any]]:
    """Every serve config the run deploys, by arm (the prefix arms are one input of two configs)."""
    inputs = run_inputs(OVERRIDES)
    arms = {name: inputs[name] for name in ("serve_pd", "serve_agg", "serve_cond")}
    arms.update({f"serve_{arm}": config for arm, config in inputs["serve_prefix"].items()})
    return arms


@pytest.mark.parametrize("arm", sorted(run_serve_configs()))
def test_every_engine_setting_the_run_passes_is_one_the_released_vllm_accepts(arm: str) -> None:
    """The overrides add engine settings (dummy weights, a memory share, eager mode): each key is
    judged by vLLM 0.26.0's own dataclasses (tests/data/vllm/, read from the release wheel), where the
    config refuses an unknown one only when the engine starts on the GPU."""
    from llm_pd_eks.versions import DLC_VLLM_VERSION

    vllm = json.loads((ROOT / "tests" / "data" / "vllm" / f"engine-args-{DLC_VLLM_VERSION}.json").read_text())
    args = run_serve_configs()[arm]["applications"][0]["args"]
    configs = args["llm_configs"] if "llm_configs" in args else [args[f"{role}_config"] for role in ROLES]
    for config in configs:
        engine = config["engine_kwargs"]
        assert set(engine) <= set(vllm["engine_args_fields"])
        assert set(engine.get("kv_transfer_config", {})) <= set(vllm["kv_transfer_config_fields"])
        assert set(engine.get("compilation_config", {})) <= set(vllm["compilation_config_fields"])
    if arm.startswith("serve_prefix"):  # the arms that run eager: the key is the release's
        assert all(c["engine_kwargs"]["enforce_eager"] is True for c in configs)


def test_the_decode_only_arm_is_the_pd_app_with_only_its_threshold_added(tmp_path: Path) -> None:
    from llm_pd_eks import serve_routing
    from llm_pd_eks_sizing.realrun import gpu_main
    from llm_pd_eks_sizing.realrun.render import decode_only_threshold, write_bundle

    inputs = run_inputs(OVERRIDES)
    pd, cond = inputs["serve_pd"], inputs["serve_cond"]
    assert cond["applications"][0]["import_path"] == serve_routing.CONDITIONAL_IMPORT_PATH
    pd_app, cond_app = pd["applications"][0], cond["applications"][0]
    assert {k for k in pd_app if pd_app[k] != cond_app[k]} == {"import_path", "args"}
    assert cond_app["args"]["prefill_config"] == pd_app["args"]["prefill_config"]
    decode = cond_app["args"]["decode_config"]
    assert decode.pop("experimental_configs") == {serve_routing.THRESHOLD_KEY: decode_only_threshold(OVERRIDES)}
    assert decode == pd_app["args"]["decode_config"]
    assert gpu_main.THRESHOLD_KEY == serve_routing.THRESHOLD_KEY  # the runner's copy stays the program's
    write_bundle(tmp_path, OVERRIDES)
    modules = {path.name: path.read_text() for path in (tmp_path / "runtime").iterdir()}
    assert modules == serve_routing.runtime_configmap_data()  # as the ConfigMap puts them in the pods
    assert modules[serve_routing.RUNTIME_MODULE + ".py"] == serve_routing.runtime_source()


def test_the_raylets_are_the_ones_kuberay_starts_for_the_worker_groups() -> None:
    groups = {g["groupName"]: g for g in rendered_spec(OVERRIDES)["rayClusterConfig"]["workerGroupSpecs"]}
    for role in ROLES:
        ours = kuberay_raylet(groups[role])
        kuberay = raylet_resources(worker_ray_start(groups[role]))
        assert {"CPU": ours["num-cpus"], "GPU": ours["num-gpus"], "memory": ours["memory"], **ours["resources"]} == (
            kuberay
        )


def test_the_run_raylets_differ_from_kuberays_only_where_the_overrides_say() -> None:
    groups = {g["groupName"]: g for g in rendered_spec(OVERRIDES)["rayClusterConfig"]["workerGroupSpecs"]}
    run = run_inputs(OVERRIDES)["raylets"]
    from llm_pd_eks.ray_resources import role_resource

    for role in ROLES:
        kuberay = kuberay_raylet(groups[role])
        kuberay.pop("memory")
        expected = {i["path"].replace(ROLE_SLOT, role_resource(role)) for i in OVERRIDES["raylet"]}
        assert changed_paths(kuberay, run[role]["start"]) == expected


def test_the_vendored_model_config_is_the_model_table() -> None:
    model_id = rendered_serve()["applications"][0]["args"]["decode_config"]["model_loading_config"]["model_id"]
    config = json.loads((MODEL_CONFIGS / model_id / "config.json").read_text())
    spec = MODELS[model_id]
    assert config["num_hidden_layers"] == spec.layers
    assert config["num_key_value_heads"] == spec.kv_heads
    assert config["hidden_size"] // config["num_attention_heads"] == spec.head_dim
    assert config["num_attention_heads"] == spec.attention_heads


@pytest.mark.parametrize(
    "name", ["gpu_main.py", "gpu_load.py", "gpu_mix.py", "gpu_model.py", "gpu_gate.py", "gpu_installed.py"]
)
def test_the_gpu_side_runner_needs_nothing_of_this_project(name: str) -> None:
    """gpu_main (and the modules beside it) run under the GPU machine's Python with only the release's wheels."""
    import ast

    path = ROOT / "llm_pd_eks_sizing" / "realrun" / name
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not {"llm_pd_eks", "llm_pd_eks_tools", "llm_pd_eks_sizing"} & imported
    # copied with it: the folder is what the machine runs (gpu_gate loads the verify canary from its file)
    siblings = {"gpu_load", "gpu_mix", "gpu_model", "gpu_gate", "gpu_installed"}
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "tokenizers"} | siblings  # tokenizers: a wheel

    proc = subprocess.run(
        ["python3", "-c", "import ast,sys; ast.parse(open(sys.argv[1]).read())", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_gpu_side_runner_loads_only_the_standard_library_part_of_the_tools() -> None:
    """gpu_main runs through the tools' runner (llm_pd_eks_tools/core), which needs nothing but the
    standard library: no package of the tools' or the program's environment reaches the GPU machine."""
    code = (
        "import sys; before = set(sys.modules); import llm_pd_eks_tools.core.cli; "
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] not in sys.stdlib_module_names))"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); {code}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert {m.split(".")[0] for m in eval(proc.stdout)} == {"llm_pd_eks_tools"}, proc.stdout


def test_the_runner_imports_its_modules_beside_it_with_no_package() -> None:
    """As `python3 gpu_main.py` runs it on the GPU machine: a fresh interpreter, the file's own folder,
    and one gpu_load for all three (the model's folder named once)."""
    path = ROOT / "llm_pd_eks_sizing" / "realrun" / "gpu_main.py"
    code = (
        "import importlib.util, sys; spec = importlib.util.spec_from_file_location('gpu_main', sys.argv[1]); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
        "print(m.gpu_load.__file__, m.gpu_mix.__file__, m.gpu_model.__file__, m.bench is m.gpu_load.bench, "
        "m.gpu_mix.gpu_load is m.gpu_model.gpu_load is m.gpu_load, m.gpu_model.MODEL_DIR == m.MODEL_DIR)"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    files = [str(path.parent / f"{name}.py") for name in ("gpu_load", "gpu_mix", "gpu_model")]
    assert proc.stdout.split() == [*files, "True", "True", "True"]


# --- the evidence: what the saved run showed, replayed ----------------------------------------------

RUN = evidence.latest()
PD = evidence.load(RUN, "evidence-pd.json")
RECORD = evidence.load(RUN, "run.json")
SCRAPE = evidence.scrape_text(RUN, "metrics-pd")
AFTER_BENCH = evidence.scrape_text(RUN, "metrics-pd-after-bench")
# Counters OpenTelemetry exports only once incremented (Ray's recorder registers the instrument
# lazily): the run had no failed transfer, failed notification or expired KV lease to count.
NOT_YET_INCREMENTED = {m.NIXL_FAILED_TRANSFERS, m.NIXL_FAILED_NOTIFICATIONS, m.NIXL_KV_EXPIRED}
# Exported only by the decode-only path's server (serving.routing.decodeOnlyBelowTokens), off in the run.
NOT_IN_THE_RUN = {m.PD_PATH_REQUESTS}


def scraped_families(text: str) -> dict[str, str]:
    return evidence.metric_types(text)


def project_ray_names() -> set[str]:
    """Every Ray-exported name metrics.py holds (what alerts, dashboards and verify query)."""
    return {
        v
        for k, v in vars(m).items()
        if k.isupper() and isinstance(v, str) and v.startswith(m.RAY_PREFIX) and v != m.RAY_PREFIX
    }


def test_the_run_record_names_the_released_images_ray_and_vllm() -> None:
    # aws/deep-learning-containers docs/ray-llm/changelog/index.md: "Ray LLM v1.0 — 2026-08-31 ...
    # Ray 2.58.0 and vLLM 0.26.0"
    versions = RECORD["versions"]
    assert (versions["ray"], versions["vllm"]) == ("2.58.0", "0.26.0")
    assert versions["nixl"] == versions["nixl-cu13"]
    assert "H200" in versions["gpu"]
    assert RECORD["versions"] == PD["versions"]


def test_the_run_came_from_committed_code() -> None:
    commit = RECORD["commit"]
    proc = subprocess.run(
        ["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"{commit} is not in this checkout's history: {proc.stderr}"


def test_serve_ran_the_pd_app_with_both_roles_and_the_ingress() -> None:
    assert PD["app_status"] == "RUNNING"
    deployments = PD["serve_status"]["applications"]["llm"]["deployments"]
    assert {d.split(":")[0] for d in deployments} == {"Prefill", "Decode", "OpenAiIngress"}
    assert all(d["status"] == "HEALTHY" for d in deployments.values())


def test_chat_and_streamed_completions_answered_through_pd() -> None:
    assert PD["models"]["ids"] == [RECORD["model_id"]]
    for probe in ("chat_verify", "chat_short"):
        assert PD[probe]["status"] == 200 and PD[probe]["content_chars"] > 0, probe
    # verify's own request (a ~3,000-word prompt) was served whole
    assert PD["chat_verify"]["usage"]["prompt_tokens"] > 3000
    assert PD["stream"]["done"] and PD["stream"]["chunks"] > 1


def nixl_counts(snapshot: dict[str, dict[str, float]], node: str) -> float:
    return sum(v for k, v in snapshot[node].items() if k.startswith(m.NIXL_BYTES + "_count"))


def test_the_aggregated_arm_ran_the_same_loads_on_the_same_software() -> None:
    agg = evidence.load(RUN, "evidence-agg.json")
    assert agg["app_status"] == "RUNNING"
    deployments = agg["serve_status"]["applications"]["llm"]["deployments"]
    assert {d.split(":")[0] for d in deployments} == {"LLMServer", "OpenAiIngress"}  # one engine, no P/D
    assert agg["versions"] == RECORD["versions"]  # same wheels, same GPU and driver as the P/D arm
    loads = {(r["clients"], r["prompts"], r["input_len"], r["output_len"]) for r in PD["bench"]}
    assert {(r["clients"], r["prompts"], r["input_len"], r["output_len"]) for r in agg["bench"]} == loads
    assert all(r["rc"] == 0 and r["completed"] == r["prompts"] for r in agg["bench"] + PD["bench"])


def test_the_table_compares_each_load_with_its_own_aggregated_row() -> None:
    agg = evidence.load(RUN, "evidence-agg.json")
    rows = evidence.bench_table(PD, agg)
    by = {(r["arm"], r["clients"]): r for r in rows}
    for r in agg["bench"]:
        assert by[("aggregated", r["clients"])]["median_ttft_ms"] == r["median_ttft_ms"]
    line = real_run_doc.comparison_line(PD["bench"], {r["clients"]: r for r in agg["bench"]})
    first = PD["bench"][0]["median_ttft_ms"] / agg["bench"][0]["median_ttft_ms"]
    assert f"{first:.1f}x" in line and "not the deployment's trade" in line


def test_an_earlier_run_it_repeats_is_saved_beside_it() -> None:
    earlier = real_run_doc.repeat_run(RUN)
    assert earlier is not None and earlier != RUN
    assert evidence.load(earlier, "run.json")["versions"]["vllm"] == RECORD["versions"]["vllm"]


def test_kv_moved_over_nixl_on_the_decode_side_once_per_request() -> None:
    before, after, bench = PD["nixl_before"], PD["nixl_after"], PD["nixl_after_bench"]
    assert nixl_counts(before, "decode") == 0
    # three probe requests (verify's chat, a short chat, a stream): three pulls by decode
    assert nixl_counts(after, "decode") == 3
    assert nixl_counts(bench, "decode") == 3 + sum(row["completed"] for row in PD["bench"])
    # the prefill side moves nothing itself: decode pulls (metrics.py's docstring)
    assert nixl_counts(bench, "prefill") == 0


def test_every_ray_metric_the_project_queries_is_on_the_live_endpoint() -> None:
    live = scraped_families(AFTER_BENCH)
    missing = []
    for name in sorted(project_ray_names() - NOT_YET_INCREMENTED - NOT_IN_THE_RUN):
        family = name.removesuffix("_total") if name.endswith("_total") else name
        if name not in live and family not in live:
            missing.append(name)
    assert not missing, f"queried but not exported by the live app: {missing}"


def test_the_live_types_are_the_ones_the_project_assumes() -> None:
    live = scraped_families(AFTER_BENCH)
    for vllm_name, kind in m.VLLM_METRICS.items():
        name = m.scraped_name(vllm_name)
        if name in NOT_YET_INCREMENTED:
            continue
        family = name.removesuffix("_total") if kind == m.COUNTER else name
        assert live.get(name, live.get(family)) == kind, vllm_name


def test_the_counters_not_exported_are_counters_the_run_never_incremented() -> None:
    assert all(m.VLLM_METRICS[v] == m.COUNTER for v in m.VLLM_METRICS if m.scraped_name(v) in NOT_YET_INCREMENTED)
    names = {s.name for s in evidence.samples(AFTER_BENCH)}
    assert not NOT_YET_INCREMENTED & names


def test_the_live_bucket_bounds_are_the_ones_the_slos_use() -> None:
    for vllm_name, bounds in m.BUCKETS.items():
        les = {
            s.labels["le"]
            for s in evidence.samples(SCRAPE)
            if s.name == m.scraped_name(vllm_name) + "_bucket" and s.labels["le"] != "+Inf"
        }
        assert les == {m.le(b) for b in bounds}, vllm_name


def test_verify_reads_the_backend_from_real_nixl_log_lines() -> None:
    from llm_pd_eks_tools.ops.verify.checks import NIXL_BACKEND_LINE

    found = {b for line in PD["nixl_log_lines"] for b in NIXL_BACKEND_LINE.findall(line)}
    assert found == {"UCX"}  # the run's deviation; on EFA nodes verify requires LIBFABRIC


def test_the_serve_metrics_carry_the_labels_the_dashboards_group_by() -> None:
    target = [s for s in evidence.samples(SCRAPE) if s.name == m.SERVE_TARGET_REPLICAS]
    assert {s.labels["deployment"].split(":")[0] for s in target} == {"Prefill", "Decode", "OpenAiIngress"}
    assert all(s.labels["application"] == "llm" for s in target)
    ttft = [s for s in evidence.samples(SCRAPE) if s.name == m.TTFT + "_count"]
    assert ttft and all({"ReplicaId", "model_name", "engine"} <= s.labels.keys() for s in ttft)


def test_verifys_kv_queries_see_the_runs_transfers_in_a_real_prometheus(tmp_path: Path) -> None:
    """verify's own PromQL (kv-bytes, kv-failures, kv-throughput) over the live app's NIXL series,
    loaded into Debian's Prometheus with the `phase` label the scrape config adds from the pod."""
    from prom_fixtures import backfill, get_json, prometheus

    from llm_pd_eks_tools.ops.verify import checks

    series: dict[str, list[Any]] = {}
    for s in evidence.samples(AFTER_BENCH):
        if s.name.startswith(m.RAY_PREFIX + "vllm_nixl") and s.node in ROLES:
            series.setdefault(s.name, []).append(({**s.labels, m.PHASE_LABEL: s.node}, lambda _i, v=s.value: v))
    assert series
    data = backfill(tmp_path, series, 5)
    with prometheus(tmp_path, data, {"global": {"scrape_interval": "1h"}, "scrape_configs": []}) as url:

        def query(expr: str) -> float | None:
            reply = get_json(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
            result = reply["data"]["result"]
            return float(result[0]["value"][1]) if result else None

        transfers = query(checks.KV_COUNT)
        moved = query(checks.KV_BYTES)
        assert transfers == nixl_counts(PD["nixl_after_bench"], "decode")
        assert moved is not None and moved / transfers > 2**20  # whole prompts' KV, MiBs per transfer
        assert query(checks.KV_FAILED) is None  # never incremented: verify reads "no series" as 0 failures
        gbps = query(checks.KV_GBPS)
        assert gbps is not None and 0 < gbps < 100


def test_the_real_run_page_shows_the_saved_run() -> None:
    """docs/real-run.md's overrides and results are generated (`python -m llm_pd_eks_sizing.realrun.doc`)."""
    text = real_run_doc.DOC.read_text()
    assert real_run_doc.rendered_doc(text) == text


def test_the_runner_sends_verifys_own_request() -> None:
    """gpu_main carries its own copy of verify's prompt (it runs without this project): the same text."""
    import importlib.util

    from llm_pd_eks_tools.ops.verify import checks

    path = ROOT / "llm_pd_eks_sizing" / "realrun" / "gpu_main.py"
    spec = importlib.util.spec_from_file_location("gpu_main", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.long_prompt() == checks.long_prompt()
    assert module.NIXL_BACKEND_LINE.pattern == checks.NIXL_BACKEND_LINE.pattern
