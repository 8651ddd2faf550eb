"""Rules 1-5 (EFA GPU node group) through the real analyzer protocol, both ways, first-preview
variants included (every ID unknown; resources linked only by property dependencies)."""

from __future__ import annotations

import pytest
from helpers import LAUNCH_TEMPLATE, NODE_GROUP, SUBNET
from policy_fixtures import (
    UNKNOWN,
    Res,
    efa_interfaces,
    gpu_stack,
    judge,
    mandatory,
    of,
    without_deps,
)

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES

TWO_AZS = ("us-west-2a", "us-west-2b")


@pytest.mark.parametrize("unknown_ids", [False, True], ids=["known-ids", "first-preview"])
@pytest.mark.parametrize("instance_type", sorted(GPU_INSTANCE_TYPES))
def test_compliant_gpu_stack_passes_every_rule(instance_type, unknown_ids):
    verdicts = judge(gpu_stack(instance_type, unknown_ids=unknown_ids))
    assert verdicts == []


def test_compliant_gpu_stack_linked_only_by_ids_passes():
    assert judge(without_deps(gpu_stack())) == []


# -- 1. one AZ ---------------------------------------------------------------------------------
@pytest.mark.parametrize("unknown_ids", [False, True], ids=["known-ids", "first-preview"])
def test_gpu_group_across_two_azs_is_refused(unknown_ids):
    stack = gpu_stack(azs=TWO_AZS, unknown_ids=unknown_ids)
    found = of(judge(stack), "gpu-node-group-single-az")
    assert len(found) == 1
    assert found[0].urn == stack["ng"].urn
    assert "gpu-nodes-ng" in found[0].message and "us-west-2a" in found[0].message
    assert "us-west-2b" in found[0].message and "single AZ" in found[0].message


def test_gpu_group_across_azs_found_through_subnet_ids_without_dependencies():
    found = of(judge(without_deps(gpu_stack(azs=TWO_AZS))), "gpu-node-group-single-az")
    assert [v.urn for v in found] == [gpu_stack()["ng"].urn]


def test_unknown_subnet_az_is_no_violation():
    stack = gpu_stack(azs=TWO_AZS, unknown_ids=True)
    stack["subnet-us-west-2b"].props["availabilityZone"] = UNKNOWN
    assert of(judge(stack), "gpu-node-group-single-az") == []


def test_gpu_type_from_the_node_groups_own_instance_types():
    stack = gpu_stack(azs=TWO_AZS)
    del stack["lt"].props["instanceType"]
    stack["ng"].props["instanceTypes"] = ["p5.48xlarge"]
    assert len(of(judge(stack), "gpu-node-group-single-az")) == 1


def test_cpu_node_group_across_azs_is_fine():
    stack = gpu_stack(azs=TWO_AZS)
    stack["lt"].props["instanceType"] = "m7i.2xlarge"
    assert of(judge(stack), "gpu-node-group-single-az") == []


def test_efa_table_comes_from_policy_config():
    """A stack that drops p5.48xlarge from efaGpuTypes no longer treats it as an EFA GPU type."""
    stack = gpu_stack(azs=TWO_AZS)
    table = {t: c.efa_interfaces for t, c in GPU_INSTANCE_TYPES.items() if t != "p5.48xlarge"}
    verdicts = judge(stack, {"gpu-node-group-single-az": {"efaGpuTypes": table}})
    assert of(verdicts, "gpu-node-group-single-az") == []
    assert len(of(judge(stack), "gpu-node-group-single-az")) == 1  # the default table still has it


def test_pulumi_eks_managed_node_group_judged_once_through_its_child():
    """Real preview: eks:index:ManagedNodeGroup with an aws:eks NodeGroup child -> one verdict (child)."""
    stack = gpu_stack(azs=TWO_AZS, unknown_ids=True)
    mng = Res("eks:index:ManagedNodeGroup", "gpu", dict(stack["ng"].props), deps=dict(stack["ng"].deps))
    stack["ng"].parent = mng
    found = of(judge({**stack, "mng": mng}), "gpu-node-group-single-az")
    assert [v.urn for v in found] == [stack["ng"].urn]
    assert "eks:index:ManagedNodeGroup$aws:eks/nodeGroup:NodeGroup" in found[0].urn


def test_pulumi_eks_managed_node_group_without_children_is_judged_itself():
    """Under mocks pulumi-eks components create no children: the component's own inputs count."""
    stack = gpu_stack(azs=TWO_AZS, unknown_ids=True)
    ng = stack.pop("ng")
    mng = Res("eks:index:ManagedNodeGroup", "gpu", ng.props, deps=ng.deps)
    assert [v.urn for v in of(judge({**stack, "mng": mng}), "gpu-node-group-single-az")] == [mng.urn]


