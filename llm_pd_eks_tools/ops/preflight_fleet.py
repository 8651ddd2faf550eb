"""Preflight's node-fleet items: is the AMI pin behind what EKS recommends, does EKS offer every pinned
add-on version, and does a Capacity Block's node group scale to zero before the block ends.

Each is a small function over an injected boto3 client returning one `Result`, like the rest of
preflight (llm_pd_eks_tools/ops/preflight_checks.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Optional

from llm_pd_eks.config import CapacityBlock, StackConfig
from llm_pd_eks.efa_gpu_nodes import GPU_AMI_TYPE
from llm_pd_eks.system_nodes import SYSTEM_AMI_TYPE
from llm_pd_eks.versions import EKS_ADDON_VERSIONS, NODE_AMI_RELEASE_VERSIONS, ami_release_date
from llm_pd_eks_tools.ops.preflight_result import FAIL, OK, UNKNOWN, WARN, Result, aws_errors, error_code, guarded

# The SSM public parameter tree of the EKS-optimized AMIs (EKS User Guide, "Retrieve recommended Amazon
# Linux AMI IDs": /aws/service/eks/optimized-ami/<kubernetes-version>/<ami-type>/recommended/<sub-parameter>;
# `release_version` is the sub-parameter a managed node group's `releaseVersion` takes).
SSM_AMI_PATHS = {
    GPU_AMI_TYPE: "amazon-linux-2023/x86_64/nvidia",
    SYSTEM_AMI_TYPE: "amazon-linux-2023/x86_64/standard",
}


def recommended_release_parameter(kubernetes_version: str, ami_type: str) -> str:
    """The SSM parameter holding EKS's recommended AMI release for a minor and AMI type."""
    return f"/aws/service/eks/optimized-ami/{kubernetes_version}/{SSM_AMI_PATHS[ami_type]}/recommended/release_version"


def check_ami_release(ssm, kubernetes_version: str) -> Result:
    """Warn when the pinned AMI release (llm_pd_eks/versions.py) is older than EKS's recommended one.

    A pin behind the recommendation misses the security and driver fixes of the newer AMIs; moving it
    is a previewed cut-over of both node groups (every node group's name is keyed by its release).
    """
    pinned = NODE_AMI_RELEASE_VERSIONS[kubernetes_version]
    behind: list[str] = []
    read: list[str] = []
    for ami_type in SSM_AMI_PATHS:
        name = recommended_release_parameter(kubernetes_version, ami_type)
        try:
            recommended = ssm.get_parameter(Name=name)["Parameter"]["Value"]
        except aws_errors() as exc:
            if error_code(exc) == "ParameterNotFound":
                return Result("ami-release", UNKNOWN, f"SSM has no {name} in this region")
            raise
        read.append(f"{ami_type} {recommended}")
        if ami_release_date(recommended) > ami_release_date(pinned):
            behind.append(f"{ami_type} recommends {recommended}")
    if behind:
        return Result(
            "ami-release",
            WARN,
            f"the AMI pin {pinned} is older than EKS's recommended release ({'; '.join(behind)}): move "
            "NODE_AMI_RELEASE_VERSIONS in llm_pd_eks/versions.py (docs/day-two.md, a node change is a cut-over)",
        )
    return Result("ami-release", OK, f"the AMI pin {pinned} is EKS's recommended release or newer ({', '.join(read)})")


def check_addon_versions(eks, kubernetes_version: str) -> Result:
    """FAIL when EKS does not offer a pinned add-on version for the stack's Kubernetes minor.

    `CreateAddon` with a version EKS does not offer fails mid-`up`, after the control plane exists.
    """
    missing: list[str] = []
    checked: list[str] = []
    for addon, version in EKS_ADDON_VERSIONS[kubernetes_version].items():
        answer = eks.describe_addon_versions(addonName=addon, kubernetesVersion=kubernetes_version)
        offered = {v["addonVersion"] for a in answer.get("addons", []) for v in a.get("addonVersions", [])}
        (checked if version in offered else missing).append(f"{addon} {version}")
    if missing:
        return Result(
            "addon-versions",
            FAIL,
            f"EKS offers no {', '.join(missing)} for Kubernetes {kubernetes_version}: pin one that "
            f"`aws eks describe-addon-versions --kubernetes-version {kubernetes_version}` lists "
            "(EKS_ADDON_VERSIONS in llm_pd_eks/versions.py)",
        )
    return Result(
        "addon-versions", OK, f"EKS offers every pinned add-on for {kubernetes_version}: {', '.join(checked)}"
    )


