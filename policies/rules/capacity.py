"""The GPU nodes' capacity reservation must sit in the GPU subnet's AZ.

An On-Demand Capacity Reservation or a Capacity Block is bound to one AZ. A launch template that
targets it (`capacityReservationSpecification.capacityReservationTarget.capacityReservationId`)
launches nothing in any other AZ: EC2 answers with a capacity error and the node group never gets
a node, twenty minutes into `pulumi up`. The reservation's AZ comes from the plan when the stack
manages it (`aws:ec2/capacityReservation:CapacityReservation`, by property dependency or id) and
otherwise from policy config `reservationAzs` (`{"cr-…": "us-east-1c"}`, e.g. written from
`make preflight --json`); a reservation whose AZ neither knows is skipped, never refused.
"""

from __future__ import annotations

from typing import Any, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from .common import config_with_defaults, dig, is_unknown, join
from .stack import StackView

CAPACITY_RESERVATION = "aws:ec2/capacityReservation:CapacityReservation"
RESERVATION_PATH = ("capacityReservationSpecification", "capacityReservationTarget", "capacityReservationId")
CONFIG: dict[str, dict[str, Any]] = {
    "reservationAzs": {
        "type": "object",
        "description": "AZ of capacity reservations / Capacity Blocks the stack does not manage (id -> AZ)",
        "additionalProperties": {"type": "string"},
        "default": {},
    }
}


def _reservation_az(view: StackView, template: Any, reservation_id: Any, known: dict[str, str]) -> Optional[str]:
    managed = view.deps(template, "capacityReservationSpecification", CAPACITY_RESERVATION)
    if not managed and isinstance(reservation_id, str) and not is_unknown(reservation_id):
        managed = view.by_property(CAPACITY_RESERVATION, "id", reservation_id)
    for reservation in managed[:1]:
        az = dig(view.props(reservation), "availabilityZone")
        return az if isinstance(az, str) and not is_unknown(az) else None
    if isinstance(reservation_id, str) and reservation_id in known:
        return known[reservation_id]
    return None


def _check(args: StackValidationArgs, report: ReportViolation) -> None:
    known = {str(k): str(v) for k, v in (config_with_defaults(args, CONFIG).get("reservationAzs") or {}).items()}
    view = StackView(args.resources)
    for cap in view.capacities():  # every path to GPU capacity the pack knows (node groups, ASGs, instances)
        if cap.launch_template.state != "resolved":
            continue  # no template, or one not in the stack (gpu-references-in-stack judges that)
        template = cap.launch_template.resource
        reservation_id = dig(view.props(template), *RESERVATION_PATH)
        if reservation_id is None:
            continue  # on demand
        reservation_az = _reservation_az(view, template, reservation_id, known)
        subnet_azs = {str(az) for az in (view.subnet_az(s) for s in cap.subnets.resolved)
                      if az is not None and not is_unknown(az)}
        if reservation_az is None or not subnet_azs or subnet_azs == {reservation_az}:
            continue
        shown = reservation_id if isinstance(reservation_id, str) and not is_unknown(reservation_id) else "(pending)"
        report(
            f"{cap.label} targets capacity reservation {shown} in {reservation_az}, "
            f"but its subnets are in {join(subnet_azs)}. A reservation serves only its own AZ, so no node would "
            f"launch. Fix: put gpuNodes.availabilityZone in {reservation_az}, or use a reservation in "
            f"{join(subnet_azs)}.",
            cap.resource.urn,
        )


reservation_in_gpu_az = StackValidationPolicy(
    name="capacity-reservation-in-gpu-az",
    description="A node group's targeted capacity reservation / Capacity Block is in the AZ of its subnets.",
    validate=_check,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties=CONFIG),
)

POLICIES = [reservation_in_gpu_az]
