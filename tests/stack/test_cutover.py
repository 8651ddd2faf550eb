"""A node change is a planned cut-over: the Ray pods select their node groups by name, so a new group
moves the RayService with KubeRay's own upgrade, and the preview diff shows the sequence and its cost.

Both sides are the program's own plans (the mock engine run, as resources.json records).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import NODE_GROUP, RAY_SERVICE, engine_config_with

from llm_pd_eks.engine_start import engine_start_timeout_s
from llm_pd_eks.gpu_cutover import NODE_GROUP_LABEL
from llm_pd_eks.prices import load_prices
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.cutover import PLANNING_MINUTES, RAY_CLUSTER_DELETION_DELAY_MINUTES, plan_cutover
from llm_pd_eks_tools.plan.gpu_node_rollout import BLUE_GREEN, NO_CHANGE, classify_gpu_roll
from llm_pd_eks_tools.plan.preview.diff import Side, compare, render
from llm_pd_eks_tools.plan.preview.harness import resource_records
from llm_pd_eks_tools.plan.preview.mockrun import run_program
from llm_pd_eks_tools.plan.rayservice_rollout import NEW_CLUSTER, classify_resources

P5_HOURLY = load_prices().regions["us-east-1"]["instances"]["p5.48xlarge"]


def records(section: str = "gpuNodes", **changes) -> dict[str, dict]:
    run = run_program("prod", *engine_config_with("prod", section, **changes))
    return {r["urn"]: r for r in resource_records(run)}


def one(resources: dict[str, dict], type_: str, name: str) -> dict:
    (found,) = [r for r in resources.values() if r["type"] == type_ and name in r["name"]]
    return found


def pod_selectors(resources: dict[str, dict]) -> tuple[dict, list[dict]]:
    cluster = one(resources, RAY_SERVICE, "rayservice")["inputs"]["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]["spec"]["nodeSelector"]
    return head, [g["template"]["spec"]["nodeSelector"] for g in cluster["workerGroupSpecs"]]


@pytest.fixture(scope="module")
def prod() -> dict[str, dict]:
    return records()


@pytest.fixture(scope="module")
def bigger_disk() -> dict[str, dict]:
    return records(diskSizeGib=600)


def test_ray_workers_select_their_own_node_group_by_name_and_the_head_its_role(prod):
    head, workers = pod_selectors(prod)
    assert head == {"role": "system"}  # no group name: a system change builds no second Ray cluster
    gpu_name = one(prod, NODE_GROUP, "gpu-nodes")["inputs"]["nodeGroupName"]
    assert [w[NODE_GROUP_LABEL] for w in workers] == [gpu_name, gpu_name]


def test_a_gpu_change_moves_the_workers_with_a_new_ray_cluster(prod, bigger_disk):
    before, after = (one(r, NODE_GROUP, "gpu-nodes") for r in (prod, bigger_disk))
    assert before["inputs"]["nodeGroupName"] != after["inputs"]["nodeGroupName"]
    assert after["delete_before_replace"] is False  # create-before-delete: the old group goes last
    _, workers = pod_selectors(bigger_disk)
    assert {w[NODE_GROUP_LABEL] for w in workers} == {after["inputs"]["nodeGroupName"]}
    # the RayService waits for the group (Pulumi deletes the replaced group after its dependents)
    assert after["urn"] in one(bigger_disk, RAY_SERVICE, "rayservice")["dependencies"]
    # the nodeSelector is inside KubeRay's cluster hash: NewCluster builds the new cluster, no downtime
    ((_, rollout),) = classify_resources(prod, bigger_disk)
    assert rollout.kind == NEW_CLUSTER and rollout.strategy == "NewCluster" and not rollout.downtime
    assert any("nodeSelector" in p for p in rollout.reasons), rollout.reasons
    # and `up` waits for the switch (conditions checked once observedGeneration is current)
    annotations = one(bigger_disk, RAY_SERVICE, "rayservice")["inputs"]["metadata"]["annotations"]
    assert "condition=UpgradeInProgress=False" in annotations["pulumi.com/waitFor"]


def test_the_cutover_sequence_its_time_and_overlap_cost(prod, bigger_disk):
    plan = plan_cutover(prod, bigger_disk, P5_HOURLY)
    cfg = stack_config("prod")
    old_name = one(prod, NODE_GROUP, "gpu-nodes")["inputs"]["nodeGroupName"]
    new_name = one(bigger_disk, NODE_GROUP, "gpu-nodes")["inputs"]["nodeGroupName"]
    first, placement, ray, last = plan.steps
    assert f"`{new_name}`" in first and f"`{old_name}`" in first
    assert placement.startswith(
        f"GPU placement: the new nodes launch into their own cluster placement group `{new_name}`"
    )
    assert "NewCluster" in ray and "UpgradeInProgress=False" in ray
    assert last.startswith(f"Pulumi deletes `{old_name}`")
    load = engine_start_timeout_s(cfg.serving.model_id, cfg.serving.engine_start_timeout_s) / 60
    hours = (PLANNING_MINUTES["nodes ready"] + load + RAY_CLUSTER_DELETION_DELAY_MINUTES) / 60
    nodes = cfg.gpu_nodes.desired_size
    assert plan.overlap_hours == pytest.approx(hours)
    assert plan.overlap_gpu_hours == pytest.approx(nodes * 8 * hours)  # p5.48xlarge: 8 H100
    assert plan.overlap_cost == pytest.approx(nodes * P5_HOURLY * hours)
    assert not plan.downtime
    assert f"about ${nodes * P5_HOURLY * hours:,.2f}" in plan.lines()[-1]


def test_recreate_strategy_says_the_endpoint_is_down():
    config, secrets = engine_config_with("prod", "serving", upgradeStrategy="Recreate")
    before = {r["urn"]: r for r in resource_records(run_program("prod", config, secrets))}
    config["llm-pd-eks:gpuNodes"] = engine_config_with("prod", "gpuNodes", diskSizeGib=600)[0]["llm-pd-eks:gpuNodes"]
    after = {r["urn"]: r for r in resource_records(run_program("prod", config, secrets))}
    plan = plan_cutover(before, after, P5_HOURLY)
    assert plan.downtime and any("Recreate" in s and "DOWN" in s for s in plan.steps)


def test_a_change_of_no_node_property_rolls_nothing(prod):
    for changed in (records(maxSize=7), records("serving", readyTimeoutMinutes=120)):
        assert plan_cutover(prod, changed, P5_HOURLY) is None
        assert classify_gpu_roll(prod, changed).kind != BLUE_GREEN
        for group in ("gpu-nodes", "system-nodes"):
            assert len({one(r, NODE_GROUP, group)["inputs"]["nodeGroupName"] for r in (prod, changed)}) == 1
    assert classify_gpu_roll(prod, records("serving", readyTimeoutMinutes=120)).kind == NO_CHANGE


def test_preview_diff_shows_the_cutover(prod, bigger_disk):
    base = Side("base", Path("."), 0, "", prod, None)
    text = render(compare("prod", base, Side("head", Path("."), 0, "", bigger_disk, None)))
    section = text.split("**Cut-over:**", 1)[1]
    assert section.lstrip().startswith("1. GPU nodes:") and "At most about" in section
    assert "**Cut-over:**" not in render(compare("prod", base, Side("head", Path("."), 0, "", prod, None)))