# -- 2. EFA on every card ----------------------------------------------------------------------
@pytest.mark.parametrize("unknown_ids", [False, True], ids=["known-ids", "first-preview"])
def test_gpu_launch_template_without_efa_is_refused(unknown_ids):
    stack = gpu_stack(unknown_ids=unknown_ids)
    stack["lt"].props["networkInterfaces"] = [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]
    found = of(judge(stack), "efa-on-gpu-nodes")
    assert [v.urn for v in found] == [stack["lt"].urn]
    assert "gpu-nodes-lt" in found[0].message and "gpu-nodes-ng" in found[0].message
    assert "'efa-only'" in found[0].message


def test_gpu_launch_template_found_through_the_node_group_only():
    """The LT has no instanceType; the node group's instanceTypes make it a GPU template."""
    stack = gpu_stack(unknown_ids=True)
    del stack["lt"].props["instanceType"]
    del stack["lt"].props["networkInterfaces"]
    stack["ng"].props["instanceTypes"] = ["p4d.24xlarge"]
    found = of(judge(stack), "efa-on-gpu-nodes")
    assert [v.urn for v in found] == [stack["lt"].urn]
    assert "p4d.24xlarge has 4 network card(s)" in found[0].message  # catalog: p4d.24xlarge, 4 EFA


def test_gpu_node_group_without_launch_template_is_refused():
    stack = gpu_stack()
    del stack["ng"].props["launchTemplate"]
    del stack["ng"].deps["launchTemplate"]
    del stack["lt"]
    stack["ng"].props["instanceTypes"] = ["p5.48xlarge"]
    verdicts = judge(stack)
    assert [v.urn for v in of(verdicts, "efa-on-gpu-nodes")] == [stack["ng"].urn]
    assert [v.urn for v in of(verdicts, "gpu-cluster-placement-group")] == [stack["ng"].urn]


def test_unknown_network_interfaces_are_refused_as_unreadable():
    stack = gpu_stack(unknown_ids=True)
    stack["lt"].props["networkInterfaces"] = UNKNOWN
    # built in the same apply: no rule can count the EFA interfaces, so it is refused, once
    assert [v.policy for v in mandatory(judge(stack))] == ["efa-on-gpu-nodes"]


@pytest.mark.parametrize("instance_type", [t for t, c in GPU_INSTANCE_TYPES.items() if c.efa_interfaces > 1])
def test_fewer_efa_interfaces_than_cards_is_refused(instance_type):
    """Mandatory: the README promises EFA on every card, and a missing card fails nothing at deploy time."""
    cards = GPU_INSTANCE_TYPES[instance_type].efa_interfaces
    stack = gpu_stack(instance_type)
    stack["lt"].props["networkInterfaces"] = efa_interfaces(cards - 1)
    verdicts = judge(stack)
    found = of(verdicts, "efa-interface-count")
    assert [v.urn for v in mandatory(verdicts)] == [stack["lt"].urn] == [v.urn for v in found]
    assert f"{cards - 1} EFA interface(s)" in found[0].message and f"has {cards} network card(s)" in found[0].message
    assert f"cards without EFA: [{cards - 1}]" in found[0].message  # the one card left without EFA


def test_p5_with_one_of_32_interfaces_or_all_on_card_0_is_refused():
    one = gpu_stack("p5.48xlarge")
    one["lt"].props["networkInterfaces"] = efa_interfaces(1)
    assert "cards without EFA: [1, 2," in of(judge(one), "efa-interface-count")[0].message
    stacked = gpu_stack("p5.48xlarge")
    stacked["lt"].props["networkInterfaces"] = [dict(n, networkCardIndex=0) for n in efa_interfaces(32)]
    (found,) = of(judge(stacked), "efa-interface-count")
    assert "more than one EFA interface on card(s) [0]" in found.message


def test_efa_on_duplicate_card_still_misses_a_card():
    stack = gpu_stack("p4d.24xlarge")  # 4 cards in the catalog
    nics = efa_interfaces(4)
    nics[3]["networkCardIndex"] = 2
    stack["lt"].props["networkInterfaces"] = nics
    found = of(judge(stack), "efa-interface-count")
    assert len(found) == 1 and "cards without EFA: [3]" in found[0].message
    assert "more than one EFA interface on card(s) [2]" in found[0].message


# -- 3. cluster placement ----------------------------------------------------------------------
def test_gpu_launch_template_without_placement_is_refused():
    stack = gpu_stack()
    del stack["lt"].props["placement"]
    del stack["lt"].deps["placement"]
    found = of(judge(stack), "gpu-cluster-placement-group")
    assert [v.urn for v in found] == [stack["lt"].urn]
    assert "sets no placement group" in found[0].message and "strategy 'cluster'" in found[0].message


@pytest.mark.parametrize("link", ["first-preview", "dependencies", "ids-only"])
def test_spread_placement_group_is_refused(link):
    stack = gpu_stack(unknown_ids=link == "first-preview")
    stack["pg"].props["strategy"] = "spread"
    if link == "ids-only":
        stack = without_deps(stack)
    found = of(judge(stack), "gpu-cluster-placement-group")
    assert [v.urn for v in found] == [stack["lt"].urn]
    assert "strategy 'spread'" in found[0].message and "gpu-nodes-pg" in found[0].message


