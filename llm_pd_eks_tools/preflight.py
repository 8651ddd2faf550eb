"""Can this stack be deployed in this account and region? Ask AWS before `pulumi up` does.

The expensive surprises of this setup (no GPU capacity type in the chosen AZ, a vCPU quota of
zero for P instances, too few Elastic IPs for per-AZ NAT) surface twenty minutes into an
`up`. Each check here is a small function over injected boto3 clients returning one `Result`
(ok / FAIL / could-not-check with the reason); `run_checks` maps the validated `StackConfig`
onto them and `main` is the thin CLI:

    python -m llm_pd_eks_tools.preflight --stack dev [--json] [--strict]

Credentials come from the standard boto3 chain, the region from the stack's `aws:region`, and
botocore itself honours `AWS_ENDPOINT_URL` (an emulator such as moto, or a VPC endpoint).
Time is bounded: botocore connect/read timeouts and a small retry budget per call, and a total
deadline (`--deadline`, 60 s) for the whole run, since an endpoint that drips one byte at a time
never trips a read timeout.
Exit codes (llm_pd_eks_tools/cli.py `Exit`): 0 all ok, or only some items could-not-check (a warning);
1 at least one FAIL; 2 the stack, its config or the environment is invalid; 5 nothing could be
verified, or (with `--strict`) anything could not.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Optional

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import ConfigError, StackConfig
from llm_pd_eks_tools.cli import ArgumentParser, Exit, ToolError, exit_with, one_line, say
from llm_pd_eks_tools.io_safety import redact

Status = Literal["ok", "FAIL", "could-not-check", "warning"]
OK: Status = "ok"
FAIL: Status = "FAIL"
UNKNOWN: Status = "could-not-check"
WARN: Status = "warning"  # deployable, but costs or risks something the report names (exit 0)

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
)


@dataclass(frozen=True)
class Result:
    """One preflight item."""

    check: str  # stable identifier, e.g. "gpu-offering"
    status: Status
    detail: str


# --- error handling -------------------------------------------------------------------------


def describe_error(exc: Exception) -> str:
    """One line for any botocore failure: no credentials, no endpoint, an API error."""
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ReadTimeoutError,
    )

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return f"no usable AWS credentials ({exc}); configure a profile, env vars or SSO"
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        return f"cannot reach AWS: {exc}"
    if isinstance(exc, ReadTimeoutError):
        return f"the AWS endpoint did not answer in time ({exc})"
    if isinstance(exc, NoRegionError):
        return "no region"
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ResponseParserError):
        return f"the endpoint's answer is not an AWS response ({one_line(str(exc), 120)})"
    if isinstance(exc, (KeyError, IndexError, TypeError)):  # parsed, but without the fields AWS sends
        return f"the endpoint's answer is not an AWS response (no {one_line(str(exc), 80)} in it)"
    if isinstance(exc, ConnectionClosedError):
        url = exc.kwargs.get("endpoint_url")
        return f"cannot reach AWS: the endpoint closed the connection without answering ({url})"
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", "error"))
        message = " ".join(str(err.get("Message", "")).split())
        if code.isdigit() or message.startswith("<"):
            # Not an AWS error document (a proxy's or an emulator's HTML page): the status says it all.
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", code)
            return f"{exc.operation_name}: HTTP {status} from the endpoint (not an AWS error response)"
        return f"{exc.operation_name}: {code}{': ' + message[:160] if message else ''}"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _aws_errors() -> tuple[type[Exception], ...]:
    """What a call to AWS (or whatever answers at the endpoint) can raise: botocore's errors, and an
    answer that is not an AWS response (`ResponseParserError`, or a parsed answer lacking fields)."""
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError

    return (BotoCoreError, ClientError, ResponseParserError, KeyError, IndexError, TypeError)


def guarded(check: str, fn: Callable[[], Result]) -> Result:
    """Run one check; an AWS-side failure makes it could-not-check, never a traceback."""
    try:
        return fn()
    except _aws_errors() as exc:
        return Result(check, UNKNOWN, describe_error(exc))


def _error_code(exc: Exception) -> str:
    return getattr(exc, "response", {}).get("Error", {}).get("Code", "")


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
    except _aws_errors() as exc:
        if _error_code(exc) == "InvalidInstanceType":
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
    except _aws_errors() as exc:
        if _error_code(exc) != "NoSuchResourceException":
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
    config: StackConfig, ec2, quotas, catalog=GPU_INSTANCE_TYPES, eks=None, stack: Optional[str] = None
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
    return results


# --- capacity reservations and the EKS version -------------------------------------


# EC2 begins terminating a Capacity Block's instances 30 minutes before it ends
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html).
CAPACITY_BLOCK_END_NOTICE = timedelta(minutes=30)


def _placement_group_name(arn: Optional[str]) -> Optional[str]:
    """`arn:aws:ec2:<region>:<account>:placement-group/<name>` -> name (DescribeCapacityReservations
    `PlacementGroupArn`)."""
    return arn.rsplit("placement-group/", 1)[-1] if arn else None


def _when(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def own_instances(ec2, reservation_id: str, stack: str) -> int:
    """Pending or running instances of this stack (the `stack` tag every instance carries) in the
    reservation: the slots they hold stay this stack's across an `up`."""
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": "capacity-reservation-id", "Values": [reservation_id]},
            {"Name": "tag:stack", "Values": [stack]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ],
        PaginationConfig={"MaxItems": 1000},
    )
    return sum(len(r.get("Instances", [])) for page in pages for r in page.get("Reservations", []))


