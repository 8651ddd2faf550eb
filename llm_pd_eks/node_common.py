"""Pieces every launch template and managed node group of this program shares."""

from __future__ import annotations

import base64
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart
from typing import Any, Optional, Sequence

import pulumi
import pulumi_aws as aws
import yaml

from .config.nodes import NodeScaling

# IMDSv2 only; hop limit 1 keeps pods (one hop further) away from the node's credentials:
# workloads get AWS access through IRSA (the cluster's OIDC provider) instead.
IMDSV2 = aws.ec2.LaunchTemplateMetadataOptionsArgs(
    http_endpoint="enabled",
    http_tokens="required",
    http_put_response_hop_limit=1,
)


def root_volume(
    size_gib: int, iops: Optional[int] = None, throughput_mibps: Optional[int] = None
) -> aws.ec2.LaunchTemplateBlockDeviceMappingArgs:
    """An encrypted gp3 root volume (AL2023 EKS AMIs boot from /dev/xvda).

    gp3 gives 3,000 IOPS and 125 MiB/s unless more is provisioned; config validation keeps the
    pair inside gp3's limits.
    """
    return aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
        device_name="/dev/xvda",
        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
            volume_size=size_gib,
            volume_type="gp3",
            encrypted="true",
            delete_on_termination="true",
            iops=iops,
            throughput=throughput_mibps,
        ),
    )


def instance_tags(tags: dict[str, str], name: str) -> aws.ec2.LaunchTemplateTagSpecificationArgs:
    """The stack's tags plus `Name` on every instance the template launches (the console shows it)."""
    return aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type="instance", tags={**tags, "Name": name})


def volume_tags(tags: dict[str, str], name: str) -> aws.ec2.LaunchTemplateTagSpecificationArgs:
    """The same tags on the root volume the template launches with: an instance's tags do not reach its
    volumes (EC2 tags each resource type a tag specification names), and the cost audit filters Cost
    Explorer by the `project` and `stack` tags, so an untagged root volume is spend it never sees."""
    return aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type="volume", tags={**tags, "Name": name})


def node_group_options(parent: pulumi.Resource, depends_on: list[pulumi.Resource]) -> pulumi.ResourceOptions:
    """Options of every managed node group here: parented, ordered, `desiredSize` left to the autoscaler."""
    return pulumi.ResourceOptions(parent=parent, depends_on=depends_on, ignore_changes=ignore_desired_size())


def scaling_config(cfg: NodeScaling) -> aws.eks.NodeGroupScalingConfigArgs:
    return aws.eks.NodeGroupScalingConfigArgs(
        min_size=cfg.min_size, desired_size=cfg.desired_size, max_size=cfg.max_size
    )


def ignore_desired_size() -> list[str]:
    """The node autoscaler owns `desiredSize` after creation; `pulumi up` must not reset it.

    min/max stay under Pulumi's control (EKS refuses a desired size outside them).
    """
    return ["scalingConfig.desiredSize"]


# --- nodeadm user data --------------------------------------------------------------------------

NODEADM_CONTENT_TYPE = "application/node.eks.aws"


def node_config(local_storage_raid0: bool) -> dict[str, Any]:
    """A nodeadm `NodeConfig` with only what this program adds; EKS merges in the cluster details.

    `localStorage.strategy: RAID0` makes nodeadm stripe every instance-store NVMe disk into one
    array and put /var/lib/kubelet, /var/lib/containerd and /var/log/pods on it, so images and
    model weights are read from local NVMe instead of the gp3 root volume.
    """
    spec: dict[str, Any] = {}
    if local_storage_raid0:
        spec["instance"] = {"localStorage": {"strategy": "RAID0"}}
    return {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": spec}


def hugepages_script(mib: int) -> str:
    """A boot script that reserves `mib` MiB of 2 MiB huge pages before the kubelet starts.

    The kubelet advertises `hugepages-2Mi` as the kernel has reserved them when it starts, and a pod
    that requests more than is allocatable stays Pending. libfabric's EFA provider takes its bounce
    buffers from huge pages (ofiwg/libfabric prov/efa/docs/overview.md), so the EFA worker pods
    request them; the EFA installer's own boot-time reservation depends on the core count, so the
    amount the pods request is reserved here explicitly. On AL2023, cloud-init runs user-data shell
    parts before `nodeadm-run` starts the kubelet.
    """
    pages = mib // 2
    return (
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        f"# {mib} MiB of 2 MiB huge pages for the EFA worker pod (llm_pd_eks/catalog.py efa_hugepages_2mi_mib)\n"
        f"echo 'vm.nr_hugepages = {pages}' > /etc/sysctl.d/90-llm-pd-eks-hugepages.conf\n"
        f"sysctl -w vm.nr_hugepages={pages}\n"
    )


def nodeadm_user_data(config: dict[str, Any], scripts: Sequence[str] = ()) -> str:
    """Base64 MIME multipart user data: one `application/node.eks.aws` part, then any shell scripts.

    For managed node groups on an EKS AMI (no custom image), EKS requires MIME multipart user data
    in the launch template and merges its own NodeConfig part with this one
    (https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html#launch-template-user-data).
    The boundary is fixed so the template (and the plan) is deterministic.
    """
    message = MIMEMultipart("mixed", boundary="LLMPDEKS")
    part = MIMENonMultipart(*NODEADM_CONTENT_TYPE.split("/"))
    part.set_payload("---\n" + yaml.safe_dump(config, sort_keys=False))
    message.attach(part)
    for script in scripts:
        shell = MIMENonMultipart("text", "x-shellscript")
        shell.set_payload(script)
        message.attach(shell)
    return base64.b64encode(message.as_string().encode()).decode()


def launch_template_ref(template: aws.ec2.LaunchTemplate) -> aws.eks.NodeGroupLaunchTemplateArgs:
    """The template at its latest version, so a template change rolls the node group."""
    return aws.eks.NodeGroupLaunchTemplateArgs(id=template.id, version=template.latest_version.apply(str))
