"""Preflight: the GPU capacity reservation / Capacity Block and the EKS version's support status.

moto 5.2.5 implements neither DescribeCapacityReservations nor EKS DescribeClusterVersions, so the
answers come from botocore Stubbers on real clients: request parameters and response shapes are
checked against the services' own models.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber
from helpers import engine_config_with, validate_values

from llm_pd_eks.config import PROJECT, StackConfig, validate_engine_config
from llm_pd_eks_tools.ops import preflight

RID = "cr-0123456789abcdef0"
PG = "odcr-p5-us-east-1c"
PG_ARN = f"arn:aws:ec2:us-east-1:123456789012:placement-group/{PG}"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def config(capacity, min_size=2, max_size=4, desired=None, **gpu):
    return validate_values(
        {
            "network": {"availabilityZones": ["us-east-1a", "us-east-1c"]},
            "gpuNodes": {
                "instanceType": "p5.48xlarge",
                "availabilityZone": "us-east-1c",
                "capacity": capacity,
                "minSize": min_size,
                "desiredSize": min_size if desired is None else desired,
                "maxSize": max_size,
                **gpu,
            },
        },
        region="us-east-1",
    )


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
    """An active targeted ODCR of 4 x p5.48xlarge in us-east-1c, in no placement group."""
    return {
        "CapacityReservationId": RID,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1c",
        "State": "active",
        "TotalInstanceCount": 4,
        "AvailableInstanceCount": 4,
        "ReservationType": "default",
        "InstanceMatchCriteria": "targeted",
        **changes,
    }


def block(**changes) -> dict:
    """An active Capacity Block of 4 x p5.48xlarge, two days long, started an hour before NOW."""
    return reservation(
        **{
            "ReservationType": "capacity-block",
            "StartDate": NOW - timedelta(hours=1),
            "EndDate": NOW + timedelta(days=2),
            **changes,
        }
    )


def check(cr: dict, capacity) -> preflight.Result:
    return preflight.check_capacity(ec2_answering(cr), config(capacity), now=NOW)


def test_matching_active_reservation_passes():
    result = check(reservation(), {"reservationId": RID})
    assert result.status == "ok", result
    assert RID in result.detail and "active" in result.detail and "targeted" in result.detail


def test_matching_active_capacity_block_passes_and_shows_its_window():
    result = check(block(), {"capacityBlockId": RID})
    assert result.status == "ok", result
    assert "Capacity Block" in result.detail and "window 2026-12-01T11:00:00+00:00 to 2026-12-03T12:00" in result.detail


def test_scheduled_capacity_block_inside_the_ready_timeout_passes_and_shows_its_start():
    start = NOW + timedelta(minutes=30)  # serving.readyTimeoutMinutes defaults to 60
    cr = block(State="scheduled", StartDate=start)
    result = check(cr, {"capacityBlockId": RID})
    assert result.status == "ok", result
    assert "starts 2026-12-01T12:30:00+00:00" in result.detail


def served(capacity) -> StackConfig:
    """prod (p5.48xlarge in us-east-1c, with a RayService) on `capacity`, its GPU group no larger than the
    fixtures' 4-instance reservations (and so on Recreate: NewCluster's second cluster would not fit)."""
    config, secret_keys = engine_config_with("prod", "gpuNodes", capacity=capacity, maxSize=4)
    serving = f"{PROJECT}:serving"
    config[serving] = json.dumps({**json.loads(config[serving]), "upgradeStrategy": "Recreate"})
    return validate_engine_config(config, secret_keys)


@pytest.mark.parametrize(
    "changes, expected",
    [
        (
            {"StartDate": NOW + timedelta(hours=3), "State": "scheduled"},
            "it starts 2026-12-01T15:00:00+00:00, after `up`'s wait for the RayService "
            "(serving.readyTimeoutMinutes {t})",
        ),
        (
            {"EndDate": None},  # set below: 30 minutes' notice + the ready timeout - 1 minute from NOW
            "and EC2 terminates its instances from 30 minutes before",
        ),
        ({"ReservationType": "default"}, "it is not a Capacity Block (ReservationType default)"),
    ],
)
def test_capacity_block_window_and_kind(changes, expected):
    cfg = served({"capacityBlockId": RID})
    t = cfg.serving.ready_timeout_minutes
    changes = {k: (NOW + timedelta(minutes=30 + t - 1) if k == "EndDate" else v) for k, v in changes.items()}
    result = preflight.check_capacity(ec2_answering(block(**changes)), cfg, now=NOW)
    assert result.status == "FAIL" and expected.format(t=t) in result.detail, result
    assert "\n" not in result.detail
    # a minute more and the same block fits
    if "EndDate" in changes:
        later = {"EndDate": NOW + timedelta(minutes=30 + t)}
        assert preflight.check_capacity(ec2_answering(block(**later)), cfg, now=NOW).status == "ok"


def test_scheduled_block_right_at_the_ready_timeout_passes():
    cfg = served({"capacityBlockId": RID})
    start = NOW + timedelta(minutes=cfg.serving.ready_timeout_minutes)
    result = preflight.check_capacity(ec2_answering(block(State="scheduled", StartDate=start)), cfg, now=NOW)
    assert result.status == "ok", result


def test_without_serving_only_the_end_matters():
    late = block(State="scheduled", StartDate=NOW + timedelta(days=1))
    assert check(late, {"capacityBlockId": RID}).status == "ok"  # nothing waits for the GPU nodes
    ending = block(EndDate=NOW + timedelta(minutes=29))
    result = check(ending, {"capacityBlockId": RID})
    assert result.status == "FAIL" and "no RayService to wait for" in result.detail


def test_capacity_block_configured_as_odcr_fails():
    result = check(block(), {"reservationId": RID})
    assert result.status == "FAIL" and f"configure it as {{capacityBlockId: {RID}}}" in result.detail


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"State": "expired"}, "state is expired"),
        ({"InstanceType": "p5e.48xlarge"}, "it reserves p5e.48xlarge, gpuNodes.instanceType is p5.48xlarge"),
        ({"AvailabilityZone": "us-east-1a"}, "it is in us-east-1a, gpuNodes.availabilityZone is us-east-1c"),
        ({"TotalInstanceCount": 1}, "it holds 1 instance(s), gpuNodes.minSize is 2"),
        (
            {"PlacementGroupArn": PG_ARN},
            f"it was created in cluster placement group '{PG}' and serves only instances "
            f"launched there: set gpuNodes.capacity.placementGroup to '{PG}'",
        ),
    ],
)
def test_one_wrong_field_fails(changes, expected):
    result = check(reservation(**changes), {"reservationId": RID})
    assert result.status == "FAIL" and expected in result.detail, result


@pytest.mark.parametrize(
    "arn, configured, status, expected",
    [
        (PG_ARN, PG, "ok", ""),
        (
            PG_ARN,
            "other-group",
            "FAIL",
            f"it is in placement group '{PG}', gpuNodes.capacity.placementGroup is 'other-group'",
        ),
        (None, PG, "FAIL", f"it is in no placement group: remove gpuNodes.capacity.placementGroup ('{PG}')"),
    ],
)
def test_reservation_placement_group(arn, configured, status, expected):
    cr = reservation(**({"PlacementGroupArn": arn} if arn else {}))
    result = check(cr, {"reservationId": RID, "placementGroup": configured})
    assert result.status == status and expected in result.detail, result


def test_open_reservation_is_a_warning():
    result = check(reservation(InstanceMatchCriteria="open"), {"reservationId": RID})
    assert result.status == "warning" and "it is open: any matching instance in the account" in result.detail


@pytest.mark.parametrize(
    "total, change, status",
    [
        (4, None, "ok"),  # recreate (the reservation default): maxSize 4, no surge
        (3, None, "warning"),  # Cluster Autoscaler cannot reach maxSize
        (5, "blueGreen", "warning"),  # maxSize 4 + desiredSize 2 during a blue/green roll = 6
        (6, "blueGreen", "ok"),
    ],
)
def test_reservation_size_against_max_size_and_the_roll_surge(total, change, status):
    capacity = {"reservationId": RID}
    gpu = {} if change is None else {"templateChange": change}
    result = preflight.check_capacity(
        ec2_answering(reservation(TotalInstanceCount=total, AvailableInstanceCount=total)),
        config(capacity, **gpu),
        now=NOW,
    )
    assert result.status == status, result
    if status == "warning":
        assert f"holds {total} instance(s) this stack can use, fewer than maxSize 4" in result.detail
        assert ("plus 2 for a blue/green template change" in result.detail) is (change == "blueGreen")


def test_vcpu_quota_counts_the_blue_green_surge():
    from botocore.stub import ANY

    quotas = boto3.client("service-quotas", region_name="us-east-1")
    stub = Stubber(quotas)
    answer = {"Quota": {"QuotaCode": "L-417A185B", "QuotaName": "Running On-Demand P instances", "Value": 1000.0}}
    stub.add_response("get_service_quota", answer, {"ServiceCode": "ec2", "QuotaCode": ANY})
    stub.activate()
    cfg = config("onDemand")  # blueGreen: maxSize 4 + desiredSize 2 nodes of 192 vCPUs = 1152
    result = preflight.check_vcpu_quota(
        quotas, "gpu-vcpu-quota", "L-417A185B", cfg.gpu_nodes.max_size, 192, cfg.gpu_nodes.roll_surge()
    )
    assert (
        result.status == "FAIL"
        and "6 nodes (maxSize 4 + 2 for a blue/green roll) x 192 vCPUs need 1152" in result.detail
    )


def test_missing_reservation_fails():
    ec2 = ec2_answering(error="InvalidCapacityReservationId.NotFound")
    result = preflight.check_capacity(ec2, config({"reservationId": RID}))
    assert result.status == "FAIL" and "does not exist" in result.detail


def test_on_demand_needs_no_call():
    client = boto3.client("ec2", region_name="us-east-1")
    with Stubber(client) as stub:  # any call would raise: nothing is queued
        result = preflight.check_capacity(client, config("onDemand"))
        stub.assert_no_pending_responses()
    # nothing to ask EC2, and the report says so plainly and what a reservation would hold
    assert result.status == "warning" and result.detail.startswith("on demand: NOT checked")
    assert "InsufficientInstanceCapacity" in result.detail and "reservationId" in result.detail


def eks_answering(status: str):
    client = boto3.client("eks", region_name="us-east-1")
    stub = Stubber(client)
    stub.add_response(
        "describe_cluster_versions",
        {
            "clusterVersions": [
                {
                    "clusterVersion": "1.33",
                    "versionStatus": status,
                    "status": status,
                    "endOfStandardSupportDate": datetime(2026, 7, 29, tzinfo=UTC),
                    "endOfExtendedSupportDate": datetime(2027, 7, 29, tzinfo=UTC),
                }
            ]
        },
        {"clusterVersions": ["1.33"]},
    )
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


def ec2_with_own_instances(cr: dict, own: int):
    """DescribeCapacityReservations, then DescribeInstances for this stack's instances in it."""
    client = boto3.client("ec2", region_name="us-east-1")
    stub = Stubber(client)
    stub.add_response(
        "describe_capacity_reservations", {"CapacityReservations": [cr]}, {"CapacityReservationIds": [RID]}
    )
    filters = [
        {"Name": "capacity-reservation-id", "Values": [RID]},
        {"Name": "tag:stack", "Values": ["prod"]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ]
    instances = [{"InstanceId": f"i-{n:017x}"} for n in range(own)]
    stub.add_response("describe_instances", {"Reservations": [{"Instances": instances}]}, {"Filters": filters})
    stub.activate()
    return client, stub


@pytest.mark.parametrize(
    "available, own, status",
    [
        (4, 0, "ok"),  # a first `up`: every slot free
        (1, 0, "FAIL"),  # three slots held by other instances: minSize 2 cannot launch
        (0, 4, "ok"),  # this stack's own four nodes hold every slot (a later `up`)
        (0, 1, "FAIL"),
    ],
)
def test_free_slots_decide_not_the_reservations_size(available, own, status):
    client, stub = ec2_with_own_instances(reservation(AvailableInstanceCount=available), own)
    result = preflight.check_capacity(client, config({"reservationId": RID}), now=NOW, stack="prod")
    stub.assert_no_pending_responses()
    assert result.status == status, result
    if status == "FAIL":
        assert f"only {available} of its 4 instance(s) are free (AvailableInstanceCount)" in result.detail
