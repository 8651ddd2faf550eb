"""Preflight's fleet items: the AMI pin against EKS's recommended release (SSM), the add-on pins against
what EKS offers, and a Capacity Block's scheduled scale-to-zero.

SSM and Auto Scaling are served by moto (5.2.5) on a loopback port, reached through AWS_ENDPOINT_URL as a
real endpoint would be. moto refuses writes under `/aws/` (AWS's reserved public tree), so the test
seeds EKS's public parameter into the in-process server's backend, where AWS publishes it. EKS's
DescribeAddonVersions, which moto lacks, is a botocore Stubber on a real client (shapes checked).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import boto3
import pytest
from botocore.stub import Stubber
from helpers import ROOT, engine_config_with
from moto.server import ThreadedMotoServer
from moto.ssm.models import Parameter, ssm_backends

from llm_pd_eks.config import validate_engine_config
from llm_pd_eks.efa_gpu_nodes import GPU_AMI_TYPE
from llm_pd_eks.versions import EKS_ADDON_VERSIONS, NODE_AMI_RELEASE_VERSIONS
from llm_pd_eks_tools.ops import preflight
from llm_pd_eks_tools.ops.preflight_fleet import (
    EKS_BLOCK_SCALE_DOWN_ACTION,
    SSM_AMI_PATHS,
    check_addon_versions,
    check_ami_release,
    check_block_scale_down,
    recommended_release_parameter,
)

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"  # prod's region
VERSION = "1.35"
PINNED = NODE_AMI_RELEASE_VERSIONS[VERSION]


@pytest.fixture(scope="module")
def moto_endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_endpoint, monkeypatch, tmp_path):
    env = {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    ssm_backends[ACCOUNT][REGION]._parameters.clear()
    return env


def publish_recommended(release: str, version: str = VERSION) -> None:
    """What AWS publishes in the public SSM tree for each AMI type of a minor."""
    backend = ssm_backends[ACCOUNT][REGION]
    for ami_type in SSM_AMI_PATHS:
        name = recommended_release_parameter(version, ami_type)
        backend._parameters[name].append(
            Parameter(ACCOUNT, name, release, "String", None, None, None, dt.datetime.now(dt.UTC), 1, "text")
        )


def newer(release: str) -> str:
    patch, date = release.rsplit("-", 1)
    return f"{patch}-{int(date) + 10000:08d}"  # a year on


def test_the_parameter_is_the_gpu_amis_recommended_release():
    assert recommended_release_parameter("1.35", GPU_AMI_TYPE) == (
        "/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/recommended/release_version"
    )


def test_a_pin_older_than_the_recommended_release_warns(aws):
    publish_recommended(newer(PINNED))
    result = check_ami_release(boto3.client("ssm", region_name=REGION), VERSION)
    assert result.status == "warning"
    assert PINNED in result.detail and newer(PINNED) in result.detail and "NODE_AMI_RELEASE_VERSIONS" in result.detail


def test_a_pin_at_the_recommended_release_passes(aws):
    publish_recommended(PINNED)
    result = check_ami_release(boto3.client("ssm", region_name=REGION), VERSION)
    assert result.status == "ok" and PINNED in result.detail


def test_no_parameter_cannot_be_checked(aws):
    result = check_ami_release(boto3.client("ssm", region_name=REGION), VERSION)
    assert result.status == "could-not-check" and "has no /aws/service/eks/optimized-ami/1.35/" in result.detail


def test_the_cli_reads_the_recommended_release(aws):
    publish_recommended(newer(PINNED))
    env = {**os.environ, **aws, "PYTHONPATH": str(ROOT)}
    # the CLI's own process reaches the same in-process server through the endpoint
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.ops.preflight", "--stack", "prod", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    checks = {c["check"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["ami-release"]["status"] == "warning"
    assert newer(PINNED) in checks["ami-release"]["detail"]


def stubbed_addons(offered: dict[str, list[str]]):
    client = boto3.client("eks", region_name=REGION)
    stub = Stubber(client)
    for addon in EKS_ADDON_VERSIONS[VERSION]:
        stub.add_response(
            "describe_addon_versions",
            {"addons": [{"addonName": addon, "addonVersions": [{"addonVersion": v} for v in offered.get(addon, [])]}]},
            {"addonName": addon, "kubernetesVersion": VERSION},
        )
    stub.activate()
    return client, stub


def test_every_pinned_addon_offered_passes():
    eks, stub = stubbed_addons({a: [v, "v0.0.1-eksbuild.1"] for a, v in EKS_ADDON_VERSIONS[VERSION].items()})
    result = check_addon_versions(eks, VERSION)
    stub.assert_no_pending_responses()
    assert result.status == "ok" and all(v in result.detail for v in EKS_ADDON_VERSIONS[VERSION].values())


def test_a_pin_eks_does_not_offer_fails_before_up():
    offered = {a: [v] for a, v in EKS_ADDON_VERSIONS[VERSION].items()}
    offered["coredns"] = ["v1.99.0-eksbuild.1"]
    eks, _ = stubbed_addons(offered)
    result = check_addon_versions(eks, VERSION)
    assert result.status == "FAIL"
    assert (
        f"coredns {EKS_ADDON_VERSIONS[VERSION]['coredns']}" in result.detail
        and "describe-addon-versions" in result.detail
    )


# --- a Capacity Block ends: EKS's scheduled scale-to-zero -----------------------------------------

CLUSTER = "llm-pd-eks-prod"
BLOCK = {"capacityBlockId": "cr-0123456789abcdef0"}


def block_config():
    return validate_engine_config(*engine_config_with("prod", "gpuNodes", capacity=BLOCK, minSize=0, desiredSize=0))


def gpu_asg(autoscaling, ec2, name: str) -> None:
    """An Auto Scaling group tagged as EKS tags a managed node group's."""
    image = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={"ImageId": image})
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": name},
        MinSize=0,
        MaxSize=2,
        AvailabilityZones=["us-east-1c"],
        Tags=[
            {"Key": "eks:cluster-name", "Value": CLUSTER, "PropagateAtLaunch": False},
            {"Key": "eks:nodegroup-name", "Value": f"{CLUSTER}-gpu-0123abcd", "PropagateAtLaunch": False},
        ],
    )


