"""The preflight checks themselves: each a small function over injected boto3 clients returning one
`Result` (ok / FAIL / could-not-check with the reason), and `run_checks`, which maps a validated
`StackConfig` onto them. The command line, its deadline and exit codes: `llm_pd_eks_tools/ops/preflight.py`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import StackConfig
from llm_pd_eks.config.base import stack_cluster_name
from llm_pd_eks_tools.ops.preflight_capacity import check_capacity
from llm_pd_eks_tools.ops.preflight_result import FAIL, OK, UNKNOWN, WARN, Result, aws_errors, error_code, guarded

# Service Quotas codes (service code "ec2") not carried by the GPU catalog.
EIP_QUOTA_CODE = "L-0263D0A3"  # EC2-VPC Elastic IPs
STANDARD_VCPU_QUOTA_CODE = "L-1216C47A"  # Running On-Demand Standard (A, C, D, H, I, M, R, T, Z)
STANDARD_FAMILIES = "acdhimrtz"
# The items `run_checks` reports, in order.
CHECK_NAMES = (
    "availability-zones",
    "gpu-offering",
    "gpu-efa",
    "system-offering",
    "gpu-vcpu-quota",
    "system-vcpu-quota",
    "eip-quota",
    "gpu-capacity",
    "eks-version",
    "ami-release",
    "addon-versions",
    "gpu-block-end",
)


# --- EC2 lookups ----------------------------------------------------------------------------


def region_azs(ec2) -> dict[str, str]:
    """AZ name -> state, for the client's region (Local/Wavelength zones not opted in are absent)."""
    zones = ec2.describe_availability_zones()["AvailabilityZones"]
    return {z["ZoneName"]: z.get("State", "") for z in zones}


def offering_azs(ec2, instance_type: str) -> set[str]:
    """The AZs of the client's region where `instance_type` is offered."""
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )
    return {
        o["Location"] for page in pages for o in page["InstanceTypeOfferings"] if o["InstanceType"] == instance_type
    }


def instance_type_info(ec2, instance_type: str) -> Optional[dict[str, Any]]:
    """DescribeInstanceTypes for one type; None when the region does not know it."""
    try:
        found = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    except aws_errors() as exc:
        if error_code(exc) == "InvalidInstanceType":
            return None
        raise
    return found[0] if found else None


def efa_interfaces(info: dict[str, Any]) -> Optional[int]:
    """MaximumEfaInterfaces of a DescribeInstanceTypes entry; None when EFA is unsupported."""
    network = info.get("NetworkInfo", {})
    if not network.get("EfaSupported"):
        return None
    return network.get("EfaInfo", {}).get("MaximumEfaInterfaces")


# --- checks ---------------------------------------------------------------------------------


def check_availability_zones(ec2, region: str, azs: Iterable[str]) -> Result:
    """Every configured AZ exists in the region and is available."""
    known = region_azs(ec2)
    missing = [az for az in azs if az not in known]
    unavailable = [az for az in azs if az in known and known[az] != "available"]
    if missing or unavailable:
        parts = []
        if missing:
            parts.append(f"{', '.join(missing)} not in {region}")
        if unavailable:
            parts.append(", ".join(f"{az} is {known[az]}" for az in unavailable))
        return Result(
            "availability-zones", FAIL, f"{'; '.join(parts)} (the region has {', '.join(sorted(known)) or 'no AZs'})"
        )
    return Result("availability-zones", OK, f"{', '.join(azs)} exist in {region}")


def check_offered(ec2, check: str, instance_type: str, azs: list[str]) -> Result:
    """`instance_type` is offered in every AZ of `azs`; when not, name the AZs that do offer it."""
    offered = offering_azs(ec2, instance_type)
    missing = [az for az in azs if az not in offered]
    if missing:
        where = ", ".join(sorted(offered)) if offered else "none in this region"
        return Result(
            check, FAIL, f"{instance_type} is not offered in {', '.join(missing)}; AZs that offer it: {where}"
        )
    return Result(check, OK, f"{instance_type} is offered in {', '.join(azs)}")


