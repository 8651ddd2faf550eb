"""llm_pd_eks_tools/plan/rayservice_rollout.py: how a RayService change rolls out, judged on the rendered specs.

Old and new specs are rendered by the program's own `ray_service_spec` from stack configs that
differ in one setting, so each case is a change a user could make.
"""

from __future__ import annotations

import copy

import pytest
from helpers import RAY_SERVICE

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import ServingConfig
from llm_pd_eks.ray_service import ray_service_spec, replace_on_changes
from llm_pd_eks.rollout_rule import differing_paths
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.diff import Diff, render
from llm_pd_eks_tools.plan.rayservice_rollout import (
    CREATE,
    DELETE,
    IN_PLACE,
    NEW_CLUSTER,
    NO_CHANGE,
    NOT_APPLIED,
    classify,
    classify_resources,
    under_any,
)


def staging(**serving_changes) -> dict:
    """Staging's RayService, under Recreate unless a test names the strategy (the stack itself runs
    prod's NewCluster; both strategies are judged here)."""
    cfg = stack_config("staging")
    assert cfg.serving is not None
    base = {**cfg.serving.model_dump(by_alias=True), "upgradeStrategy": "Recreate"}
    serving = ServingConfig.model_validate({**base, **serving_changes})
    return ray_service_spec(serving, GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type], "hf-token")


def test_serve_only_changes_roll_out_in_place():
    old, new = staging(), staging(maxModelLen=16384)
    rollout = classify(old, new)
    assert rollout.kind == IN_PLACE and not rollout.downtime and rollout.extra_gpu_nodes == 0
    assert rollout.reasons == ("spec.serveConfigV2",)
    assert "in place" in rollout.describe()


def test_scale_bounds_under_recreate_replace_the_rayservice_so_they_apply():
    # KubeRay leaves maxReplicas out of its cluster hash and never updates the live RayCluster for it:
    # under Recreate Pulumi replaces the RayService, so the new bound is what the autoscaler reads
    old = staging()
    new = staging(decode={"tensorParallelSize": 8, "minReplicas": 1, "maxReplicas": 2})
    rollout = classify(old, new)
    assert rollout.kind == NEW_CLUSTER and rollout.downtime
    assert "spec.rayClusterConfig.workerGroupSpecs[1].maxReplicas" in rollout.reasons


def test_scale_bounds_under_new_cluster_are_reported_as_not_applied():
    old = staging(upgradeStrategy="NewCluster")
    new = staging(upgradeStrategy="NewCluster", decode={"tensorParallelSize": 8, "minReplicas": 1, "maxReplicas": 2})
    rollout = classify(old, new)
    assert rollout.kind == NOT_APPLIED
    assert "spec.rayClusterConfig.workerGroupSpecs[1].maxReplicas" in rollout.reasons
    assert "WILL NOT TAKE EFFECT" in rollout.describe()


def with_toleration(spec: dict) -> dict:
    out = copy.deepcopy(spec)
    for group in out["rayClusterConfig"]["workerGroupSpecs"]:
        group["template"]["spec"]["tolerations"].append({"key": "example.com/maintenance", "operator": "Exists"})
    return out


def with_extra_group(spec: dict) -> dict:
    out = copy.deepcopy(spec)
    extra = copy.deepcopy(out["rayClusterConfig"]["workerGroupSpecs"][1])
    extra["groupName"] = "decode-extra"
    out["rayClusterConfig"]["workerGroupSpecs"].append(extra)
    return out


def test_an_appended_worker_group_is_in_place_under_new_cluster_and_a_replacement_under_recreate():
    # KubeRay adds a group appended at the end in place; Pulumi's property paths cannot tell an appended
    # group from a changed one, so under Recreate the RayService is replaced, and the preview says so
    old = staging(upgradeStrategy="NewCluster")
    rollout = classify(old, with_extra_group(old))
    assert rollout.kind == IN_PLACE and rollout.reasons == ("spec.rayClusterConfig.workerGroupSpecs[2]",)
    assert replace_on_changes(with_extra_group(old)) == ["spec.serveService.metadata.name"]
    recreate = staging()
    rollout = classify(recreate, with_extra_group(recreate))
    assert rollout.kind == NEW_CLUSTER and rollout.downtime
    assert all(under_any(r, replace_on_changes(with_extra_group(recreate))) for r in rollout.reasons)


def test_a_toleration_change_is_replaced_under_recreate_and_not_applied_under_new_cluster():
    recreate = staging()
    assert classify(recreate, with_toleration(recreate)).kind == NEW_CLUSTER
    new_cluster = staging(upgradeStrategy="NewCluster")
    assert classify(new_cluster, with_toleration(new_cluster)).kind == NOT_APPLIED


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


IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.1-py311-cu128"
CHANGES = {
    "image": lambda spec: staging(image=IMAGE),
    "max model len (Serve only)": lambda spec: staging(maxModelLen=16384),
    "decode max replicas": lambda spec: staging(decode={"tensorParallelSize": 8, "minReplicas": 1, "maxReplicas": 2}),
    "a toleration": with_toleration,
    "an appended worker group": with_extra_group,
    "a removed worker group": lambda spec: {
        **spec,
        "rayClusterConfig": {
            **spec["rayClusterConfig"],
            "workerGroupSpecs": spec["rayClusterConfig"]["workerGroupSpecs"][:1],
        },
    },
    "endpoint annotations": lambda spec: staging(endpointAnnotations={"example.com/team": "llm"}),
    "a public endpoint": lambda spec: staging(publicEndpoint=True, endpointSourceRanges=["198.51.100.0/24"]),
    "autoscaler options": lambda spec: {
        **spec,
        "rayClusterConfig": {**spec["rayClusterConfig"], "enableInTreeAutoscaling": False},
    },
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_pulumi_replaces_exactly_where_the_preview_says_it_will(change):
    # One rule (llm_pd_eks/rollout_rule.py): under Recreate, Pulumi's replaceOnChanges matches a changed
    # path exactly when the preview's classifier reports a replacement; nothing else is silently dropped.
    old = staging()
    new = change(old)
    paths = replace_on_changes(new)
    changed = differing_paths(old, new, "spec")
    rollout = classify(old, new)
    replaced = any(under_any(p, paths) for p in changed)
    assert replaced is (rollout.kind == NEW_CLUSTER and rollout.downtime), (changed, rollout)
    assert rollout.kind != NOT_APPLIED  # under Recreate every cluster change takes effect


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


PATCHED_CHANGES = {
    "annotations": {"endpointAnnotations": {"example.com/team": "llm"}},
    "type and source ranges": {"publicEndpoint": True, "endpointSourceRanges": ["198.51.100.0/24"]},
}


@pytest.mark.parametrize("strategy", ["Recreate", "NewCluster"])
@pytest.mark.parametrize("changes", PATCHED_CHANGES.values(), ids=PATCHED_CHANGES.keys())
def test_an_endpoint_field_change_is_patched_in_place_under_either_strategy(strategy, changes):
    # KubeRay v1.7.0 reconcileServices updates an existing serve Service only when its selector switches
    # to a new cluster: the program patches these fields on the live Service (server-side apply), so the
    # RayService is not replaced, and the preview says the Service is patched
    old = staging(upgradeStrategy=strategy)
    new = staging(upgradeStrategy=strategy, **changes)
    changed = differing_paths(old, new, "spec")
    assert changed and all(p.startswith("spec.serveService") for p in changed)
    assert not any(under_any(p, replace_on_changes(new)) for p in changed)
    rollout = classify(old, new)
    assert rollout.kind == IN_PLACE and not rollout.downtime and rollout.extra_gpu_nodes == 0
    assert set(rollout.reasons) == set(changed)
    line = rollout.describe()
    assert "patched on the live Service by server-side apply" in line and "same NLB" in line


@pytest.mark.parametrize("strategy", ["Recreate", "NewCluster"])
def test_a_renamed_endpoint_replaces_the_rayservice_under_either_strategy(strategy):
    # a new name would be a second Service beside the old one: Pulumi replaces the RayService
    old = staging(upgradeStrategy=strategy)
    new = staging(upgradeStrategy=strategy, endpointName="llm-openai-v2")
    (changed,) = differing_paths(old, new, "spec")
    assert changed == "spec.serveService.metadata.name" and under_any(changed, replace_on_changes(new))
    rollout = classify(old, new)
    assert rollout.kind == NEW_CLUSTER and rollout.downtime and rollout.reasons == (changed,)
    line = rollout.describe()
    assert "the RayService is replaced" in line and "endpoint Service are deleted and made anew" in line


def test_the_plan_patches_the_endpoint_service_on_an_annotation_change(programs):
    # on the recorded plans: an annotation added to the endpoint Service is not under the RayService's
    # replaceOnChanges, and the preview calls it an in-place patch
    for stack in ("dev", "prod"):
        rs = programs(stack).one(RAY_SERVICE)
        spec = copy.deepcopy(rs.inputs["spec"])
        changed = copy.deepcopy(spec)
        changed["serveService"]["metadata"]["annotations"]["example.com/team"] = "llm"
        paths = differing_paths(spec, changed, "spec")
        assert paths and not any(under_any(p, replace_on_changes(changed)) for p in paths)
        assert classify(spec, changed).kind == IN_PLACE and not classify(spec, changed).downtime
