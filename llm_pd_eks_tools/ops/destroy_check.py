"""Before `pulumi destroy`: what in the stack's VPC the stack does not own, and would stop its subnets,
security groups and VPC from being deleted.

EC2 refuses to delete a subnet that still holds a network interface, a security group an interface
still uses, and a VPC with anything left in it (DeleteSubnet / DeleteSecurityGroup / DeleteVpc:
DependencyViolation). `destroy` then fails after the cluster is gone, with the VPC half deleted. What
typically stays behind in an EKS VPC is not in the Pulumi state:
- network interfaces the VPC CNI attached to nodes for pods (description `aws-K8S-...`), left
  `available` when a node was terminated before its aws-node pod could detach them;
- a load balancer a Kubernetes `Service` of type LoadBalancer asked for (its interfaces' description
  starts `ELB `), when the Service was not deleted before the cluster;
- GuardDuty Runtime Monitoring's automated agent: GuardDuty creates an interface endpoint for
  `guardduty-data` and a security group in every VPC of a monitored EKS cluster, tagged
  `GuardDutyManaged: true` (Amazon GuardDuty User Guide, "Managing automated security agent for Amazon
  EKS" and "Delete a VPC with a GuardDuty-created endpoint": tag the VPC `GuardDutyExcluded: true`, then
  delete the endpoint and its security group).

    python -m llm_pd_eks_tools.ops.destroy_check --stack prod [--state export.json]

It reads the VPC and every resource id from the state (`pulumi stack export`), then EC2 (standard
credential chain, the stack's region). Exit 0 nothing in the way, 1 something is (each with what to do),
2 bad input, 5 EC2 could not be read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import boto3

from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, exit_with, one_line
from llm_pd_eks_tools.gates.pending_deletes import read_state
from llm_pd_eks_tools.ops.preflight import client_config, load_config
from llm_pd_eks_tools.ops.preflight_result import aws_errors, describe_error

VPC_TYPE = "aws:ec2/vpc:Vpc"
GUARDDUTY_TAG = "GuardDutyManaged"


@dataclass(frozen=True)
class Blocker:
    what: str  # the EC2 resource, with its id
    fix: str  # what to do before `destroy`


def stack_vpc_and_ids(export: dict[str, Any]) -> tuple[Optional[str], set[str]]:
    """(the stack's VPC id, every resource id in the state)."""
    resources = (export.get("deployment") or {}).get("resources") or []
    ids = {str(r["id"]) for r in resources if r.get("id")}
    vpcs = [str(r["id"]) for r in resources if r.get("type") == VPC_TYPE and r.get("id") and not r.get("delete")]
    return (vpcs[0] if vpcs else None), ids


def _tags(item: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags") or item.get("TagSet") or []}


def blockers(ec2, vpc_id: str, owned: set[str]) -> list[Blocker]:
    """What EC2 holds in `vpc_id` that the state does not own and that blocks deleting the VPC."""
    vpc = [{"Name": "vpc-id", "Values": [vpc_id]}]
    found: list[Blocker] = []
    endpoints = ec2.describe_vpc_endpoints(Filters=vpc).get("VpcEndpoints", [])
    for endpoint in endpoints:
        endpoint_id = endpoint["VpcEndpointId"]
        if endpoint_id in owned:
            continue
        if _tags(endpoint).get(GUARDDUTY_TAG) == "true":
            found.append(
                Blocker(
                    f"VPC endpoint {endpoint_id} ({endpoint.get('ServiceName', '?')}), created by GuardDuty",
                    f"tag the VPC so GuardDuty does not recreate it (aws ec2 create-tags --resources {vpc_id} "
                    "--tags Key=GuardDutyExcluded,Value=true), then aws ec2 delete-vpc-endpoints "
                    f"--vpc-endpoint-ids {endpoint_id} and delete its GuardDutyManagedSecurityGroup",
                )
            )
        else:
            found.append(
                Blocker(
                    f"VPC endpoint {endpoint_id} ({endpoint.get('ServiceName', '?')}), not this stack's",
                    f"find who created it; aws ec2 delete-vpc-endpoints --vpc-endpoint-ids {endpoint_id}",
                )
            )
    endpoint_enis = {eni for e in endpoints for eni in e.get("NetworkInterfaceIds") or []}
    pages = ec2.get_paginator("describe_network_interfaces").paginate(Filters=vpc, PaginationConfig={"MaxItems": 5000})
    for page in pages:
        for eni in page.get("NetworkInterfaces", []):
            eni_id, description = eni["NetworkInterfaceId"], eni.get("Description") or ""
            if eni_id in owned or eni_id in endpoint_enis or eni.get("InterfaceType") == "nat_gateway":
                continue  # the stack's own, an endpoint's (above), a NAT gateway's (deleted with it)
            where = f"network interface {eni_id} in {eni.get('SubnetId', '?')} ({eni.get('Status', '?')}"
            if description.startswith("aws-K8S-"):
                found.append(
                    Blocker(
                        f"{where}, left by the VPC CNI: {one_line(description, 60)})",
                        f"once no node uses it: aws ec2 delete-network-interface --network-interface-id {eni_id}",
                    )
                )
            elif description.startswith("ELB "):
                found.append(
                    Blocker(
                        f"{where}, of load balancer {description[4:]})",
                        "delete the Kubernetes Service of type LoadBalancer that asked for it (or the load "
                        "balancer itself); its interfaces go with it",
                    )
                )
            elif eni.get("Status") == "available":
                found.append(
                    Blocker(
                        f"{where}, detached: {one_line(description, 60) or 'no description'})",
                        f"aws ec2 delete-network-interface --network-interface-id {eni_id}",
                    )
                )
    return found


def main(argv: Optional[list[str]] = None, ec2=None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.ops.destroy_check", description=__doc__.split("\n")[0])
    parser.add_argument("--stack", default="dev", help="stack name (`pulumi stack export --stack`)")
    parser.add_argument("--state", help="a saved `pulumi stack export` (default: export it now)")
    parser.add_argument("--region", help="the stack's region (default: the stack file's aws:region)")
    args = parser.parse_args(argv)
    vpc_id, owned = stack_vpc_and_ids(read_state(args.state, args.stack))
    if vpc_id is None:
        print(f"destroy-check {args.stack}: the state holds no VPC; nothing to check")
        return Exit.OK
    if ec2 is None:
        region = args.region or load_config(args.stack.rsplit("/", 1)[-1]).region
        ec2 = boto3.session.Session().client("ec2", region_name=region, config=client_config())
    try:
        found = blockers(ec2, vpc_id, owned)
    except aws_errors() as exc:
        raise ToolError(Exit.UNVERIFIED, f"EC2 could not be read: {describe_error(exc)}") from None
    if not found:
        print(f"destroy-check {args.stack}: nothing outside the state holds {vpc_id}; `destroy` may run")
        return Exit.OK
    print(f"destroy-check {args.stack}: {len(found)} thing(s) outside the state would stop {vpc_id}'s deletion:")
    for blocker in found:
        print(f"  {blocker.what}\n    fix: {blocker.fix}")
    return Exit.FAILED


if __name__ == "__main__":
    exit_with("destroy-check", main)