def check_efa(ec2, instance_type: str, expected_interfaces: int) -> Result:
    """The GPU type supports EFA with as many interfaces as the catalog builds its launch template with."""
    info = instance_type_info(ec2, instance_type)
    if info is None:
        return Result("gpu-efa", FAIL, f"{instance_type} does not exist in this region")
    actual = efa_interfaces(info)
    if actual is None:
        return Result("gpu-efa", FAIL, f"{instance_type} does not support EFA")
    if actual != expected_interfaces:
        return Result(
            "gpu-efa",
            FAIL,
            f"{instance_type} has {actual} EFA interfaces, llm_pd_eks/catalog.py says "
            f"{expected_interfaces}: fix the catalog",
        )
    return Result("gpu-efa", OK, f"{instance_type} supports EFA with {actual} interface(s), as catalogued")


class _QuotaUnavailable(Exception):
    """The quota exists but Service Quotas returned no value for it (ErrorReason)."""


def quota_value(quotas, quota_code: str) -> tuple[float, str]:
    """The applied value of an ec2 quota, falling back to the AWS default where none is applied."""
    try:
        quota = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=quota_code)["Quota"]
        source = "applied"
    except aws_errors() as exc:
        if error_code(exc) != "NoSuchResourceException":
            raise
        quota = quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=quota_code)["Quota"]
        source = "AWS default"
    if "Value" not in quota:
        reason = quota.get("ErrorReason", {}).get("ErrorMessage", "no value returned")
        raise _QuotaUnavailable(f"{quota_code}: {reason}")
    name = quota.get("QuotaName", quota_code)
    return float(quota["Value"]), f"{name} ({quota_code}, {source})"


def check_vcpu_quota(quotas, check: str, quota_code: str, nodes: int, vcpus_per_node: int, surge: int = 0) -> Result:
    """The on-demand vCPU quota covers `nodes` (+ `surge` while a template change runs both node
    groups) x `vcpus_per_node` (usage by other instances not counted)."""
    total = nodes + surge
    needed = total * vcpus_per_node
    counted = f"{nodes} nodes" if not surge else f"{total} nodes (maxSize {nodes} + {surge} for a blue/green roll)"
    try:
        value, label = quota_value(quotas, quota_code)
    except _QuotaUnavailable as exc:
        return Result(check, UNKNOWN, str(exc))
    if value < needed:
        return Result(
            check,
            FAIL,
            f"{label} is {value:g} vCPUs; {counted} x {vcpus_per_node} vCPUs need {needed}: "
            f"request an increase in Service Quotas",
        )
    return Result(
        check,
        OK,
        f"{label} is {value:g} vCPUs >= {counted} x {vcpus_per_node} = {needed} needed "
        f"(if nothing else in the region uses it)",
    )


def check_eip_quota(ec2, quotas, nat_gateways: int) -> Result:
    """The Elastic IP quota leaves room for one address per NAT gateway beside those already allocated."""
    try:
        value, label = quota_value(quotas, EIP_QUOTA_CODE)
    except _QuotaUnavailable as exc:
        return Result("eip-quota", UNKNOWN, str(exc))
    in_use = len(ec2.describe_addresses()["Addresses"])
    if in_use + nat_gateways > value:
        return Result(
            "eip-quota",
            FAIL,
            f"{label} is {value:g}; {in_use} already allocated + {nat_gateways} for NAT gateways "
            f"= {in_use + nat_gateways}",
        )
    return Result("eip-quota", OK, f"{label} is {value:g} >= {in_use} allocated + {nat_gateways} for NAT gateways")


def nat_gateway_count(config: StackConfig) -> int:
    return 1 if config.network.nat_gateways == "single" else len(config.network.availability_zones)


def standard_quota_code(instance_type: str) -> Optional[str]:
    """The Standard on-demand vCPU quota covers families starting A, C, D, H, I, M, R, T, Z."""
    return STANDARD_VCPU_QUOTA_CODE if instance_type[:1] in STANDARD_FAMILIES else None


