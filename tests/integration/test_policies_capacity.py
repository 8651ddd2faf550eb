"""`capacity-reservation-in-gpu-az` through the real analyzer protocol, both ways."""

from __future__ import annotations

import pytest
from policy_fixtures import UNKNOWN, Res, gpu_stack, judge, of

from llm_pd_eks_tools.plan.preview.mockrun import run_program

POLICY = "capacity-reservation-in-gpu-az"
CAPACITY_RESERVATION = "aws:ec2/capacityReservation:CapacityReservation"
RID = "cr-0123456789abcdef0"


def with_reservation(az: str, managed: bool = True, unknown_id: bool = False) -> dict[str, Res]:
    """The compliant GPU stack (subnet in us-west-2a) whose launch template targets a reservation in `az`."""
    stack = gpu_stack()
    target = {"capacityReservationTarget": {"capacityReservationId": UNKNOWN if unknown_id else RID}}
    stack["lt"].props["capacityReservationSpecification"] = target
    if managed:
        cr = Res(
            CAPACITY_RESERVATION,
            "gpu-odcr",
            {
                "availabilityZone": az,
                "instanceType": "p5.48xlarge",
                "instanceCount": 2,
                **({} if unknown_id else {"id": RID}),
            },
        )
        stack["cr"] = cr
        stack["lt"].deps["capacityReservationSpecification"] = [cr]
    return stack


@pytest.mark.parametrize("unknown_id", [False, True], ids=["known-id", "first-preview"])
def test_reservation_in_the_gpu_az_passes(unknown_id):
    assert of(judge(with_reservation("us-west-2a", unknown_id=unknown_id)), POLICY) == []


@pytest.mark.parametrize("unknown_id", [False, True], ids=["known-id", "first-preview"])
def test_reservation_in_another_az_is_refused(unknown_id):
    stack = with_reservation("us-west-2b", unknown_id=unknown_id)
    (found,) = of(judge(stack), POLICY)
    assert found.urn == stack["ng"].urn
    assert "in us-west-2b" in found.message and "subnets are in us-west-2a" in found.message


def test_unmanaged_reservation_judged_from_policy_config():
    stack = with_reservation("", managed=False)
    assert of(judge(stack), POLICY) == []  # AZ unknown: skipped, not refused
    assert of(judge(stack, {POLICY: {"reservationAzs": {RID: "us-west-2a"}}}), POLICY) == []
    (found,) = of(judge(stack, {POLICY: {"reservationAzs": {RID: "us-west-2c"}}}), POLICY)
    assert RID in found.message and "us-west-2c" in found.message


def test_on_demand_stack_is_not_judged():
    assert of(judge(gpu_stack()), POLICY) == []


def test_program_with_a_reservation_passes_with_its_az_and_fails_with_another():
    """The program's own plan (prod, GPU AZ us-east-1c) with an ODCR, judged with the reservation's AZ."""
    import json

    from llm_pd_eks_tools.core.stack import load_stack_config
    from llm_pd_eks_tools.plan.preview.analyzer import analyze_run

    config, secret_keys = load_stack_config("prod")
    key = "llm-pd-eks:gpuNodes"
    config[key] = json.dumps({**json.loads(config[key]), "capacity": {"reservationId": RID}})
    run = run_program("prod", config, secret_keys)
    assert [
        v for v in analyze_run(run, {POLICY: {"reservationAzs": {RID: "us-east-1c"}}}) if v.enforcement == "mandatory"
    ] == []
    wrong = [v for v in analyze_run(run, {POLICY: {"reservationAzs": {RID: "us-east-1a"}}}) if v.policy == POLICY]
    assert len(wrong) == 1 and "us-east-1a" in wrong[0].message


# --- placement per capacity ---------------------------------------------------------------------------

REFS = "gpu-references-in-stack"
PLACEMENT = "gpu-cluster-placement-group"
RESERVATION_PG = "odcr-p5-us-west-2a"