def test_unknown_strategy_or_unresolvable_group_is_no_violation():
    stack = gpu_stack(unknown_ids=True)
    stack["pg"].props["strategy"] = UNKNOWN
    assert of(judge(stack), "gpu-cluster-placement-group") == []
    external = without_deps(gpu_stack())
    external["lt"].props["placement"] = {"groupName": "made-elsewhere"}
    verdicts = judge(external)
    assert of(verdicts, "gpu-cluster-placement-group") == []
    # ...but a literal name outside the stack is not "unknown": the blind-spot rule names it.
    (found,) = of(verdicts, "gpu-references-in-stack")
    assert "placement group 'made-elsewhere'" in found.message


def test_cpu_launch_template_needs_no_placement_group():
    stack = gpu_stack()
    stack["lt"].props["instanceType"] = "m7i.2xlarge"
    del stack["lt"].props["placement"]
    assert of(judge(stack), "gpu-cluster-placement-group") == []


# -- 4. IMDSv2 ---------------------------------------------------------------------------------
SYSTEM_LT = {"instanceType": "m7i.xlarge"}
HOP1 = {"httpPutResponseHopLimit": 1}


@pytest.mark.parametrize(
    "metadata, violation",
    [
        ({"httpTokens": "required", "httpEndpoint": "enabled", **HOP1}, False),
        ({"httpEndpoint": "disabled"}, False),  # no IMDS at all
        ({"httpTokens": UNKNOWN, "httpPutResponseHopLimit": UNKNOWN}, False),  # first preview: can't tell
        ({"httpTokens": "optional", "httpEndpoint": "enabled", **HOP1}, True),
        ({"httpEndpoint": "enabled", **HOP1}, True),  # EC2 default: optional
        (None, True),
    ],
)
def test_imdsv2_on_every_launch_template(metadata, violation):
    props = {k: v for k, v in SYSTEM_LT.items() if k != "metadataOptions"}
    if metadata is not None:
        props["metadataOptions"] = metadata
    lt = Res(LAUNCH_TEMPLATE, "system-nodes-lt", props)
    found = of(judge([lt]), "launch-template-imdsv2")
    assert [v.urn for v in found] == ([lt.urn] if violation else [])
    if violation:
        assert "system-nodes-lt" in found[0].message and "httpTokens: 'required'" in found[0].message


@pytest.mark.parametrize("hops, violation", [(1, False), (2, True), (None, True), ("one", True), (UNKNOWN, False)])
def test_imds_hop_limit(hops, violation):
    """Hop limit 2+ lets every pod reach the node role's credentials; unset leaves it to the AMI."""
    metadata = {"httpTokens": "required", "httpEndpoint": "enabled"}
    if hops is not None:
        metadata["httpPutResponseHopLimit"] = hops
    lt = Res(LAUNCH_TEMPLATE, "system-nodes-lt", {**SYSTEM_LT, "metadataOptions": metadata})
    found = of(judge([lt]), "launch-template-imdsv2")
    assert [v.urn for v in found] == ([lt.urn] if violation else [])
    if violation:
        assert "httpPutResponseHopLimit" in found[0].message
    if hops == 2:  # the limit is policy config
        assert of(judge([lt], {"launch-template-imdsv2": {"maxHopLimit": 2}}), "launch-template-imdsv2") == []


# -- 5. private GPU nodes ----------------------------------------------------------------------
@pytest.mark.parametrize("unknown_ids", [False, True], ids=["known-ids", "first-preview"])
def test_gpu_nodes_in_public_subnet_are_refused(unknown_ids):
    stack = gpu_stack(unknown_ids=unknown_ids)
    stack["subnet-us-west-2a"].props["mapPublicIpOnLaunch"] = True
    found = of(judge(stack), "gpu-nodes-private")
    assert [v.urn for v in found] == [stack["ng"].urn]
    assert "network-private-us-west-2a" in found[0].message and "mapPublicIpOnLaunch" in found[0].message


def test_unknown_public_ip_mapping_is_no_violation():
    stack = gpu_stack(unknown_ids=True)
    stack["subnet-us-west-2a"].props["mapPublicIpOnLaunch"] = UNKNOWN
    assert of(judge(stack), "gpu-nodes-private") == []


def test_gpu_launch_template_asking_for_public_ip_is_refused():
    stack = gpu_stack()
    stack["lt"].props["networkInterfaces"][0]["associatePublicIpAddress"] = "true"
    found = of(judge(stack), "gpu-nodes-private")
    assert [v.urn for v in found] == [stack["lt"].urn]


def test_cpu_nodes_in_public_subnet_are_not_this_rules_business():
    subnet = Res(SUBNET, "public-a", {"availabilityZone": "us-west-2a", "mapPublicIpOnLaunch": True})
    ng = Res(
        NODE_GROUP, "bastion", {"instanceTypes": ["t3.small"], "subnetIds": [UNKNOWN]}, deps={"subnetIds": [subnet]}
    )
    assert of(judge([subnet, ng]), "gpu-nodes-private") == []
