"""Judging by capability: the strictest of several GPU types, EC2's own EFA cards, address sets,
a group admitting itself by ID, secrets wherever a ConfigMap or a value can hold them, current GPU
types judged rather than refused. Each case is a known-good stack changed once, through the real
analyzer protocol."""

from __future__ import annotations

import base64

import pytest
from policy_fixtures import UNKNOWN, Res, efa_interfaces, gpu_container, gpu_stack, judge, mandatory, of

from llm_pd_eks_policy.efa_table import EFA_NETWORK_CARDS

SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
HF_TOKEN = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"  # token-shaped, not a real token


# -- GPU types the table now knows: judged, not refused --------------------------------------------
@pytest.mark.parametrize("instance_type", ["p6-b200.48xlarge", "p6-b300.48xlarge", "g6e.16xlarge", "gr6.8xlarge"])
def test_current_efa_gpu_types_pass_when_compliant(instance_type):
    assert mandatory(judge(gpu_stack(instance_type))) == []


def test_p6_b300_needs_efa_on_cards_1_to_16_not_0_to_15():
    """EC2: p6-b300 has 17 network cards and card 0 takes no EFA interface."""
    assert EFA_NETWORK_CARDS["p6-b300.48xlarge"][0] == 1
    stack = gpu_stack("p6-b300.48xlarge")
    stack["lt"].props["networkInterfaces"] = efa_interfaces(16)  # cards 0..15
    (found,) = of(judge(stack), "efa-interface-count")
    assert "cards without EFA: [16]" in found.message and "[0] carry no EFA" in found.message


# -- several GPU types: the strictest holds --------------------------------------------------------
def test_mixed_group_is_held_to_the_type_with_most_efa_cards():
    stack = gpu_stack("p4d.24xlarge")  # 4 EFA interfaces
    del stack["lt"].props["instanceType"]
    stack["ng"].props["instanceTypes"] = ["p4d.24xlarge"]
    assert mandatory(judge(stack)) == []
    stack["ng"].props["instanceTypes"] = ["p4d.24xlarge", "p5.48xlarge"]  # p5 has 32 cards
    (found,) = of(judge(stack), "efa-interface-count")
    assert "p5.48xlarge (the strictest of p4d.24xlarge, p5.48xlarge)" in found.message


def test_unpinned_gpu_pod_takes_the_largest_efa_share_of_the_stacks_types():
    from policy_fixtures import ray_service

    p4d, p5 = gpu_stack("p4d.24xlarge"), gpu_stack("p5.48xlarge")
    for res in p5.values():
        res.name = f"{res.name}-p5"
    service = ray_service(worker=gpu_container(gpus=8, efa=4))  # p4d's share, not p5's 32
    only_p4d = judge([*p4d.values(), service])
    assert of(only_p4d, "ray-gpu-pods-efa") == []
    (found,) = of(judge([*p4d.values(), *p5.values(), service]), "ray-gpu-pods-efa")
    assert "request 32 'vpc.amazonaws.com/efa'" in found.message and "p5.48xlarge" in found.message


# -- security groups: address sets, admitting itself by ID ----------------------------------------
def _rules(stack, **source) -> list[Res]:
    return [
        Res(
            SG_RULE,
            f"efa-{d}",
            {"type": d, "protocol": "-1", "fromPort": 0, "toPort": 0, "securityGroupId": UNKNOWN, **source},
            deps={
                "securityGroupId": [stack["sg"]],
                **({"sourceSecurityGroupId": [stack["sg"]]} if source.get("sourceSecurityGroupId") else {}),
            },
        )
        for d in ("ingress", "egress")
    ]


