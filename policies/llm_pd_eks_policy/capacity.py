"""The GPU nodes' capacity reservation must sit in the GPU subnet's AZ, and its placement must fit it.

An On-Demand Capacity Reservation or a Capacity Block is bound to one AZ. A launch template that
targets it (`capacityReservationSpecification.capacityReservationTarget.capacityReservationId`)
launches nothing in any other AZ: EC2 answers with a capacity error and the node group never gets
a node, twenty minutes into `pulumi up`. The reservation's AZ comes from the plan when the stack
manages it (`aws:ec2/capacityReservation:CapacityReservation`, by property dependency or id) and
otherwise from policy config `reservationAzs` (`{"cr-…": "us-east-1c"}`, e.g. written from
`make preflight --json`); a reservation whose AZ neither knows is skipped, never refused.

Placement (`_placement_check`, same policy):
- a Capacity Block template (`instanceMarketOptions.marketType` `capacity-block`) names no placement
  group: its instances are already placed close together, "there is no need to use a cluster
  placement group with a Capacity Block"
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-using.html);
- a template targeting an ODCR that was created in a cluster placement group launches into exactly
  that group: such a reservation serves only instances launched into its group
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html). The group comes from the
  plan when the stack manages the reservation (its `placementGroupArn`: the PlacementGroup feeding it,
  or the ARN's name), else from policy config `reservationPlacementGroups` (`{"cr-…": "name"}`, `""`
  for a reservation in no group, as preflight reads it from DescribeCapacityReservations
  `PlacementGroupArn`); unknown: skipped.
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

from .common import PLACEMENT_GROUP, config_with_defaults, dig, is_unknown, join
from .stack import StackView

CAPACITY_RESERVATION = "aws:ec2/capacityReservation:CapacityReservation"
RESERVATION_PATH = ("capacityReservationSpecification", "capacityReservationTarget", "capacityReservationId")
CONFIG: dict[str, dict[str, Any]] = {
    "reservationAzs": {
        "type": "object",
        "description": "AZ of capacity reservations / Capacity Blocks the stack does not manage (id -> AZ)",
        "additionalProperties": {"type": "string"},
        "default": {},
    },
    "reservationPlacementGroups": {
        "type": "object",
        "description": "cluster placement group each capacity reservation was created in (id -> name, '' for none)",
        "additionalProperties": {"type": "string"},
        "default": {},
    },
}
MARKET_TYPE_PATH = ("instanceMarketOptions", "marketType")


def is_capacity_block_template(props: dict) -> bool:
    """The launch template launches into a Capacity Block (EKS: market type `capacity-block`)."""
    return dig(props, *MARKET_TYPE_PATH) == "capacity-block"


def targets_reservation(props: dict) -> bool:
    """The launch template targets one capacity reservation by a known id."""
    reservation_id = dig(props, *RESERVATION_PATH)
    return isinstance(reservation_id, str) and not is_unknown(reservation_id)


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


def _placement_check(view: StackView, cap: Any, template: Any, groups: dict[str, str], report: ReportViolation) -> None:
    props = view.props(template)
    ref = view.placement_group(template)
    named = ref.literal if ref.state == "external" else ref.resource.name if ref.state == "resolved" else ""
    if is_capacity_block_template(props):
        if ref.state != "none":
            report(
                f"{cap.label} launches into a Capacity Block with launch template '{template.name}' in placement "
                f"group '{named or '(pending)'}'. A Capacity Block is already placed close together and needs no "
                f"placement group; one can only cause insufficient-capacity errors. Fix: drop placement.groupName "
                f"(gpuNodes.capacity capacityBlockId creates none).",
                template.urn,
            )
        return
    reservation_id = dig(props, *RESERVATION_PATH)
    wanted = _reservation_group(view, template, reservation_id, groups)
    if wanted is None:
        return  # on demand, in no placement group, or not known (skipped)
    if isinstance(wanted, str):
        if ref.state == "external" and ref.literal == wanted:
            return
        if ref.state == "resolved" and dig(view.props(ref.resource), "name") == wanted:
            return
        shown = f"'{wanted}'"
    else:
        if ref.state == "resolved" and ref.resource.urn == wanted.urn:
            return
        if ref.state == "unresolved":
            return  # not known yet which group
        shown = f"'{wanted.name}' (in this stack)"
    where = (
        f"placement group '{named}'"
        if named
        else "no placement group"
        if ref.state == "none"
        else "a placement group not known yet"
    )
    rid = reservation_id if isinstance(reservation_id, str) and not is_unknown(reservation_id) else "(pending)"
    report(
        f"{cap.label} targets capacity reservation {rid}, created in cluster placement group "
        f"{shown}, but launch template '{template.name}' uses {where}. Such a reservation serves only "
        f"instances launched into its own group. Fix: set gpuNodes.capacity.placementGroup to that group.",
        template.urn,
    )


def _reservation_group(view: StackView, template: Any, reservation_id: Any, groups: dict[str, str]) -> Any:
    """The cluster placement group the targeted reservation was created in: the plan's reservation
    (its `placementGroupArn`, by property dependency or the ARN's name) before the policy config's
    `reservationPlacementGroups`; a PlacementGroup resource, a name, or None (no group / unknown)."""
    managed = view.deps(template, "capacityReservationSpecification", CAPACITY_RESERVATION)
    if not managed and isinstance(reservation_id, str) and not is_unknown(reservation_id):
        managed = view.by_property(CAPACITY_RESERVATION, "id", reservation_id)
    for reservation in managed[:1]:
        fed = view.deps(reservation, "placementGroupArn", PLACEMENT_GROUP)
        if fed:
            return fed[0]
        arn = dig(view.props(reservation), "placementGroupArn")
        if isinstance(arn, str) and not is_unknown(arn) and "placement-group/" in arn:
            return arn.rsplit("placement-group/", 1)[1]
        if arn is not None:
            return None  # not known yet and fed by no group of the stack: skipped
    if isinstance(reservation_id, str) and groups.get(reservation_id):
        return groups[reservation_id]
    return None


def _type_check(view: StackView, cap: Any, template: Any, reservation_id: Any, report: ReportViolation) -> None:
    """An ODCR of the plan reserves one instance type: a group of another type never uses it."""
    managed = view.deps(template, "capacityReservationSpecification", CAPACITY_RESERVATION)
    if not managed and isinstance(reservation_id, str) and not is_unknown(reservation_id):
        managed = view.by_property(CAPACITY_RESERVATION, "id", reservation_id)
    for reservation in managed[:1]:
        reserved = dig(view.props(reservation), "instanceType")
        if not isinstance(reserved, str) or is_unknown(reserved):
            return
        other = sorted(t for t in cap.instance_types if t != reserved.strip().lower())
        if other:
            report(
                f"{cap.label} launches {join(other)} from a template that targets capacity reservation "
                f"'{reservation.name}' of {reserved}: a reservation serves only its own instance type, so these "
                f"nodes launch on demand or not at all. Fix: reserve the type the group launches.",
                cap.resource.urn,
            )


def _check(args: StackValidationArgs, report: ReportViolation) -> None:
    config = config_with_defaults(args, CONFIG)
    known = {str(k): str(v) for k, v in (config.get("reservationAzs") or {}).items()}
    groups = {str(k): str(v) for k, v in (config.get("reservationPlacementGroups") or {}).items()}
    view = StackView.of(args.resources)
    for cap in view.capacities():  # every path to GPU capacity the pack knows (node groups, ASGs, instances)
        if cap.launch_template.state != "resolved":
            continue  # no template, or one not in the stack (gpu-references-in-stack judges that)
        template = cap.launch_template.resource
        _placement_check(view, cap, template, groups, report)
        reservation_id = dig(view.props(template), *RESERVATION_PATH)
        if reservation_id is None:
            continue  # on demand
        _type_check(view, cap, template, reservation_id, report)
        reservation_az = _reservation_az(view, template, reservation_id, known)
        subnet_azs = {
            str(az) for az in (view.subnet_az(s) for s in cap.subnets.resolved) if az is not None and not is_unknown(az)
        }
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
    description="A node group's targeted capacity reservation / Capacity Block is in the AZ of its subnets; "
    "a Capacity Block template names no placement group, an ODCR's template its reservation's group.",
    validate=_check,
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties=CONFIG),
)

POLICIES = [reservation_in_gpu_az]
