"""GPU capacity (on demand, ODCR, Capacity Block), root volumes and the nodeadm instance-store RAID0."""

from __future__ import annotations

import base64
import email
import gzip
import json
import os
import re

import jsonschema
import pytest
import yaml
from helpers import (
    DATA,
    LAUNCH_TEMPLATE,
    NODE_GROUP,
    RAY_SERVICE,
    config_problems,
    engine_config_with,
    validate_values,
)

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.node_common import NODEADM_CONTENT_TYPE, node_config
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program

RESERVATION = "cr-0123456789abcdef0"
BASE = {
    "network": {"availabilityZones": ["us-west-2a", "us-west-2b"]},
    "gpuNodes": {"instanceType": "p5.48xlarge", "availabilityZone": "us-west-2a"},
}


def with_gpu(**changes) -> dict:
    return {**BASE, "gpuNodes": {**BASE["gpuNodes"], **changes}}


def run_with_capacity(capacity) -> ProgramRun:
    return run_program("prod", *engine_config_with("prod", "gpuNodes", capacity=capacity))


# --- capacity ------------------------------------------------------------------------------------


def test_on_demand_by_default(run: ProgramRun):
    ng, lt = run.one(NODE_GROUP, "gpu"), run.one(LAUNCH_TEMPLATE, "gpu")
    assert stack_config(run.stack).gpu_nodes.capacity == "onDemand"
    assert ng.inputs["capacityType"] == "ON_DEMAND"
    assert "capacityReservationSpecification" not in lt.inputs
    assert "instanceMarketOptions" not in lt.inputs


def test_odcr_is_targeted_by_the_launch_template():
    run = run_with_capacity({"reservationId": RESERVATION})
    lt, ng = run.one(LAUNCH_TEMPLATE, "gpu"), run.one(NODE_GROUP, "gpu")
    target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": RESERVATION}
    assert "instanceMarketOptions" not in lt.inputs
    assert ng.inputs["capacityType"] == "ON_DEMAND"


def test_capacity_block_as_eks_documents():
    run = run_with_capacity({"capacityBlockId": RESERVATION})
    lt, ng = run.one(LAUNCH_TEMPLATE, "gpu"), run.one(NODE_GROUP, "gpu")
    assert lt.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"] == {
        "capacityReservationId": RESERVATION
    }
    assert ng.inputs["capacityType"] == "CAPACITY_BLOCK"
    # the system nodes are untouched
    assert run.one(NODE_GROUP, "system").inputs["capacityType"] == "ON_DEMAND"


@pytest.mark.parametrize("capacity", ["onDemand", {"reservationId": RESERVATION}, {"capacityBlockId": RESERVATION}])
def test_capacity_shapes_accepted(capacity):
    assert validate_values(with_gpu(capacity=capacity)).gpu_nodes.capacity is not None


@pytest.mark.parametrize(
    "capacity, expected",
    [
        ("spot", "must be 'onDemand'"),
        ({"reservationId": "r-0123"}, "is not an EC2 capacity reservation id"),
        ({"capacityBlockId": "cr-XYZ"}, "is not an EC2 capacity reservation id"),
        ({"reservationId": RESERVATION, "capacityBlockId": RESERVATION}, "must be 'onDemand'"),
    ],
)
def test_capacity_shapes_refused(capacity, expected):
    (problem,) = config_problems(with_gpu(capacity=capacity))
    assert problem.startswith("llm-pd-eks:gpuNodes.capacity") and expected in problem


# --- node groups leave desiredSize to the autoscaler -----------------------------------------------


def test_node_groups_ignore_desired_size(run: ProgramRun):
    for ng in run.of_type(NODE_GROUP):
        assert ng.ignore_changes == ["scalingConfig.desiredSize"], ng.name


# --- root volumes ----------------------------------------------------------------------------------


def test_root_volumes_carry_configured_gp3_performance(run: ProgramRun):
    cfg = stack_config(run.stack)
    for name, nodes in (("gpu", cfg.gpu_nodes), ("system", cfg.system_nodes)):
        (bdm,) = run.one(LAUNCH_TEMPLATE, name).inputs["blockDeviceMappings"]
        assert bdm["ebs"]["volumeType"] == "gp3"
        assert (bdm["ebs"]["iops"], bdm["ebs"]["throughput"]) == (
            nodes.root_volume_iops,
            nodes.root_volume_throughput_mibps,
        )


def test_gp3_throughput_bounded_by_iops():
    assert validate_values(with_gpu(rootVolumeIops=8000, rootVolumeThroughputMibps=2000)).gpu_nodes
    (problem,) = config_problems(with_gpu(rootVolumeIops=4000, rootVolumeThroughputMibps=2000))
    assert "exceeds 0.25 MiB/s per IOPS" in problem and "at most 1000" in problem


def test_gp3_bounds_are_the_ec2_api_models():
    """The config's bounds equal what EC2's own API model documents for a launch template's gp3 volume."""
    import re

    import boto3

    from llm_pd_eks.config import GpuNodesConfig

    shape = boto3.client("ec2", region_name="us-east-1").meta.service_model.shape_for(
        "LaunchTemplateEbsBlockDeviceRequest"
    )
    text = {k: re.sub(r"<[^>]+>", " ", shape.members[k].documentation) for k in ("Iops", "Throughput")}
    low, high = (
        int(x.replace(",", "")) for x in re.search(r"gp3\s*:\s*([\d,]+)\s*-\s*([\d,]+)\s*IOPS", text["Iops"]).groups()
    )
    mib = int(re.search(r"Maximum value of ([\d,]+)", text["Throughput"]).group(1).replace(",", ""))
    fields = GpuNodesConfig.model_fields

    def bounds(name: str) -> tuple[int, int]:
        meta = {type(m).__name__: m for m in fields[name].metadata}
        return meta["Ge"].ge, meta["Le"].le

    assert bounds("root_volume_iops") == (low, high)
    assert bounds("root_volume_throughput_mibps") == (125, mib)