def check_capacity(ec2, config: StackConfig, now: Optional[datetime] = None, stack: Optional[str] = None) -> Result:
    """The configured ODCR / Capacity Block exists, is usable, and fits the GPU node group.

    One DescribeCapacityReservations call (bounded by the client's timeouts and the run's deadline)
    answers for both kinds (`ReservationType` `default` or `capacity-block`) and gives one line:
    - FAIL: not `active`/`scheduled`; the other kind than configured; another type or AZ; its
      placement group (`PlacementGroupArn`) other than gpuNodes.capacity.placementGroup (an ODCR in
      a cluster placement group serves only instances launched there,
      https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html); fewer instances than
      minSize; a Capacity Block that starts after, or ends (30 minutes' notice) before, the
      RayService's ready timeout from now.
    - warning: fewer instances than maxSize plus the template-change surge (gpuNodes.templateChange
      blueGreen runs both groups at once); an `open` reservation (InstanceMatchCriteria), which any
      matching launch in the account may take.
    """
    from llm_pd_eks.config import CapacityBlock, CapacityReservation
    from llm_pd_eks.efa_gpu_nodes import capacity_reservation_id

    gpu = config.gpu_nodes
    reservation_id = capacity_reservation_id(gpu)
    if reservation_id is None:
        return Result(
            "gpu-capacity",
            OK,
            f"on demand: no reservation configured (a {gpu.instance_type} "
            f"cluster placement group may still find no capacity)",
        )
    block = isinstance(gpu.capacity, CapacityBlock)
    kind = "Capacity Block" if block else "capacity reservation"
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except _aws_errors() as exc:
        if _error_code(exc) in ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"):
            return Result(
                "gpu-capacity", FAIL, f"{kind} {reservation_id} does not exist in {config.region} ({_error_code(exc)})"
            )
        raise
    if not found:
        return Result("gpu-capacity", FAIL, f"{kind} {reservation_id} does not exist in {config.region}")
    cr = found[0]
    now = now or datetime.now(UTC)
    state = cr.get("State", "unknown")
    problems, cautions = [], []
    if state not in ("active", "scheduled"):
        problems.append(f"state is {state} (needs active or scheduled)")
    reservation_type = cr.get("ReservationType", "default")
    if block and reservation_type != "capacity-block":
        problems.append(
            f"it is not a Capacity Block (ReservationType {reservation_type}): configure it as "
            f"{{reservationId: {reservation_id}}}"
        )
    if not block and reservation_type == "capacity-block":
        problems.append(f"it is a Capacity Block: configure it as {{capacityBlockId: {reservation_id}}}")
    if cr.get("InstanceType") != gpu.instance_type:
        problems.append(f"it reserves {cr.get('InstanceType')}, gpuNodes.instanceType is {gpu.instance_type}")
    if cr.get("AvailabilityZone") != gpu.availability_zone:
        problems.append(f"it is in {cr.get('AvailabilityZone')}, gpuNodes.availabilityZone is {gpu.availability_zone}")
    if isinstance(gpu.capacity, CapacityReservation):
        actual = _placement_group_name(cr.get("PlacementGroupArn"))
        wanted = gpu.capacity.placement_group
        if actual != wanted:
            problems.append(
                f"it was created in cluster placement group {actual!r} and serves only instances launched there: "
                f"set gpuNodes.capacity.placementGroup to {actual!r}"
                if actual and not wanted
                else f"it is in no placement group: remove gpuNodes.capacity.placementGroup ({wanted!r})"
                if not actual
                else f"it is in placement group {actual!r}, gpuNodes.capacity.placementGroup is {wanted!r}"
            )
    total = int(cr.get("TotalInstanceCount", 0))
    # What a launch can use is AvailableInstanceCount (slots no instance holds), plus the slots this
    # stack's own GPU nodes hold already (EC2 DescribeCapacityReservations: TotalInstanceCount counts
    # every slot, used or not).
    available = int(cr.get("AvailableInstanceCount", total))
    own = own_instances(ec2, reservation_id, stack) if stack else 0
    usable = min(total, available + own)
    if total < gpu.min_size:
        problems.append(f"it holds {total} instance(s), gpuNodes.minSize is {gpu.min_size}")
    elif usable < gpu.min_size:
        problems.append(
            f"only {available} of its {total} instance(s) are free (AvailableInstanceCount)"
            + (f" and this stack runs {own} in it" if own else "")
            + f", gpuNodes.minSize is {gpu.min_size}: other instances hold the rest"
        )
    surge = gpu.roll_surge()
    if usable >= gpu.min_size and usable < gpu.max_size + surge:
        extra = f" plus {surge} for a blue/green template change (templateChange blueGreen)" if surge else ""
        cautions.append(
            f"it holds {usable} instance(s) this stack can use, fewer than maxSize {gpu.max_size}{extra}: "
            f"launches past {usable} fail (raise the reservation, lower maxSize"
            f"{', or set templateChange: recreate' if surge else ''})"
        )
    if cr.get("InstanceMatchCriteria") == "open":
        cautions.append(
            "it is open: any matching instance in the account may take its slots (targeted keeps it "
            "for this launch template)"
        )
    window = ""
    if block:
        # `up` waits serving.readyTimeoutMinutes for the RayService, which needs GPU nodes; without
        # serving nothing waits for them.
        minutes = config.serving.ready_timeout_minutes if config.serving else 0
        timeout = timedelta(minutes=minutes)
        wait = f"serving.readyTimeoutMinutes {minutes}" if config.serving else "no RayService to wait for"
        start, end = cr.get("StartDate"), cr.get("EndDate")
        if config.serving and isinstance(start, datetime) and start > now + timeout:
            problems.append(
                f"it starts {_when(start)}, after `up`'s wait for the RayService ({wait}) from now "
                f"{_when(now)}: no GPU node launches before the start; run `up` from "
                f"{_when(start - timeout)}"
            )
        if isinstance(end, datetime) and end - CAPACITY_BLOCK_END_NOTICE < now + timeout:
            problems.append(
                f"it ends {_when(end)} and EC2 terminates its instances from 30 minutes before: too "
                f"soon to serve ({wait})"
            )
        window = f", window {_when(start)} to {_when(end)}"
    if problems:
        return Result("gpu-capacity", FAIL, f"{kind} {reservation_id}: " + "; ".join(problems))
    when = ""
    if state == "scheduled":
        when = f", starts {_when(cr.get('StartDate'))}: nodes launch only then"
    summary = (
        f"{kind} {reservation_id} is {state}{when}: {total} x {gpu.instance_type} in "
        f"{gpu.availability_zone} ({cr.get('AvailableInstanceCount', '?')} available, "
        f"{cr.get('InstanceMatchCriteria', '?')}{window}) >= minSize {gpu.min_size}"
    )
    if cautions:
        return Result("gpu-capacity", WARN, summary + "; but " + "; ".join(cautions))
    return Result("gpu-capacity", OK, summary)


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


