"""Preflight: the GPU capacity reservation / Capacity Block and the EKS version's support status.

moto 5.2.5 implements neither DescribeCapacityReservations nor EKS DescribeClusterVersions, so the
answers come from botocore Stubbers on real clients: request parameters and response shapes are
checked against the services' own models.
"""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber
from helpers import validate_values

from tools import preflight

RID = "cr-0123456789abcdef0"


def config(capacity, min_size=2, max_size=4):
    return validate_values({
        "network": {"availabilityZones": ["us-east-1a", "us-east-1c"]},
        "gpuNodes": {"instanceType": "p5.48xlarge", "availabilityZone": "us-east-1c", "capacity": capacity,
                     "minSize": min_size, "desiredSize": min_size, "maxSize": max_size},
    }, region="us-east-1")


def ec2_answering(reservation: dict | None = None, error: str | None = None):
    client = boto3.client("ec2", region_name="us-east-1")
    stub = Stubber(client)
    params = {"CapacityReservationIds": [RID]}
    if error:
        stub.add_client_error("describe_capacity_reservations", service_error_code=error, expected_params=params)
    else:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [reservation]}, params)
    stub.activate()
    return client


def reservation(**changes) -> dict:
    return {"CapacityReservationId": RID, "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1c",
            "State": "active", "TotalInstanceCount": 2, "AvailableInstanceCount": 2, "ReservationType": "default",
            **changes}


@pytest.mark.parametrize("capacity", [{"reservationId": RID}, {"capacityBlockId": RID}])
def test_matching_active_reservation_passes(capacity):
    result = preflight.check_capacity(ec2_answering(reservation()), config(capacity))
    assert result.status == "ok", result
    assert RID in result.detail and "active" in result.detail


def test_scheduled_capacity_block_passes_and_shows_its_start():
    start = datetime(2026, 12, 3, 11, 30, tzinfo=UTC)
    cr = reservation(State="scheduled", StartDate=start, ReservationType="capacity-block")
    result = preflight.check_capacity(ec2_answering(cr), config({"capacityBlockId": RID}))
    assert result.status == "ok"
    assert "Capacity Block" in result.detail and "starts 2026-12-03T11:30:00+00:00" in result.detail


@pytest.mark.parametrize("changes, expected", [
    ({"State": "expired"}, "state is expired"),
    ({"InstanceType": "p5e.48xlarge"}, "it reserves p5e.48xlarge, gpuNodes.instanceType is p5.48xlarge"),
    ({"AvailabilityZone": "us-east-1a"}, "it is in us-east-1a, gpuNodes.availabilityZone is us-east-1c"),
    ({"TotalInstanceCount": 1}, "it holds 1 instance(s), gpuNodes.minSize is 2"),
])
def test_one_wrong_field_fails(changes, expected):
    result = preflight.check_capacity(ec2_answering(reservation(**changes)), config({"reservationId": RID}))
    assert result.status == "FAIL" and expected in result.detail, result


def test_missing_reservation_fails():
    ec2 = ec2_answering(error="InvalidCapacityReservationId.NotFound")
    result = preflight.check_capacity(ec2, config({"reservationId": RID}))
    assert result.status == "FAIL" and "does not exist" in result.detail


def test_on_demand_needs_no_call():
    client = boto3.client("ec2", region_name="us-east-1")
    with Stubber(client) as stub:  # any call would raise: nothing is queued
        result = preflight.check_capacity(client, config("onDemand"))
        stub.assert_no_pending_responses()
    assert result.status == "ok" and "on demand" in result.detail


def eks_answering(status: str):
    client = boto3.client("eks", region_name="us-east-1")
    stub = Stubber(client)
    stub.add_response("describe_cluster_versions", {"clusterVersions": [{
        "clusterVersion": "1.33", "versionStatus": status, "status": status,
        "endOfStandardSupportDate": datetime(2026, 7, 29, tzinfo=UTC),
        "endOfExtendedSupportDate": datetime(2027, 7, 29, tzinfo=UTC)}]},
        {"clusterVersions": ["1.33"]})
    stub.activate()
    return client


def test_extended_support_is_a_warning_not_a_failure():
    result = preflight.check_eks_version(eks_answering("EXTENDED_SUPPORT"), "1.33")
    assert result.status == "warning"
    assert "EXTENDED support" in result.detail and "2026-07-29" in result.detail and "2027-07-29" in result.detail
    assert preflight.verdict([result]) == "ok"  # deployable: exit 0, the warning is printed


def test_standard_support_is_ok():
    result = preflight.check_eks_version(eks_answering("STANDARD_SUPPORT"), "1.33")
    assert result.status == "ok" and "standard support until 2026-07-29" in result.detail


def test_unknown_version_fails():
    client = boto3.client("eks", region_name="us-east-1")
    stub = Stubber(client)
    stub.add_response("describe_cluster_versions", {"clusterVersions": []}, {"clusterVersions": ["1.99"]})
    stub.activate()
    assert preflight.check_eks_version(client, "1.99").status == "FAIL"
