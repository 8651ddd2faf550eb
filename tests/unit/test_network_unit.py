"""Network, one property per test, with Pulumi's public mocks (the fast tier)."""

from __future__ import annotations

import pulumi

from llm_pd_eks.config import NetworkConfig
from llm_pd_eks.network import CLUSTER_TAG_VALUE, Network, NetworkArgs

AZS = ["us-west-2a", "us-west-2b", "us-west-2c"]


def _network(nat: str = "single") -> Network:
    config = NetworkConfig.model_validate({"availabilityZones": AZS, "natGateways": nat})
    return Network("net", NetworkArgs(config=config, cluster_name="llm", region="us-west-2"))


@pulumi.runtime.test
def test_private_subnets_give_no_public_ips(mocks):
    network = _network()

    def check(flags):
        assert flags == [False] * len(AZS)

    return pulumi.Output.all(*[s.map_public_ip_on_launch for s in network.private_subnets.values()]).apply(check)


@pulumi.runtime.test
def test_one_private_subnet_per_az(mocks):
    network = _network()

    def check(azs):
        assert azs == AZS

    return pulumi.Output.all(*[s.availability_zone for s in network.private_subnets.values()]).apply(check)


@pulumi.runtime.test
def test_subnets_are_shared_with_the_cluster(mocks):
    network = _network()
    subnets = [*network.private_subnets.values(), *network.public_subnets.values()]

    def check(tag_sets):
        assert all(tags["kubernetes.io/cluster/llm"] == CLUSTER_TAG_VALUE for tags in tag_sets)

    return pulumi.Output.all(*[s.tags for s in subnets]).apply(check)


def test_single_mode_has_one_nat_gateway(mocks):
    assert len(_network("single").nat_gateways) == 1


@pulumi.runtime.test
def test_per_az_mode_puts_a_nat_gateway_in_every_public_subnet(mocks):
    network = _network("perAz")
    public_ids = pulumi.Output.all(*[s.id for s in network.public_subnets.values()])
    nat_subnet_ids = pulumi.Output.all(*[n.subnet_id for n in network.nat_gateways])

    def check(ids):
        public, nat = ids
        assert sorted(nat) == sorted(public) and len(set(public)) == len(AZS)

    return pulumi.Output.all(public_ids, nat_subnet_ids).apply(check)


@pulumi.runtime.test
def test_nat_gateways_get_elastic_ips_of_their_own(mocks):
    network = _network("perAz")

    def check(allocations):
        assert len(set(allocations)) == len(AZS)
        assert all(mocks.by_id(a).type == "aws:ec2/eip:Eip" for a in allocations)

    return pulumi.Output.all(*[n.allocation_id for n in network.nat_gateways]).apply(check)