def load_config(stack: str, root: Optional[Path] = None) -> StackConfig:
    """The stack's validated config, read exactly as the program reads it (secret keys included)."""
    from llm_pd_eks_tools.preview.mockrun import ROOT, stack_config

    return stack_config(stack, root or ROOT)


def make_clients(region: str):
    """(sts, ec2, service-quotas, eks) clients: standard credential chain, few retries, short timeouts."""
    import boto3

    cfg = client_config()
    session = boto3.session.Session()
    return tuple(
        session.client(name, region_name=region, config=cfg) for name in ("sts", "ec2", "service-quotas", "eks")
    )


def caller_account(sts) -> str:
    """The account the credentials belong to; also proves the endpoint and credentials work."""
    return sts.get_caller_identity()["Account"]


# --- CLI ------------------------------------------------------------------------------------


def verdict(results: list[Result]) -> str:
    statuses = {r.status for r in results}
    return "FAIL" if FAIL in statuses else "warning" if UNKNOWN in statuses else "ok"


def render_text(stack: str, region: str, account: Optional[str], results: list[Result]) -> str:
    endpoint = redact(os.environ.get("AWS_ENDPOINT_URL", ""))
    where = f"account {account or 'unknown'}, region {region}" + (f", endpoint {endpoint}" if endpoint else "")
    width = max(len(r.check) for r in results)
    lines = [f"preflight {stack}: {where}"]
    lines += [f"  {r.status:<15}  {r.check:<{width}}  {r.detail}" for r in results]
    failed = sum(r.status == FAIL for r in results)
    unknown = sum(r.status == UNKNOWN for r in results)
    v = verdict(results)
    if v == "FAIL":
        lines.append(f"FAIL: {failed} check(s) failed" + (f", {unknown} could not be checked" if unknown else ""))
    elif v == "warning":
        rest = "the rest passed" if unknown < len(results) else "nothing was verified"
        lines.append(
            f"WARNING: {unknown} of {len(results)} check(s) could not be run ({rest}); "
            f"this stack is NOT confirmed deployable (--strict exits 5 on this)"
        )
    else:
        warned = sum(r.status == WARN for r in results)
        lines.append(f"ok: all {len(results)} checks passed" + (f", {warned} with a warning" if warned else ""))
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None, clients=None) -> int:
    """CLI entry. `clients` = (sts, ec2, service-quotas[, eks]) to inject; built from boto3 otherwise."""
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.preflight", description=__doc__.split("\n")[0])
    parser.add_argument("--stack", default="dev", help="stack name (reads Pulumi.<stack>.yaml)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (and nothing else on stdout)")
    parser.add_argument("--strict", action="store_true", help="exit 5 when any item could not be checked")
    parser.add_argument(
        "--deadline",
        type=float,
        default=DEADLINE_SECONDS,
        help=f"seconds the whole run may take (default {DEADLINE_SECONDS:g})",
    )
    args = parser.parse_args(argv)
    if not 0 < args.deadline <= 3600:
        raise ToolError(Exit.USAGE, f"--deadline {args.deadline:g}: give a number of seconds between 1 and 3600")
    from llm_pd_eks_tools.process_safety import set_run_deadline, time_left

    set_run_deadline(args.deadline)  # the whole run: the Pulumi CLI for imported environments too

    try:
        config = load_config(args.stack)
    except ConfigError as exc:
        raise ToolError(Exit.USAGE, f"Pulumi.{args.stack}.yaml: {'; '.join(exc.problems)}") from None

    if clients is None:
        check_endpoint_env(os.environ)
        try:
            clients = make_clients(config.region)
        except _client_errors() as exc:
            raise ToolError(Exit.USAGE, f"cannot create AWS clients: {describe_error(exc)}") from None
    sts, ec2, quotas, *more = clients

    eks = more[0] if more else None
    account, results, reason = run_with_deadline(
        lambda: (caller_account(sts), run_checks(config, ec2, quotas, eks=eks, stack=args.stack)),
        args.deadline,
        wait=time_left(args.deadline),
    )
    results = [dataclasses.replace(r, detail=redact(r.detail)) for r in results]  # an endpoint's user:password@
    if reason is not None:
        # Credentials or endpoint unusable, or out of time: say so once and mark every item.
        say("preflight", reason)

    if args.json:
        print(
            json.dumps(
                {
                    "stack": args.stack,
                    "region": config.region,
                    "account": account,
                    "verdict": verdict(results),
                    "checks": [asdict(r) for r in results],
                },
                indent=2,
            )
        )
    else:
        print(render_text(args.stack, config.region, account, results))
    return exit_code(results, args.strict)