@pytest.mark.parametrize("source", [UNKNOWN, "sg-efa"], ids=["first-preview", "known-id"])
def test_efa_group_admitting_itself_by_source_security_group_id_passes(source):
    stack = gpu_stack()
    del stack["sg"].props["ingress"], stack["sg"].props["egress"]  # inline rules, even [], drop separate ones
    stack["sg"].props["id"] = "sg-efa"
    assert of(judge(stack), "efa-security-group")
    rules = _rules(stack, sourceSecurityGroupId=source)
    if source != UNKNOWN:  # linked by the literal ID only
        for rule in rules:
            rule.deps.pop("sourceSecurityGroupId")
    assert of(judge([*stack.values(), *rules]), "efa-security-group") == []


def test_ingress_ranges_that_together_cover_the_internet_are_the_internet():
    stack = gpu_stack()
    slices = [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": [f"{i}.0.0.0/8"]} for i in range(256)]
    stack["sg"].props["ingress"] = [*stack["sg"].props["ingress"], *slices]  # no single rule wider than /8
    (found,) = [v for v in of(judge(stack), "efa-security-group") if v.urn == stack["sg"].urn]
    assert "together (0.0.0.0/0)" in found.message


def test_a_private_range_is_not_the_internet():
    stack = gpu_stack()
    stack["sg"].props["ingress"] = [
        *stack["sg"].props["ingress"],
        {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["10.0.0.0/8"]},
    ]
    assert of(judge(stack), "efa-security-group") == []


# -- secrets wherever they can sit ------------------------------------------------------------------
def _config_map(**fields) -> Res:
    return Res(CONFIG_MAP, "settings", {"metadata": {"name": "settings", "namespace": "llm"}, **fields})


def test_secret_in_config_map_binary_data():
    assert (
        of(judge([_config_map(binaryData={"model": base64.b64encode(b"qwen").decode()})]), "no-literal-secrets-in-pods")
        == []
    )
    (found,) = of(
        judge([_config_map(binaryData={"hub": base64.b64encode(HF_TOKEN.encode()).decode()})]),
        "no-literal-secrets-in-pods",
    )
    assert "binaryData hub" in found.message and HF_TOKEN not in found.message


@pytest.mark.parametrize(
    "value, violation",
    [
        ("$(HF_TOKEN_FROM_SECRET)", False),  # a Kubernetes variable reference, expanded from a Secret
        ("$" + HF_TOKEN, True),  # a literal that merely starts with "$"
        ("$(X)" + HF_TOKEN, True),
    ],
)
def test_dollar_prefixed_values_are_literals_unless_a_whole_reference(value, violation):
    stack_pod = Res(
        "kubernetes:core/v1:Pod",
        "p",
        {
            "metadata": {"name": "p", "namespace": "llm"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "env": [{"name": "HF_TOKEN", "value": value}]}]},
        },
    )
    assert bool(of(judge([stack_pod]), "no-literal-secrets-in-pods")) == violation


# -- Karpenter requirements as sets ------------------------------------------------------------------
def _pool(*requirements: dict) -> Res:
    return Res(
        "kubernetes:karpenter.sh/v1:NodePool",
        "general",
        {
            "spec": {
                "template": {
                    "spec": {
                        "requirements": list(requirements),
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    }
                }
            }
        },
    )


@pytest.mark.parametrize(
    "requirements, violation",
    [
        # every EFA GPU type EC2 lists is x86_64 (the generated table): an arm64-only pool launches none
        ([{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}], False),
        (
            [{"key": "karpenter.k8s.aws/instance-size", "operator": "In", "values": ["large", "xlarge", "2xlarge"]}],
            False,
        ),
        ([{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["16"]}], False),
        # a GPU category minus one family still launches the others
        (
            [
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["p"]},
                {"key": "karpenter.k8s.aws/instance-family", "operator": "NotIn", "values": ["p5", "p5e"]},
            ],
            True,
        ),
        ([{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}], True),
        ([{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["b200"]}], True),
        (
            [
                {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["0"]},
                {"key": "karpenter.k8s.aws/instance-size", "operator": "NotIn", "values": ["48xlarge"]},
            ],
            True,
        ),
    ],
)
def test_karpenter_requirements_are_evaluated_as_sets(requirements, violation):
    found = of(judge([_pool(*requirements)]), "gpu-references-in-stack")
    assert bool(found) == violation
    if violation:
        assert "may launch" in found[0].message


