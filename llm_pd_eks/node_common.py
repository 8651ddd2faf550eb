"""Pieces every launch template and managed node group of this program shares."""

from __future__ import annotations

import base64
import hashlib
import json
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart
from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws
import yaml

from .config.nodes import NodeScaling
from .pulumi_sdk import input_type_to_dict, is_input_type

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
    """The template at the version this plan registered: its `latestVersion` output, a number, never
    `$Latest` (EKS resolves that when it launches, so a version written out of band would reach the
    nodes). Every template change also renames the group (`keyed_node_group_name`), so a new version
    only ever reaches a new group, never the running one."""
    return aws.eks.NodeGroupLaunchTemplateArgs(id=template.id, version=template.latest_version.apply(str))


# In-place updates that still reach a running group (EKS's UpdateNodegroupVersion, started outside this
# program: every node change here renames the group instead) replace one node at a time and
# launch nothing extra: MINIMAL "terminates the old instances before launching the new instances",
# DEFAULT first adds nodes (EKS API NodegroupUpdateConfig `updateStrategy`; pulumi-aws 7.51.1
# NodeGroupUpdateConfigArgs `update_strategy`: `MINIMAL` and `DEFAULT`). GPU capacity is reserved or
# scarce, so no surge that might not launch.
IN_PLACE_UPDATE = aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1, update_strategy="MINIMAL")

EKS_NODE_GROUP_NAME_MAX = 63  # EKS CreateNodegroup `nodegroupName`


def _plain(value: Any) -> Any:
    """JSON for a resolved input: pulumi input-type classes as their property dicts."""
    if is_input_type(type(value)):
        return input_type_to_dict(value)
    return str(value)


def content_key(content: Any) -> str:
    """8 hex digits of everything in `content` (resolved inputs), stable across runs."""
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=_plain).encode()).hexdigest()[:8]


def node_group_name(cluster_name: str, role: str, key: str) -> str:
    """`<cluster>-<role>-<key>`, the cluster's name shortened to fit EKS's 63 characters."""
    room = EKS_NODE_GROUP_NAME_MAX - len(role) - len(key) - 2
    return f"{cluster_name[:room]}-{role}-{key}"


def keyed_node_group_name(cluster_name: str, role: str, node_content: Mapping[str, Any]) -> pulumi.Output[str]:
    """The node group's EKS name, keyed by everything that shapes its nodes.

    `node_content` holds the launch template's own arguments (the dict it is built from, so nothing
    it says can be left out: instance type, user data, interfaces and security groups, volumes,
    tags, placement, capacity) and the node group's node-shaping inputs (AMI type, Kubernetes
    version, AMI release, capacity type, subnets). EKS cannot rename a node group, so a changed key
    replaces the group: "by default, to minimize downtime, Pulumi creates new instances of resources
    before deleting old ones" (https://www.pulumi.com/docs/iac/concepts/options/deletebeforereplace/),
    and the engine runs those deletions at the end of `up`, after the dependents are updated; an
    `up` that fails half-way leaves them pending, and the next `up` runs them first (pulumi/pulumi#9979,
    "completing deletion from previous update"). Scaling,
    labels, taints and the group's own tags are applied in place and are not in the key.
    Outputs (security-group ids, the placement group's name) are resolved first, so a replaced
    security group renames the group too; while one is unknown in a preview, so is the name.
    """
    return pulumi.Output.from_input(dict(node_content)).apply(
        lambda resolved: node_group_name(cluster_name, role, content_key(resolved))
    )