# --- bounded time and exit codes ---------------------------------------------------


def _client_errors() -> tuple[type[Exception], ...]:
    """What creating clients can raise: botocore's errors, and ValueError for a bad endpoint or setting."""
    return (ValueError, *_aws_errors())


# The whole run's budget: 7 checks of a few calls each answer in seconds against real AWS.
DEADLINE_SECONDS = 60.0


def client_config():
    """botocore Config: short connect/read timeouts and one retry, so a dead endpoint costs seconds.

    `connect_timeout`/`read_timeout` bound each socket wait; `retries` "standard" mode with
    `total_max_attempts` 2 (the first try plus one retry) keeps throttling from turning into a retry
    storm. (botocore's `max_attempts` counts retries only: `max_attempts: 2` means three requests.)
    """
    from botocore.config import Config

    return Config(connect_timeout=5, read_timeout=10, retries={"mode": "standard", "total_max_attempts": 2})


def check_endpoint_env(environ) -> None:
    """`AWS_ENDPOINT_URL[_<SERVICE>]` must be an http(s) URL (botocore raises a bare ValueError), and
    `AWS_CA_BUNDLE` a file that exists (botocore otherwise fails later with an unrelated TLS error)."""
    from urllib.parse import urlsplit

    for name in sorted(k for k in environ if k.startswith("AWS_ENDPOINT_URL")):
        value = environ[name]
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
            usable = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            usable = False
        if not usable:
            raise ToolError(
                Exit.USAGE,
                f"{name}={one_line(repr(redact(value)), 100)} is not a URL such as "
                "http://127.0.0.1:5000 or https://ec2.us-west-2.amazonaws.com; "
                "fix or unset it",
            )
    bundle = environ.get("AWS_CA_BUNDLE")
    if bundle and not os.path.isfile(bundle):
        raise ToolError(
            Exit.USAGE,
            f"AWS_CA_BUNDLE={one_line(repr(bundle), 100)} is not a file; point it at a "
            "PEM certificate bundle or unset it",
        )