# EKS adds this scheduled action to the Auto Scaling group of a managed node group on a Capacity Block,
# 40 minutes before the reservation ends (EC2 starts terminating its instances 30 minutes before):
# EKS User Guide "Create a managed node group with Capacity Blocks for ML" (awsdocs/amazon-eks-user-guide
# latest/ug/ml/capacity-blocks-mng.adoc at 4d52b4d0), which asks that it be neither edited nor deleted.
EKS_BLOCK_SCALE_DOWN_ACTION = "Amazon EKS Node Group Capacity Scaledown Before Reservation End"


def gpu_node_group_asgs(autoscaling, cluster_name: str) -> list[str]:
    """The Auto Scaling groups of this cluster's GPU node groups, by the tags EKS puts on them."""
    pages = autoscaling.get_paginator("describe_auto_scaling_groups").paginate(
        Filters=[{"Name": "tag:eks:cluster-name", "Values": [cluster_name]}], PaginationConfig={"MaxItems": 200}
    )
    names = []
    for page in pages:
        for group in page.get("AutoScalingGroups", []):
            tags = {t["Key"]: t["Value"] for t in group.get("Tags", [])}
            if tags.get("eks:nodegroup-name", "").startswith(f"{cluster_name}-gpu-"):
                names.append(group["AutoScalingGroupName"])
    return names


def check_block_scale_down(autoscaling, config: StackConfig, cluster_name: str) -> Result:
    """A Capacity Block's GPU group must scale to zero before the block ends, so the pods are drained,
    not killed by EC2's termination. EKS schedules that itself on a managed node group; this reads the
    scheduled action on the group's Auto Scaling group once the group exists."""
    if not isinstance(config.gpu_nodes.capacity, CapacityBlock):
        return Result("gpu-block-end", OK, "no Capacity Block: nothing ends under the GPU nodes")
    groups = gpu_node_group_asgs(autoscaling, cluster_name)
    if not groups:
        return Result(
            "gpu-block-end",
            OK,
            f"no GPU node group of {cluster_name} yet: EKS schedules '{EKS_BLOCK_SCALE_DOWN_ACTION}' 40 min "
            "before the block ends when it creates the group; run preflight again after `up` to see it",
        )
    found: dict[str, Optional[datetime]] = {}
    for group in groups:
        actions = autoscaling.describe_scheduled_actions(AutoScalingGroupName=group).get(
            "ScheduledUpdateGroupActions", []
        )
        scale_down = [a for a in actions if a.get("DesiredCapacity") == 0 and a.get("StartTime")]
        found[group] = min((a["StartTime"] for a in scale_down), default=None)
    without = [g for g, when in found.items() if when is None]
    if without:
        return Result(
            "gpu-block-end",
            FAIL,
            f"Auto Scaling group(s) {', '.join(without)} of the Capacity Block's GPU nodes have no scheduled "
            f"scale-to-zero ('{EKS_BLOCK_SCALE_DOWN_ACTION}' is missing): EC2 will terminate the nodes with the "
            "serving pods on them at the block's end; restore it with `aws autoscaling "
            "put-scheduled-update-group-action --desired-capacity 0 --min-size 0` 40 min before the end",
        )
    return Result(
        "gpu-block-end",
        OK,
        "scheduled scale-to-zero before the block ends: "
        + ", ".join(f"{g} at {when.isoformat() if when else '?'}" for g, when in found.items()),
    )


def fleet_results(config: StackConfig, eks=None, ssm=None, autoscaling=None, cluster_name: str = "") -> list[Result]:
    """The three fleet items in CHECK_NAMES order; an item whose client is missing could not be checked."""
    version = config.cluster.kubernetes_version
    return [
        Result("ami-release", UNKNOWN, "no SSM client")
        if ssm is None
        else guarded("ami-release", lambda: check_ami_release(ssm, version)),
        Result("addon-versions", UNKNOWN, "no EKS client")
        if eks is None
        else guarded("addon-versions", lambda: check_addon_versions(eks, version)),
        Result("gpu-block-end", UNKNOWN, "no Auto Scaling client")
        if autoscaling is None
        else guarded("gpu-block-end", lambda: check_block_scale_down(autoscaling, config, cluster_name)),
    ]


__all__ = [
    "EKS_BLOCK_SCALE_DOWN_ACTION",
    "FAIL",
    "check_addon_versions",
    "check_ami_release",
    "check_block_scale_down",
    "fleet_results",
    "recommended_release_parameter",
]