def capacity_block(with_group: bool) -> dict[str, Res]:
    stack = with_reservation("us-west-2a")
    stack["lt"].props["instanceMarketOptions"] = {"marketType": "capacity-block"}
    if not with_group:
        del stack["lt"].props["placement"], stack["lt"].deps["placement"], stack["pg"]
    return stack


def test_capacity_block_without_placement_group_passes_every_rule():
    """A Capacity Block needs no cluster placement group; the cluster-placement rule must not ask for one."""
    verdicts = judge(capacity_block(with_group=False))
    assert [v for v in verdicts if v.enforcement == "mandatory"] == []


def test_capacity_block_in_a_placement_group_is_refused():
    stack = capacity_block(with_group=True)
    (found,) = of(judge(stack), POLICY)
    assert found.urn == stack["lt"].urn
    assert "Capacity Block" in found.message and "needs no placement group" in found.message


def odcr_in_group(group_name: str | None) -> dict[str, Res]:
    """The GPU stack on a reservation, its template launching into an existing group by name (or its own)."""
    stack = with_reservation("us-west-2a")
    if group_name is not None:
        del stack["pg"], stack["lt"].deps["placement"]
        stack["lt"].props["placement"] = {"groupName": group_name}
    return stack


def test_odcr_in_its_own_reservation_group_passes():
    config = {POLICY: {"reservationPlacementGroups": {RID: RESERVATION_PG}}}
    assert [v for v in judge(odcr_in_group(RESERVATION_PG), config) if v.enforcement == "mandatory"] == []
    # not known to the policy config: the name is not refused as outside the stack either
    assert [v for v in judge(odcr_in_group(RESERVATION_PG)) if v.enforcement == "mandatory"] == []


@pytest.mark.parametrize("group_name", [None, "some-other-group"], ids=["program-group", "other-group"])
def test_odcr_outside_its_reservation_group_is_refused(group_name):
    stack = odcr_in_group(group_name)
    (found,) = of(judge(stack, {POLICY: {"reservationPlacementGroups": {RID: RESERVATION_PG}}}), POLICY)
    assert found.urn == stack["lt"].urn
    assert f"'{RESERVATION_PG}'" in found.message and "placementGroup" in found.message


def test_odcr_in_no_group_may_use_the_programs_group():
    config = {POLICY: {"reservationPlacementGroups": {RID: ""}}}
    assert of(judge(odcr_in_group(None), config), POLICY) == []


def test_external_placement_group_without_reservation_is_still_a_blind_spot():
    stack = odcr_in_group(RESERVATION_PG)
    del stack["lt"].props["capacityReservationSpecification"], stack["lt"].deps["capacityReservationSpecification"]
    assert [v.policy for v in judge(stack) if v.policy == REFS] == [REFS]


@pytest.mark.parametrize(
    "capacity, policy_config",
    [
        ({"capacityBlockId": RID}, {}),
        (
            {"reservationId": RID, "placementGroup": "odcr-p5-us-east-1c"},
            {"reservationPlacementGroups": {RID: "odcr-p5-us-east-1c"}},
        ),
    ],
    ids=["capacity-block", "odcr-in-group"],
)
def test_program_plans_per_capacity_pass_the_pack(capacity, policy_config):
    import json

    from llm_pd_eks_tools.core.stack import load_stack_config
    from llm_pd_eks_tools.plan.preview.analyzer import analyze_run

    config, secret_keys = load_stack_config("prod")
    key = "llm-pd-eks:gpuNodes"
    gpu = {**json.loads(config[key]), "capacity": capacity}
    if "capacityBlockId" in capacity:
        gpu.update(minSize=0, desiredSize=0)
    config[key] = json.dumps(gpu)
    run = run_program("prod", config, secret_keys)
    policy_config = {POLICY: {"reservationAzs": {RID: "us-east-1c"}, **policy_config}}
    assert [v for v in analyze_run(run, policy_config) if v.enforcement == "mandatory"] == []
