"""GcsStore, with Pulumi's public mocks: the input the serving config alone cannot rule out."""

from __future__ import annotations

import pulumi
import pytest

from llm_pd_eks.gcs_store import GcsStore, GcsStoreArgs


def _store(subnets: list[str]) -> GcsStore:
    args = GcsStoreArgs("llm", "vpc-0a1b2c3d4e5f60001", subnets, "sg-0a1b2c3d4e5f60001")
    return GcsStore("gcs", args, "cache.t4g.small")


def test_one_subnet_is_refused_before_anything_registers(mocks):
    with pytest.raises(pulumi.InputPropertyError) as info:
        _store(["subnet-0a1b2c3d4e5f60001"])
    assert info.value.property_path == "private_subnet_ids" and "second availability zone" in info.value.reason
    assert mocks.registered == []


@pulumi.runtime.test
def test_the_store_spans_the_given_subnets(mocks):
    subnets = ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"]
    store = _store(subnets)

    def check(_):
        (group,) = mocks.of_type("aws:elasticache/subnetGroup:SubnetGroup")
        assert group.inputs["subnetIds"] == subnets

    return store.replication_group.id.apply(check)
