"""The real run on one GPU (llm_pd_eks_tools/realrun, docs/real-run.md).

Two halves. The inputs: what the GPU machine runs is what the program renders for the dev stack, changed
only where `overrides.yaml` says, and its raylets are the ones KubeRay's operator starts for the worker
groups (judged by the transcription of KubeRay's `ray start`, tests/kuberay_start_params.py). The
evidence: what the saved run showed (llm_pd_eks_tools/realrun/data/) is replayed against what the
project scrapes, alerts on and verifies, so a change that breaks what ran fails here, offline.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kuberay_start_params import raylet_resources, worker_ray_start

from llm_pd_eks.models import MODELS
from llm_pd_eks.ray_service import ROLES
from llm_pd_eks_tools.realrun.render import (
    MODEL_CONFIGS,
    OVERRIDE_SECTIONS,
    ROLE_SLOT,
    get_path,
    kuberay_raylet,
    load_overrides,
    rendered_spec,
    run_inputs,
)

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = load_overrides()
# A deviation is a cost: each one is a way the run is not the deployment. Keep the list short.
MOST_OVERRIDES = 12


def leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return out or {prefix: {}}
    return {prefix: tree}


def changed_paths(before: Any, after: Any) -> set[str]:
    a, b = leaves(before), leaves(after)
    return {k for k in a.keys() | b.keys() if a.get(k, object()) != b.get(k, object())}


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
        "engine_kwargs.gpu_memory_utilization",
    }
    assert agg["engine_kwargs"]["gpu_memory_utilization"] == pytest.approx(
        len(ROLES) * pd["engine_kwargs"]["gpu_memory_utilization"]
    )


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


def test_the_gpu_side_runner_needs_nothing_of_this_project() -> None:
    """gpu_main runs under the GPU machine's Python with only the release's wheels."""
    source = (ROOT / "llm_pd_eks_tools" / "realrun" / "gpu_main.py").read_text()
    assert "llm_pd_eks" not in source.replace("llm_pd_eks_tools/realrun", "")
    proc = subprocess.run(
        [
            "python3",
            "-c",
            "import ast,sys; ast.parse(open(sys.argv[1]).read())",
            str(ROOT / "llm_pd_eks_tools/realrun/gpu_main.py"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
