"""tools/rollout.py: how a RayService change rolls out, judged on the specs the program renders.

Old and new specs are rendered by the program's own `ray_service_spec` from stack configs that
differ in one setting, so each case is a change a user could make.
"""

from __future__ import annotations

import copy
import re

import pytest
from helpers import RAY_SERVICE

from components.catalog import GPU_INSTANCE_TYPES
from components.config import ServingConfig
from components.ray_service import ray_service_spec, replace_on_changes
from tools.preview.diff import Diff, render
from tools.preview.mockrun import stack_config
from tools.rollout import CREATE, DELETE, IN_PLACE, NEW_CLUSTER, NO_CHANGE, classify, classify_resources


def staging(**serving_changes) -> dict:
    cfg = stack_config("staging")
    assert cfg.serving is not None
    serving = ServingConfig.model_validate({**cfg.serving.model_dump(by_alias=True), **serving_changes})
    return ray_service_spec(serving, GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type], "hf-token")


def test_serve_only_changes_roll_out_in_place():
    old, new = staging(), staging(maxModelLen=16384)
    rollout = classify(old, new)
    assert rollout.kind == IN_PLACE and not rollout.downtime and rollout.extra_gpu_nodes == 0
    assert rollout.reasons == ("spec.serveConfigV2",)
    assert "in place" in rollout.describe()


def test_scale_bounds_alone_do_not_replace_the_cluster():
    # maxReplicas of a worker group is left out of KubeRay's cluster hash: updated in place
    old = staging()
    new = staging(decode={"tensorParallelSize": 8, "minReplicas": 1, "maxReplicas": 2})
    assert classify(old, new).kind == IN_PLACE


def test_an_image_change_under_recreate_means_downtime_and_no_extra_nodes():
    old, new = staging(), staging(image="123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.1-py311-cu128")
    rollout = classify(old, new)
    assert rollout.kind == NEW_CLUSTER and rollout.strategy == "None"
    assert rollout.downtime and rollout.extra_gpu_nodes == 0
    assert any(r.startswith("spec.rayClusterConfig.headGroupSpec") for r in rollout.reasons)
    assert "endpoint is down" in rollout.describe()


def test_an_image_change_under_new_cluster_needs_a_second_set_of_gpu_nodes():
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.1-py311-cu128"
    old, new = staging(upgradeStrategy="NewCluster"), staging(upgradeStrategy="NewCluster", image=image)
    rollout = classify(old, new)
    assert rollout.kind == NEW_CLUSTER and rollout.strategy == "NewCluster" and not rollout.downtime
    # the new cluster starts each GPU worker group at `replicas` (= its minimum): 1 prefill + 1 decode pod,
    # each a whole p4d node
    groups = new["rayClusterConfig"]["workerGroupSpecs"]
    assert rollout.extra_gpu_nodes == sum(g["replicas"] for g in groups) == 2
    assert "2 extra GPU node(s)" in rollout.describe()


def replaced_by_pulumi(reason: str, paths: list[str]) -> bool:
    """Does a change at `reason` (e.g. `...workerGroupSpecs[1].template.spec`) fall under a replaceOnChanges path?"""
    patterns = [re.escape(p).replace(r"\[\*\]", r"\[\d+\]") for p in paths]
    return any(re.match(p + r"($|[.\[])", reason) for p in patterns)


@pytest.mark.parametrize(
    "change",
    [
        {"image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.1-py311-cu128"},
        {"maxModelLen": 16384},
        {"decode": {"tensorParallelSize": 8, "minReplicas": 1, "maxReplicas": 2}},
    ],
)
def test_pulumi_replaces_exactly_where_kuberay_would_need_a_new_cluster(change):
    # Recreate's replaceOnChanges: a change KubeRay needs a new cluster for is under one of its
    # paths (so Pulumi replaces); one KubeRay applies in place (Serve config, scale bounds) is not.
    paths = replace_on_changes(stack_config("staging").serving)
    rollout = classify(staging(), staging(**change))
    spec_paths = list(rollout.reasons)
    assert spec_paths
    if rollout.kind == NEW_CLUSTER:
        assert all(replaced_by_pulumi(r, paths) for r in spec_paths)
    else:
        old, new = staging(), staging(**change)
        changed = [f"spec.rayClusterConfig.workerGroupSpecs[{i}].{k}"
                   for i, (a, b) in enumerate(zip(old["rayClusterConfig"]["workerGroupSpecs"],
                                                  new["rayClusterConfig"]["workerGroupSpecs"]))
                   for k in a if a[k] != b[k]]
        assert not any(replaced_by_pulumi(r, paths) for r in spec_paths + changed)


def test_create_delete_and_no_change():
    spec = staging()
    assert classify(None, spec).kind == CREATE
    assert classify(spec, None).kind == DELETE
    assert classify(spec, copy.deepcopy(spec)).kind == NO_CHANGE


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_preview_records_are_classified_and_rendered(stack, programs):
    # the records as resources.json holds them: urn -> {type, name, inputs}
    rs = programs(stack).one(RAY_SERVICE)
    record = {"type": RAY_SERVICE, "name": rs.name, "inputs": {"spec": copy.deepcopy(rs.inputs["spec"])}}
    changed = copy.deepcopy(record)
    changed["inputs"]["spec"]["serveConfigV2"] += "# changed\n"
    [(name, rollout)] = classify_resources({rs.urn: record}, {rs.urn: changed})
    assert name == rs.name and rollout.kind == IN_PLACE
    diff = Diff(stack, "base", "head", [], [], [], [], [], None, None, [], [(name, rollout)])
    assert f"**Roll-out:** {rollout.describe()}" in render(diff)
    # and a preview without a change says nothing about roll-outs
    [(_, same)] = classify_resources({rs.urn: record}, {rs.urn: record})
    assert same.kind == NO_CHANGE
    assert "Roll-out" not in render(Diff(stack, "base", "head", [], [], [], [], [], None, None, [], [(name, same)]))