# -- IMDS inherited from the launch template --------------------------------------------------------
def test_instance_inheriting_imds_settings_from_a_compliant_template_passes():
    stack = gpu_stack()
    instance = Res(
        "aws:ec2/instance:Instance",
        "debug-node",
        {"launchTemplate": {"id": "lt-0123", "version": "1"}, "subnetId": "subnet-us-west-2a-id"},
        deps={"launchTemplate": [stack["lt"]], "subnetId": [stack["subnet-us-west-2a"]]},
    )
    assert of(judge([*stack.values(), instance]), "launch-template-imdsv2") == []
    # its own options, when it sets them, are judged
    instance.props["metadataOptions"] = {"httpTokens": "optional", "httpPutResponseHopLimit": 1}
    (found,) = of(judge([*stack.values(), instance]), "launch-template-imdsv2")
    assert "debug-node" in found.message and "httpTokens is 'optional'" in found.message
    # and a non-compliant template is refused where it is declared
    del instance.props["metadataOptions"]
    stack["lt"].props["metadataOptions"]["httpTokens"] = "optional"
    (found,) = of(judge([*stack.values(), instance]), "launch-template-imdsv2")
    assert "gpu-nodes-lt" in found.message


# -- resources that launch instances the joined view does not model: GPU-capable means refused ------
@pytest.mark.parametrize(
    "type_, props",
    [
        ("aws:ec2/fleet:Fleet", {"launchTemplateConfig": {"overrides": [{"instanceType": "p5.48xlarge"}]}}),
        ("aws:ec2/spotFleetRequest:SpotFleetRequest", {"launchSpecifications": [{"instanceType": "g6e.48xlarge"}]}),
        ("aws:ec2/spotInstanceRequest:SpotInstanceRequest", {"instanceType": "p4d.24xlarge"}),
        (
            "aws:ec2/fleet:Fleet",
            {
                "launchTemplateConfig": {
                    "overrides": [{"instanceRequirements": {"vcpuCount": {"min": 96}, "memoryMib": {"min": 1048576}}}]
                }
            },
        ),
        ("aws-native:ec2:Instance", {"instanceType": "p6-b200.48xlarge"}),
    ],
)
def test_unmodelled_launchers_of_gpu_types_are_refused(type_, props):
    (found,) = of(judge([Res(type_, "side-door", props)]), "gpu-references-in-stack")
    assert "side-door" in found.message and "cannot judge" in found.message


@pytest.mark.parametrize(
    "type_, props",
    [
        ("aws:ec2/spotInstanceRequest:SpotInstanceRequest", {"instanceType": "m7i.large"}),
        (
            "aws:ec2/fleet:Fleet",
            {
                "launchTemplateConfig": {
                    "overrides": [{"instanceRequirements": {"vcpuCount": {"min": 2}, "acceleratorCount": {"max": 0}}}]
                }
            },
        ),
    ],
)
def test_unmodelled_launchers_that_cannot_launch_gpus_pass(type_, props):
    assert of(judge([Res(type_, "cpu-fleet", props)]), "gpu-references-in-stack") == []


def test_asg_choosing_types_by_attributes_is_refused_unless_accelerators_are_excluded():
    requirements = {"vcpuCount": {"min": 8}, "memoryMib": {"min": 16384}}
    asg = Res(
        "aws:autoscaling/group:Group",
        "by-attributes",
        {
            "mixedInstancesPolicy": {
                "launchTemplate": {
                    "launchTemplateSpecification": {"launchTemplateId": "lt-cpu"},
                    "overrides": [{"instanceRequirements": requirements}],
                }
            },
            "vpcZoneIdentifiers": ["subnet-x"],
        },
    )
    assert of(judge([asg]), "gpu-references-in-stack")
    requirements["acceleratorCount"] = {"max": 0}
    assert of(judge([asg]), "gpu-references-in-stack") == []
