"""GPU placement per capacity, the GPU node-group roll, and what Cluster Autoscaler reads off the GPU group.

- Placement (EC2 docs cited in llm_pd_eks/efa_gpu_nodes.placement_choice): on demand, the program's
  own cluster placement group; an ODCR created in a cluster placement group, that group by name;
  a Capacity Block, none.
- The roll: a launch-template change must never reach EKS's in-place update (surge, then a drain
  the one-pod PodDisruptionBudgets fail): the node group's EKS name is keyed by the template, so
  the change is a replacement, blue/green on demand and delete-first on reserved capacity.
- Cluster Autoscaler: the accelerator label of its AWS provider (vendored upstream excerpt) and
  `hugepages-2Mi` in the scale-from-zero template.
"""

from __future__ import annotations

import base64
import email
import re

import pytest
from helpers import (
    DATA,
    LAUNCH_TEMPLATE,
    NODE_GROUP,
    PLACEMENT_GROUP,
    config_problems,
    engine_config_with,
    validate_values,
)

from llm_pd_eks.autoscaler import TAG_PREFIX
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.efa_gpu_nodes import accelerator_label
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program

RID = "cr-0123456789abcdef0"
RESERVATION_PG = "odcr-p5-us-east-1c"
ASG_TAG = "aws:autoscaling/tag:Tag"
BASE = {
    "network": {"availabilityZones": ["us-west-2a", "us-west-2b"]},
    "gpuNodes": {"instanceType": "p5.48xlarge", "availabilityZone": "us-west-2a"},
}


def prod_with(**gpu_changes) -> ProgramRun:
    return run_program("prod", *engine_config_with("prod", "gpuNodes", **gpu_changes))


def gpu_pgs(run: ProgramRun):
    return [r for r in run.of_type(PLACEMENT_GROUP) if "gpu" in r.name]


# --- item: placement groups follow the capacity ----------------------------------------------------


@pytest.mark.parametrize("capacity", ["onDemand", {"reservationId": RID}], ids=["on-demand", "odcr-without-group"])
def test_own_cluster_placement_group(capacity):
    run = prod_with(capacity=capacity)
    (pg,) = gpu_pgs(run)
    lt = run.one(LAUNCH_TEMPLATE, "gpu")
    assert pg.inputs["strategy"] == "cluster"
    assert pg.urn in lt.property_dependencies["placement"]


def test_odcr_in_a_placement_group_launches_into_that_group():
    run = prod_with(capacity={"reservationId": RID, "placementGroup": RESERVATION_PG})
    lt = run.one(LAUNCH_TEMPLATE, "gpu")
    assert gpu_pgs(run) == []  # a second group would never match the reservation
    assert lt.inputs["placement"] == {"groupName": RESERVATION_PG}
    assert lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"] == {"capacityReservationId": RID}


def test_capacity_block_has_no_placement_group():
    run = prod_with(capacity={"capacityBlockId": RID}, minSize=0, desiredSize=0)
    lt = run.one(LAUNCH_TEMPLATE, "gpu")
    assert gpu_pgs(run) == []
    assert "placement" not in lt.inputs
    assert lt.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}


@pytest.mark.parametrize(
    "pg, expected",
    [
        ("", "is not an EC2 placement group name"),
        ("has space", "is not an EC2 placement group name"),
    ],
)
def test_reservation_placement_group_name_checked(pg, expected):
    (problem,) = config_problems(
        {**BASE, "gpuNodes": {**BASE["gpuNodes"], "capacity": {"reservationId": RID, "placementGroup": pg}}}
    )
    assert "gpuNodes.capacity" in problem and expected in problem


def test_capacity_block_takes_no_placement_group():
    (problem,) = config_problems(
        {
            **BASE,
            "gpuNodes": {**BASE["gpuNodes"], "capacity": {"capacityBlockId": RID, "placementGroup": RESERVATION_PG}},
        }
    )
    assert "gpuNodes.capacity" in problem and "placementGroup" in problem


# --- item: minSize 0 on a Capacity Block only --------------------------------------------------------


def test_capacity_block_may_scale_to_zero():
    cfg = validate_values(
        {
            **BASE,
            "gpuNodes": {
                **BASE["gpuNodes"],
                "capacity": {"capacityBlockId": RID},
                "minSize": 0,
                "desiredSize": 0,
                "maxSize": 2,
            },
        }
    )
    assert (cfg.gpu_nodes.min_size, cfg.gpu_nodes.desired_size) == (0, 0)


@pytest.mark.parametrize("capacity", ["onDemand", {"reservationId": RID}])
def test_other_capacity_keeps_two_nodes(capacity):
    (problem,) = config_problems(
        {**BASE, "gpuNodes": {**BASE["gpuNodes"], "capacity": capacity, "minSize": 0, "desiredSize": 0}}
    )
    assert "minSize is 0" in problem and "at least 2" in problem