def run_checks(
    config: StackConfig,
    ec2,
    quotas,
    catalog=GPU_INSTANCE_TYPES,
    eks=None,
    stack: Optional[str] = None,
    ssm=None,
    autoscaling=None,
) -> list[Result]:
    """Every preflight item for `config`, in a fixed order; each failure stays in its own item."""
    gpu = catalog[config.gpu_nodes.instance_type]
    azs = list(config.network.availability_zones)
    system = config.system_nodes
    results = [
        guarded("availability-zones", lambda: check_availability_zones(ec2, config.region, azs)),
        guarded(
            "gpu-offering", lambda: check_offered(ec2, "gpu-offering", gpu.name, [config.gpu_nodes.availability_zone])
        ),
        guarded("gpu-efa", lambda: check_efa(ec2, gpu.name, gpu.efa_interfaces)),
        guarded("system-offering", lambda: check_offered(ec2, "system-offering", system.instance_type, azs)),
        guarded(
            "gpu-vcpu-quota",
            lambda: check_vcpu_quota(
                quotas,
                "gpu-vcpu-quota",
                gpu.family_quota_code,
                config.gpu_nodes.max_size,
                gpu.vcpus,
                config.gpu_nodes.roll_surge(),
            ),
        ),
    ]
    system_code = standard_quota_code(system.instance_type)

    def system_quota() -> Result:
        # System types are not in the catalog: their vCPU count comes from EC2 itself.
        assert system_code  # only scheduled when the type has a standard quota
        found = instance_type_info(ec2, system.instance_type)
        if found is None:
            return Result("system-vcpu-quota", UNKNOWN, f"{system.instance_type} is unknown in this region")
        vcpus = found["VCpuInfo"]["DefaultVCpus"]
        return check_vcpu_quota(quotas, "system-vcpu-quota", system_code, system.max_size, vcpus)

    if system_code:
        results.append(guarded("system-vcpu-quota", system_quota))
    else:
        results.append(
            Result("system-vcpu-quota", UNKNOWN, f"no on-demand quota code known for the {system.instance_type} family")
        )
    results.append(guarded("eip-quota", lambda: check_eip_quota(ec2, quotas, nat_gateway_count(config))))

    results.append(guarded("gpu-capacity", lambda: check_capacity(ec2, config, stack=stack)))
    if eks is None:
        results.append(Result("eks-version", UNKNOWN, "no EKS client"))
    else:
        results.append(guarded("eks-version", lambda: check_eks_version(eks, config.cluster.kubernetes_version)))
    from llm_pd_eks_tools.ops.preflight_fleet import fleet_results  # it builds on this module's Result

    results += fleet_results(config, eks, ssm, autoscaling, stack_cluster_name(stack) if stack else "")
    return results


# --- the EKS version (the capacity check: preflight_capacity.py) ----------------------


def check_eks_version(eks, version: str) -> Result:
    """Warn when the configured Kubernetes version is in EKS extended support (paid per cluster hour)."""
    found = eks.describe_cluster_versions(clusterVersions=[version]).get("clusterVersions", [])
    if not found:
        return Result("eks-version", FAIL, f"EKS does not offer Kubernetes {version} in this region")
    info = found[0]
    status = info.get("versionStatus") or info.get("status") or "unknown"
    end_std = info.get("endOfStandardSupportDate")
    end_ext = info.get("endOfExtendedSupportDate")

    def day(value) -> str:
        return value.date().isoformat() if hasattr(value, "date") else str(value)

    if status == "STANDARD_SUPPORT":
        return Result("eks-version", OK, f"Kubernetes {version} is in standard support until {day(end_std)}")
    if status == "EXTENDED_SUPPORT":
        return Result(
            "eks-version",
            WARN,
            f"Kubernetes {version} is in EXTENDED support (extra cost per cluster hour) since "
            f"{day(end_std)}, ends {day(end_ext)}: raise cluster.kubernetesVersion",
        )
    return Result("eks-version", FAIL, f"Kubernetes {version} has EKS status {status}")


# --- stack config and clients ---------------------------------------------------------------