def run_with_deadline(
    work: Callable[[], tuple[str, list[Result]]],
    deadline: float,
    wait: Optional[float] = None,
) -> tuple[Optional[str], list[Result], Optional[str]]:
    """(account, results, reason) of `work` run on a daemon thread for at most `deadline` seconds.

    When AWS fails as a whole (credentials, endpoint) or the deadline passes, every item is
    could-not-check with the reason; the abandoned thread dies with the process.
    """
    import threading

    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the main thread below
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="preflight-checks", daemon=True)
    thread.start()
    thread.join(deadline if wait is None else wait)  # `wait`: what is left of `deadline` when the work starts
    if thread.is_alive():
        reason = (
            f"AWS did not answer within the {deadline:g} s deadline"
            + (f" (endpoint {redact(os.environ['AWS_ENDPOINT_URL'])})" if os.environ.get("AWS_ENDPOINT_URL") else "")
            + "; nothing was verified"
        )
        return None, [Result(name, UNKNOWN, reason) for name in CHECK_NAMES], reason
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, _aws_errors()):
            reason = describe_error(error)
            return None, [Result(name, UNKNOWN, reason) for name in CHECK_NAMES], reason
        raise error
    account, results = outcome["value"]
    return account, results, None


def exit_code(results: list[Result], strict: bool) -> int:
    """FAILED on any FAIL; UNVERIFIED when nothing was verified, or anything was not under --strict."""
    v = verdict(results)
    if v == "FAIL":
        return Exit.FAILED
    if v == "warning" and (strict or all(r.status == UNKNOWN for r in results)):
        return Exit.UNVERIFIED
    return Exit.OK


if __name__ == "__main__":
    exit_with("preflight", main)
