"""`capacity-reservation-in-gpu-az` through the real analyzer protocol, both ways."""

from __future__ import annotations

import pytest
from policy_fixtures import UNKNOWN, Res, gpu_stack, judge, of

from tools.preview.mockrun import run_program

POLICY = "capacity-reservation-in-gpu-az"
CAPACITY_RESERVATION = "aws:ec2/capacityReservation:CapacityReservation"
RID = "cr-0123456789abcdef0"


def with_reservation(az: str, managed: bool = True, unknown_id: bool = False) -> dict[str, Res]:
    """The compliant GPU stack (subnet in us-west-2a) whose launch template targets a reservation in `az`."""
    stack = gpu_stack()
    target = {"capacityReservationTarget": {"capacityReservationId": UNKNOWN if unknown_id else RID}}
    stack["lt"].props["capacityReservationSpecification"] = target
    if managed:
        cr = Res(CAPACITY_RESERVATION, "gpu-odcr", {"availabilityZone": az, "instanceType": "p5.48xlarge",
                                                    "instanceCount": 2, **({} if unknown_id else {"id": RID})})
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

    from tools.preview.analyzer import analyze_run
    from tools.preview.mockrun import load_stack_config

    config, secret_keys = load_stack_config("prod")
    key = "llm-pd-eks:gpuNodes"
    config[key] = json.dumps({**json.loads(config[key]), "capacity": {"reservationId": RID}})
    run = run_program("prod", config, secret_keys)
    assert [v for v in analyze_run(run, {POLICY: {"reservationAzs": {RID: "us-east-1c"}}})
            if v.enforcement == "mandatory"] == []
    wrong = [v for v in analyze_run(run, {POLICY: {"reservationAzs": {RID: "us-east-1a"}}}) if v.policy == POLICY]
    assert len(wrong) == 1 and "us-east-1a" in wrong[0].message
