"""Preflight's capacity check: the stack's GPU capacity (a capacity reservation, a Capacity Block, or
on demand) as EC2 reports it for the stack's AZ, instance type and placement group."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Optional

from llm_pd_eks.config import CapacityBlock, CapacityReservation, StackConfig
from llm_pd_eks.efa_gpu_nodes import capacity_reservation_id
from llm_pd_eks_tools.ops.preflight_result import FAIL, OK, WARN, Result, aws_errors, error_code

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
    gpu = config.gpu_nodes
    reservation_id = capacity_reservation_id(gpu)
    if reservation_id is None:
        # EC2 has no API that answers "will N of this type launch now": on-demand capacity is known only
        # when a launch succeeds or fails (InsufficientInstanceCapacity), and a cluster placement group
        # narrows it further (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html).
        surge = gpu.roll_surge()
        return Result(
            "gpu-capacity",
            WARN,
            f"on demand: NOT checked, EC2 cannot say beforehand whether {gpu.max_size + surge} x "
            f"{gpu.instance_type} (maxSize {gpu.max_size}"
            + (f" plus {surge} for a blue/green node change" if surge else "")
            + f") will launch in {gpu.availability_zone} in one cluster placement group; a launch may fail with "
            "InsufficientInstanceCapacity after the control plane exists. A capacity reservation "
            "(gpuNodes.capacity {reservationId: cr-...}) or a Capacity Block ({capacityBlockId: cr-...}) holds "
            "the instances, and preflight then checks its type, AZ, size, placement group and window",
        )
    block = isinstance(gpu.capacity, CapacityBlock)
    kind = "Capacity Block" if block else "capacity reservation"
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except aws_errors() as exc:
        if error_code(exc) in ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"):
            return Result(
                "gpu-capacity", FAIL, f"{kind} {reservation_id} does not exist in {config.region} ({error_code(exc)})"
            )
        raise
    if not found:
        return Result("gpu-capacity", FAIL, f"{kind} {reservation_id} does not exist in {config.region}")
    cr = found[0]
    now = now or datetime.now(UTC)
    state = cr.get("State", "unknown")
    problems = _kind_and_place(cr, gpu, block, reservation_id)
    if state not in ("active", "scheduled"):
        problems.insert(0, f"state is {state} (needs active or scheduled)")
    count_problems, cautions, total = _counts(ec2, cr, gpu, reservation_id, stack)
    problems += count_problems
    window = ""
    if block:
        window_problems, window = _block_window(cr, config, now)
        problems += window_problems
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


def _kind_and_place(cr: dict[str, Any], gpu: Any, block: bool, reservation_id: str) -> list[str]:
    """What differs between the reservation and gpuNodes: its kind, instance type, AZ, placement group."""
    problems = []
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
    return problems


def _counts(
    ec2: Any, cr: dict[str, Any], gpu: Any, reservation_id: str, stack: Optional[str]
) -> tuple[list[str], list[str], int]:
    """(problems, cautions, total instances) of the reservation's slots against min/maxSize and the surge."""
    problems, cautions = [], []
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
    return problems, cautions, total


def _block_window(cr: dict[str, Any], config: StackConfig, now: datetime) -> tuple[list[str], str]:
    """A Capacity Block's window against `up`'s wait for the RayService: (problems, the window's text)."""
    problems = []
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
            f"it ends {_when(end)} and EC2 terminates its instances from 30 minutes before: too soon to serve ({wait})"
        )
    return problems, f", window {_when(start)} to {_when(end)}"