def test_block_end_without_the_scheduled_scale_down_fails(aws):
    autoscaling, ec2 = boto3.client("autoscaling", region_name=REGION), boto3.client("ec2", region_name=REGION)
    gpu_asg(autoscaling, ec2, "eks-gpu-missing")
    result = check_block_scale_down(autoscaling, block_config(), CLUSTER)
    assert (
        result.status == "FAIL" and "eks-gpu-missing" in result.detail and EKS_BLOCK_SCALE_DOWN_ACTION in result.detail
    )
    autoscaling.put_scheduled_update_group_action(
        AutoScalingGroupName="eks-gpu-missing",
        ScheduledActionName=EKS_BLOCK_SCALE_DOWN_ACTION,
        StartTime=dt.datetime(2027, 1, 5, 11, 20, tzinfo=dt.UTC),
        MinSize=0,
        MaxSize=0,
        DesiredCapacity=0,
    )
    result = check_block_scale_down(autoscaling, block_config(), CLUSTER)
    assert result.status == "ok" and "eks-gpu-missing at 2027-01-05T11:20" in result.detail
    autoscaling.delete_auto_scaling_group(AutoScalingGroupName="eks-gpu-missing", ForceDelete=True)


def test_before_the_group_exists_it_says_eks_will_schedule_it(aws):
    result = check_block_scale_down(boto3.client("autoscaling", region_name=REGION), block_config(), "llm-pd-eks-none")
    assert result.status == "ok" and "EKS schedules" in result.detail and "40 min" in result.detail


def test_on_demand_has_no_block_to_end():
    config = validate_engine_config(*engine_config_with("prod", "gpuNodes"))
    assert check_block_scale_down(None, config, CLUSTER).status == "ok"


def test_run_checks_lists_the_fleet_items_last():
    assert preflight.CHECK_NAMES[-3:] == ("ami-release", "addon-versions", "gpu-block-end")