# --- item: the GPU roll ---------------------------------------------------------------------------


def test_template_change_replaces_the_node_group_instead_of_rolling_it():
    """The EKS name is what forces a replacement: it must change with the template and only then."""
    base = prod_with()
    bigger_disk = prod_with(diskSizeGib=600)
    more_nodes = prod_with(maxSize=7)
    name = base.one(NODE_GROUP, "gpu").inputs["nodeGroupName"]
    assert re.fullmatch(r".+-gpu-[0-9a-f]{8}", name)
    assert base.one(LAUNCH_TEMPLATE, "gpu").inputs != bigger_disk.one(LAUNCH_TEMPLATE, "gpu").inputs
    assert bigger_disk.one(NODE_GROUP, "gpu").inputs["nodeGroupName"] != name
    assert more_nodes.one(NODE_GROUP, "gpu").inputs["nodeGroupName"] == name  # scaling stays in place
    assert run_program("prod").one(NODE_GROUP, "gpu").inputs["nodeGroupName"] == name  # deterministic


@pytest.mark.parametrize(
    "capacity, change, delete_first",
    [
        ("onDemand", None, False),
        ({"reservationId": RID}, None, True),
        ({"capacityBlockId": RID}, None, True),
        ({"reservationId": RID}, "blueGreen", False),
        ("onDemand", "recreate", True),
    ],
)
def test_roll_strategy_per_capacity(capacity, change, delete_first):
    extra = {} if change is None else {"templateChange": change}
    ng = prod_with(capacity=capacity, **extra).one(NODE_GROUP, "gpu")
    assert ng.delete_before_replace is delete_first
    assert ng.inputs["updateConfig"] == {"maxUnavailable": 1, "updateStrategy": "MINIMAL"}


def test_system_nodes_keep_their_roll(run: ProgramRun):
    assert run.one(NODE_GROUP, "system").delete_before_replace is False


# --- item: Cluster Autoscaler ---------------------------------------------------------------------

UPSTREAM = (DATA / "cluster-autoscaler" / "aws_cloud_provider-1.35.2-lines-36-54.go").read_text()
UPSTREAM_LABEL = re.search(r'GPULabel\s*=\s*"([^"]+)"', UPSTREAM).group(1)
UPSTREAM_TYPES = set(re.findall(r'"(nvidia-[^"]+)":\s*\{\}', UPSTREAM))


def test_vendored_upstream_excerpt_is_what_we_think():
    assert UPSTREAM_LABEL == "k8s.amazonaws.com/accelerator"
    assert {"nvidia-tesla-a100", "nvidia-a10g", "nvidia-l40s"} <= UPSTREAM_TYPES


def test_gpu_nodes_carry_the_accelerator_label(run: ProgramRun):
    cfg = stack_config(run.stack)
    labels = run.one(NODE_GROUP, "gpu").inputs["labels"]
    assert labels[UPSTREAM_LABEL] == accelerator_label(GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type])
    assert UPSTREAM_LABEL not in run.one(NODE_GROUP, "system").inputs.get("labels", {})
    tags = {t.inputs["tag"]["key"]: t.inputs["tag"]["value"] for t in run.of_type(ASG_TAG) if "gpu" in t.name}
    assert tags[f"{TAG_PREFIX}/node-template/label/{UPSTREAM_LABEL}"] == labels[UPSTREAM_LABEL]


def test_accelerator_names_are_the_providers_where_it_has_them():
    for t in GPU_INSTANCE_TYPES.values():
        value = accelerator_label(t)
        candidates = {f"nvidia-{t.gpu_model.lower()}", f"nvidia-tesla-{t.gpu_model.lower()}"} & UPSTREAM_TYPES
        if candidates:
            assert {value} == candidates, t.name
        else:
            assert value == f"nvidia-{t.gpu_model.lower()}", t.name


def _reserved_hugepages_mib(run: ProgramRun) -> int:
    message = email.message_from_bytes(base64.b64decode(run.one(LAUNCH_TEMPLATE, "gpu").inputs["userData"]))
    (script,) = [p.get_payload() for p in message.walk() if p.get_content_type() == "text/x-shellscript"]
    return int(re.search(r"vm\.nr_hugepages\s*=\s*(\d+)", script).group(1)) * 2


def test_scale_from_zero_template_advertises_the_reserved_huge_pages(run: ProgramRun):
    tags = {t.inputs["tag"]["key"]: t.inputs["tag"]["value"] for t in run.of_type(ASG_TAG) if "gpu" in t.name}
    value = tags[f"{TAG_PREFIX}/node-template/resources/hugepages-2Mi"]
    # a Kubernetes quantity in Mi (resource.ParseQuantity), equal to what the boot script reserves
    assert re.fullmatch(r"\d+Mi", value) and int(value[:-2]) == _reserved_hugepages_mib(run)
