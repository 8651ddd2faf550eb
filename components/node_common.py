"""Pieces every launch template of this program shares."""

from __future__ import annotations

import pulumi_aws as aws

# IMDSv2 only; hop limit 1 keeps pods (one hop further) away from the node's credentials:
# workloads get AWS access through IRSA (the cluster's OIDC provider) instead.
IMDSV2 = aws.ec2.LaunchTemplateMetadataOptionsArgs(
    http_endpoint="enabled",
    http_tokens="required",
    http_put_response_hop_limit=1,
)


def root_volume(size_gib: int) -> aws.ec2.LaunchTemplateBlockDeviceMappingArgs:
    """An encrypted gp3 root volume (AL2023 EKS AMIs boot from /dev/xvda)."""
    return aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
        device_name="/dev/xvda",
        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
            volume_size=size_gib, volume_type="gp3", encrypted="true", delete_on_termination="true"
        ),
    )
