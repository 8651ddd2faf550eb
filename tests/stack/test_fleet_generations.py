"""Each generation of GPU nodes gets its own cluster placement group; add-ons name their versions; the
GPU group repairs its nodes.

Rendered through the program under mocks (the recorded plan the preview shows): prod, and prod changed
to another GPU type or AZ, as a cut-over would render them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import LAUNCH_TEMPLATE, NODE_GROUP, PLACEMENT_GROUP, engine_config_with, run_with

from llm_pd_eks.addons import CORE_ADDONS
from llm_pd_eks.storage import EBS_CSI_ADDON
from llm_pd_eks.versions import EKS_ADDON_VERSIONS
from llm_pd_eks_tools.plan.cutover import plan_cutover
from llm_pd_eks_tools.plan.preview.diff import Side, compare, render
from llm_pd_eks_tools.plan.preview.harness import resource_records
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program

ADDON = "aws:eks/addon:Addon"


def prod_gpu(**changes) -> ProgramRun:
    return run_program("prod", *engine_config_with("prod", "gpuNodes", **changes))


def gpu_placement(run: ProgramRun) -> tuple[str, str, str]:
    """(placement group name, the template's placement group, the node group's name)."""
    (pg,) = [r for r in run.of_type(PLACEMENT_GROUP) if "gpu" in r.name]
    return (
        pg.inputs["name"],
        run.one(LAUNCH_TEMPLATE, "gpu").inputs["placement"]["groupName"],
        run.one(NODE_GROUP, "gpu").inputs["nodeGroupName"],
    )


@pytest.fixture(scope="module")
def p5() -> ProgramRun:
    return prod_gpu()


def test_the_placement_group_is_the_node_groups_own(p5):
    pg, template_pg, group = gpu_placement(p5)
    assert pg == template_pg == group
    ng = p5.one(NODE_GROUP, "gpu")
    (pg_resource,) = [r for r in p5.of_type(PLACEMENT_GROUP) if "gpu" in r.name]
    assert pg_resource.urn in ng.dependencies  # deleted after the node group that fills it


@pytest.mark.parametrize(
    "change",
    [{"instanceType": "p5en.48xlarge"}, {"availabilityZone": "us-east-1b"}, {"diskSizeGib": 600}],
    ids=["p5en", "another-az", "template"],
)
def test_a_new_generation_launches_into_a_new_placement_group(p5, change):
    before, after = gpu_placement(p5), gpu_placement(prod_gpu(**change))
    assert after[0] != before[0] and after[1] != before[1] and after[2] != before[2]


def test_scaling_keeps_the_placement_group(p5):
    assert gpu_placement(prod_gpu(maxSize=7)) == gpu_placement(p5)


def test_a_capacity_block_brings_no_placement_group_and_an_odcr_group_is_used_by_name():
    block = prod_gpu(capacity={"capacityBlockId": "cr-0123456789abcdef0"})
    assert not [r for r in block.of_type(PLACEMENT_GROUP) if "gpu" in r.name]
    odcr = prod_gpu(capacity={"reservationId": "cr-0123456789abcdef0", "placementGroup": "odcr-pg"})
    assert odcr.one(LAUNCH_TEMPLATE, "gpu").inputs["placement"] == {"groupName": "odcr-pg"}
    assert not [r for r in odcr.of_type(PLACEMENT_GROUP) if "gpu" in r.name]


@pytest.mark.parametrize("version", sorted(EKS_ADDON_VERSIONS))
def test_every_addon_names_the_version_pinned_for_the_minor(version):
    run = run_with("prod", cluster={"kubernetesVersion": version})
    addons = {r.inputs["addonName"]: r.inputs.get("addonVersion") for r in run.of_type(ADDON)}
    assert set(addons) == {*CORE_ADDONS, EBS_CSI_ADDON}
    assert addons == EKS_ADDON_VERSIONS[version]


def test_a_minor_upgrade_moves_every_addon():
    old, new = (
        {
            r.inputs["addonName"]: r.inputs["addonVersion"]
            for r in run_with("prod", cluster={"kubernetesVersion": v}).of_type(ADDON)
        }
        for v in ("1.34", "1.35")
    )
    assert {name for name in old if old[name] != new[name]} >= {"vpc-cni", "kube-proxy", "coredns"}


def test_the_gpu_group_repairs_one_node_at_a_time(p5):
    repair = p5.one(NODE_GROUP, "gpu").inputs["nodeRepairConfig"]
    assert repair["enabled"] is True
    assert repair["maxParallelNodesRepairedCount"] == 1
    assert 0 < repair["maxUnhealthyNodeThresholdPercentage"] < 100


def test_the_preview_diff_says_the_new_generation_gets_its_own_placement_group(p5):
    before = {r["urn"]: r for r in resource_records(p5)}
    after = {r["urn"]: r for r in resource_records(prod_gpu(instanceType="p5en.48xlarge"))}
    old_pg, new_pg = gpu_placement(p5)[0], gpu_placement(prod_gpu(instanceType="p5en.48xlarge"))[0]
    text = render(
        compare("prod", Side("base", Path("."), 0, "", before, None), Side("head", Path("."), 0, "", after, None))
    )
    assert f"their own cluster placement group `{new_pg}`, not into `{old_pg}` that the serving nodes fill" in text
    assert plan_cutover(before, after).downtime is False