# --- nodeadm NodeConfig in MIME user data ------------------------------------------------------------


def nodeadm_parts(lt) -> list[dict]:
    message = email.message_from_bytes(base64.b64decode(lt.inputs["userData"]))
    assert message.get_content_type() == "multipart/mixed"
    return [yaml.safe_load(p.get_payload()) for p in message.walk() if p.get_content_type() == NODEADM_CONTENT_TYPE]


def node_config_schema() -> dict:
    crd = yaml.safe_load((DATA / "nodeadm" / "node.eks.aws_nodeconfigs.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


def test_gpu_template_raid0s_the_instance_store(run: ProgramRun):
    instance = GPU_INSTANCE_TYPES[stack_config(run.stack).gpu_nodes.instance_type]
    assert instance.nvme_disks > 0
    (config,) = nodeadm_parts(run.one(LAUNCH_TEMPLATE, "gpu"))
    jsonschema.validate(config, node_config_schema())
    assert (config["apiVersion"], config["kind"]) == ("node.eks.aws/v1alpha1", "NodeConfig")
    assert config["spec"]["instance"]["localStorage"]["strategy"] == "RAID0"
    assert "userData" not in run.one(LAUNCH_TEMPLATE, "system").inputs


def test_node_config_schema_is_not_vacuous():
    bad = node_config(True)
    bad["spec"]["instance"]["localStorage"]["strategy"] = "RAID5"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, node_config_schema())
    assert "instance" not in node_config(False)["spec"]


def test_catalog_instance_store_matches_ec2_data():
    """Drift check against EC2's DescribeInstanceTypes data as moto ships it (InstanceStorageInfo)."""
    import moto

    data = os.path.join(os.path.dirname(moto.__file__), "ec2/resources/instance_types.json.gz")
    ec2_types = json.load(gzip.open(data))
    for name, t in GPU_INSTANCE_TYPES.items():
        (disks,) = ec2_types[name]["InstanceStorageInfo"]["Disks"]
        assert (t.nvme_disks, t.nvme_disk_gb) == (disks["Count"], disks["SizeInGB"]), name
        assert ec2_types[name]["InstanceStorageInfo"]["NvmeSupport"] == "required", name


# --- the EFA device plugin chart must know the GPU type -----------------------------------------------


def efa_chart_types() -> set[str]:
    values = yaml.safe_load((DATA / "eks-charts" / "aws-efa-k8s-device-plugin-values-v0.5.30.yaml").read_text())
    return set(values["supportedInstanceLabels"]["values"])


def test_pinned_efa_chart_schedules_on_every_catalog_type():
    assert stack_config("dev").device_plugins.efa_chart_version == "v0.5.30"  # the vendored chart's version
    assert set(GPU_INSTANCE_TYPES) <= efa_chart_types()


def test_efa_chart_older_than_the_type_needs_is_refused():
    assert validate_values({**with_gpu(instanceType="p5en.48xlarge"), "devicePlugins": {"efaChartVersion": "v0.5.6"}})
    (problem,) = config_problems(
        {**with_gpu(instanceType="p5en.48xlarge"), "devicePlugins": {"efaChartVersion": "v0.5.5"}}
    )
    assert problem.startswith("llm-pd-eks:devicePlugins.efaChartVersion: v0.5.5 does not list p5en.48xlarge")


def test_every_stack_runs_a_kubernetes_version_with_an_autoscaler_image(programs):
    for stack in ("dev", "staging", "prod"):
        cfg = stack_config(stack)
        assert cfg.autoscaler_image_tag().startswith(f"v{cfg.cluster.kubernetes_version}.")
    eks = programs("dev").one("eks:index:Cluster")
    assert eks.inputs["version"] == stack_config("dev").cluster.kubernetes_version


def test_gpu_nodes_reserve_the_huge_pages_the_worker_pods_request(run: ProgramRun):
    """A pod asking for more `hugepages-2Mi` than the kubelet found reserved at start stays Pending.

    Both sides are read from the plan: the boot script in the GPU launch template's user data and
    the requests of every worker group of the RayService (one worker pod per GPU node).
    """
    message = email.message_from_bytes(base64.b64decode(run.one(LAUNCH_TEMPLATE, "gpu").inputs["userData"]))
    (script,) = [p.get_payload() for p in message.walk() if p.get_content_type() == "text/x-shellscript"]
    pages = {int(v) for v in re.findall(r"vm\.nr_hugepages\s*=\s*(\d+)", script)}
    assert len(pages) == 1, script  # persisted and applied with the same count
    reserved_mib = pages.pop() * 2
    (rs,) = run.of_type(RAY_SERVICE)
    for group in rs.inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        container = group["template"]["spec"]["containers"][0]  # the Ray container
        for kind in ("requests", "limits"):
            asked = container["resources"][kind]["hugepages-2Mi"]
            assert asked.endswith("Mi") and int(asked[:-2]) <= reserved_mib, (group["groupName"], kind, asked)
