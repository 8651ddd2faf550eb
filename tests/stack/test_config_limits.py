"""Red-team cases against the stack config: each refused with one exact line.

Good input passes (the checked-in stacks, `GOOD` below); each test changes one thing and checks the
message names the key, says what is wrong and how to fix it, and repeats the user's value at most
~100 characters.
"""

from __future__ import annotations

import json

import botocore.session
import pytest
from helpers import config_problems, merged, validate_values

from llm_pd_eks.config import (
    EC2_INSTANCE_TYPES,
    EKS_KUBERNETES_VERSIONS,
    ConfigError,
    validate_engine_config,
)
from llm_pd_eks_tools.core.stack import load_stack_config
from llm_pd_eks_tools.core.stackfile import PROJECT

GOOD = {
    "network": {"vpcCidr": "10.0.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"]},
    "gpuNodes": {"instanceType": "g6e.12xlarge", "availabilityZone": "us-west-2a"},
}


def problems(overrides: dict) -> list[str]:
    return config_problems(merged(GOOD, overrides))


def engine_problems(extra: dict[str, str], secret_keys: tuple[str, ...] = (), stack: str = "dev") -> list[str]:
    config, secrets = load_stack_config("dev")
    with pytest.raises(ConfigError) as info:
        validate_engine_config({**config, **extra}, [*secrets, *secret_keys], stack=stack)
    return info.value.problems


# --- types: no coercion, one spelling --------------------------------------------------------------


@pytest.mark.parametrize("value, shown", [(True, "True"), ("3", "'3'"), (1e30, "1e+30"), (2.5, "2.5")])
def test_max_size_must_be_an_integer_not_coerced(value, shown):
    assert problems({"gpuNodes": {"maxSize": value}}) == [
        f"{PROJECT}:gpuNodes.maxSize: Input should be a valid integer (got {shown})"
    ]
    assert validate_values(merged(GOOD, {"gpuNodes": {"maxSize": 3}})).gpu_nodes.max_size == 3


def test_snake_case_spelling_is_an_unknown_key():
    assert problems({"gpuNodes": {"max_size": 3}}) == [f"{PROJECT}:gpuNodes.max_size: unknown key"]
    assert problems({"system_nodes": {}}) == [f"{PROJECT}:system_nodes: unknown key (did you mean 'systemNodes'?)"]


def test_protect_must_be_a_boolean():
    assert problems({"protect": "yes"}) == [f"{PROJECT}:protect: Input should be a valid boolean (got 'yes')"]
    assert validate_values(merged(GOOD, {"protect": True})).protect is True


# --- absurd sizes --------------------------------------------------------------------------------


def test_node_group_size_is_bounded_by_the_eks_quota():
    assert problems({"gpuNodes": {"maxSize": 10**9}}) == [
        f"{PROJECT}:gpuNodes.maxSize: Input should be less than or equal to 450 (got 1000000000)"
    ]
    assert validate_values(merged(GOOD, {"gpuNodes": {"maxSize": 450}})).gpu_nodes.max_size == 450


def test_disk_size_is_bounded_by_gp3():
    assert problems({"systemNodes": {"diskSizeGib": 16_385}}) == [
        f"{PROJECT}:systemNodes.diskSizeGib: Input should be less than or equal to 16384 (got 16385)"
    ]


def test_kubernetes_version_must_be_one_eks_released():
    listed = ", ".join(EKS_KUBERNETES_VERSIONS)
    assert problems({"cluster": {"kubernetesVersion": "1.99"}}) == [
        f"{PROJECT}:cluster.kubernetesVersion: 1.99 is not a Kubernetes version Amazon EKS has released; "
        f"choose one of {listed}"
    ]
    assert problems({"cluster": {"kubernetesVersion": 1.3}}) == [  # unquoted 1.30 in YAML is the float 1.3
        f"{PROJECT}:cluster.kubernetesVersion: Input should be a valid string (got 1.3)"
    ]
    cfg = validate_values(merged(GOOD, {"cluster": {"kubernetesVersion": "1.34"}}))
    assert cfg.cluster.kubernetes_version == "1.34"


# --- network ------------------------------------------------------------------------------------


def test_a_small_vpc_cannot_carve_subnets_aws_accepts():
    assert problems({"network": {"vpcCidr": "10.0.0.0/24"}}) == [
        f"{PROJECT}:network.publicSubnetCidrs: vpcCidr 10.0.0.0/24 carves /30 subnets, smaller than /28 (the "
        "smallest AWS allows); use a vpcCidr of /22 or larger, or set publicSubnetCidrs"
    ]
    cfg = validate_values(merged(GOOD, {"network": {"vpcCidr": "10.0.0.0/22"}}))
    assert cfg.network.public_cidrs() == ["10.0.3.128/28", "10.0.3.144/28"]


def test_explicit_subnets_smaller_than_a_28_are_refused():
    p = problems(
        {
            "network": {
                "vpcCidr": "10.0.0.0/24",
                "privateSubnetCidrs": ["10.0.0.0/26", "10.0.0.64/26"],
                "publicSubnetCidrs": ["10.0.0.128/29", "10.0.0.136/29"],
            }
        }
    )
    assert p == [
        f"{PROJECT}:network.publicSubnetCidrs: 10.0.0.128/29, 10.0.0.136/29 smaller than /28, the "
        "smallest subnet AWS allows"
    ]


def test_an_eighth_az_has_no_carved_private_subnet():
    azs = [f"us-west-2{c}" for c in "abcdefgh"]
    assert problems({"network": {"availabilityZones": azs}}) == [
        f"{PROJECT}:network.privateSubnetCidrs: the layout carved from vpcCidr has room for 7 subnets, not one "
        "for each of 8 availability zones; list at most 7 or set privateSubnetCidrs"
    ]
    cfg = validate_values(merged(GOOD, {"network": {"availabilityZones": azs[:7]}}))
    assert len(cfg.network.private_cidrs()) == len(cfg.network.public_cidrs()) == 7


@pytest.mark.parametrize(
    "cidr, kind",
    [
        ("127.0.0.0/16", "loopback"),
        ("224.0.0.0/16", "multicast"),
        ("169.254.0.0/16", "link-local"),
        ("240.0.0.0/16", "reserved (240.0.0.0/4)"),
        ("0.0.0.0/16", "'this network' (0.0.0.0/8)"),
    ],
)
def test_special_purpose_blocks_are_refused(cidr, kind):
    assert problems({"network": {"vpcCidr": cidr}}) == [
        f"{PROJECT}:network.vpcCidr: {cidr} is a {kind} block, which AWS does not route; use a private block "
        "such as 10.0.0.0/16"
    ]


def test_the_whole_internet_may_still_reach_the_api_endpoint():
    cfg = validate_values(merged(GOOD, {"cluster": {"publicAccessCidrs": ["0.0.0.0/0"]}}))
    assert cfg.cluster.public_access_cidrs == ["0.0.0.0/0"]
    assert problems({"cluster": {"publicAccessCidrs": ["127.0.0.1/32"]}}) == [
        f"{PROJECT}:cluster.publicAccessCidrs: 127.0.0.1/32 is a loopback block, which AWS does not route; use a "
        "private block such as 10.0.0.0/16"
    ]


# --- names --------------------------------------------------------------------------------------


def test_a_misspelt_system_instance_type_is_refused_with_a_suggestion():
    assert problems({"systemNodes": {"instanceType": "m7i.2xlarg"}}) == [
        f"{PROJECT}:systemNodes.instanceType: 'm7i.2xlarg' is not an EC2 instance type (did you mean 'm7i.2xlarge'?)"
    ]
    assert validate_values(merged(GOOD, {"systemNodes": {"instanceType": "c7i.4xlarge"}}))


def test_vendored_instance_types_equal_botocores_ec2_model():
    """llm_pd_eks/data/ec2_instance_types.json is botocore's EC2 `InstanceType` enum (drift check)."""
    model = botocore.session.get_session().get_service_model("ec2")
    assert EC2_INSTANCE_TYPES == frozenset(model.shape_for("InstanceType").enum)


def test_a_bad_region_names_the_aws_key():
    first = config_problems(GOOD, region="moon-1")[0]
    assert first == "aws:region: 'moon-1' is not an AWS region name such as 'us-west-2'"
    assert problems({"region": "us-east-1"}) == [
        f"{PROJECT}:region: unknown key; the region is the AWS provider's (pulumi config set aws:region us-west-2)"
    ]


def test_a_huge_value_is_echoed_at_most_100_characters():
    (p,) = problems({"gpuNodes": {"instanceType": "x" * 100_000}})
    assert p.startswith(f"{PROJECT}:gpuNodes.instanceType: '{'x' * 99}…' is not an EFA-capable GPU instance type")
    assert len(p) < 400
    (p,) = problems({"gpuNodes": {"x" * 100_000: 1}})
    assert len(p) < 200 and p.endswith(": unknown key")


# --- outside the project's keys -----------------------------------------------------------------


def test_unknown_namespaces_are_reported():
    assert engine_problems({"kubernetes:context": "x", "llm-pd-eks2:gpuNodes": "{}"}) == [
        "kubernetes:context: unknown namespace 'kubernetes'; this program reads only aws: and llm-pd-eks: keys",
        "llm-pd-eks2:gpuNodes: unknown namespace 'llm-pd-eks2' (did you mean 'llm-pd-eks'?); this program reads "
        "only aws: and llm-pd-eks: keys",
    ]


def test_plain_text_aws_credentials_are_refused():
    assert engine_problems({"aws:secretKey": "wJalr"}) == [
        "aws:secretKey: a credential set in plain text; store it encrypted with "
        "`pulumi config set --secret aws:secretKey <value>` (or use an AWS profile)"
    ]
    config, secrets = load_stack_config("dev")
    assert validate_engine_config({**config, "aws:secretKey": "[secret]"}, [*secrets, "aws:secretKey"], stack="dev")


def test_a_stack_name_that_makes_an_invalid_cluster_name():
    assert engine_problems({}, stack="my.stack") == [
        "stack name 'my.stack' makes the EKS cluster name 'llm-pd-eks-my.stack', which EKS refuses (letters, "
        "digits, '-' and '_', at most 100 characters); rename the stack (`pulumi stack rename`)"
    ]
    (p,) = engine_problems({}, stack="s" * 90)
    assert "which EKS refuses" in p
    config, secrets = load_stack_config("dev")
    assert validate_engine_config(config, secrets, stack="s" * 89)  # 11 + 89 = 100 characters


def test_engine_and_model_problems_are_reported_together():
    p = engine_problems({"kubernetes:context": "x", f"{PROJECT}:gpuNodes": json.dumps({"maxSize": True})})
    assert p[0].startswith("kubernetes:context: unknown namespace")
    assert f"{PROJECT}:gpuNodes.maxSize: Input should be a valid integer (got True)" in p


def test_a_misspelt_aws_provider_key_is_reported():
    assert engine_problems({"aws:regoin": "us-east-1"}) == [
        "aws:regoin: not a setting of the AWS provider (did you mean 'aws:region'?); it would be ignored"
    ]
    config, secrets = load_stack_config("dev")
    assert validate_engine_config({**config, "aws:profile": "prod-admin"}, secrets, stack="dev")


def test_aws_provider_keys_are_what_pulumi_aws_reads():
    """The camelCase names equal the keys pulumi_aws's config module reads (`__config__.get('...')`)."""
    import inspect
    import re

    from pulumi_aws.config import vars as aws_vars

    from llm_pd_eks.config import aws_provider_keys

    read = set(re.findall(r"__config__\.get\w*\('(\w+)'\)", inspect.getsource(aws_vars)))
    assert aws_provider_keys() == read
    assert {"region", "profile", "secretKey", "defaultTags"} <= read


def test_the_program_itself_refuses_them_before_registering_anything():
    """`pulumi up` reads config through the same entry point, with the running stack's name."""
    import pulumi

    from llm_pd_eks_tools.plan.preview.mockrun import run_program

    config, secrets = load_stack_config("dev")
    with pytest.raises(pulumi.RunError) as info:
        run_program("my.dev", config={**config, "aws:regoin": "us-east-1"}, secret_keys=secrets)
    message = str(info.value)
    assert "aws:regoin: not a setting of the AWS provider (did you mean 'aws:region'?)" in message
    assert "stack name 'my.dev' makes the EKS cluster name 'llm-pd-eks-my.dev', which EKS refuses" in message
    assert info.value.registrations == []  # type: ignore[attr-defined]


# --- cluster administrators: EKS access entries -----------------------------------------------------

ADMIN_ROLE = "arn:aws:iam::111122223333:role/platform/admins"


def test_admin_roles_and_users_are_accepted():
    arns = [ADMIN_ROLE, "arn:aws:iam::111122223333:user/alice"]
    assert validate_values(merged(GOOD, {"cluster": {"adminPrincipalArns": arns}})).cluster.admin_principal_arns == arns


def test_an_sts_session_is_refused_as_an_access_entry_principal():
    session = "arn:aws:sts::111122223333:assumed-role/admins/alice"
    (problem,) = problems({"cluster": {"adminPrincipalArns": [session]}})
    assert problem.startswith(f"{PROJECT}:cluster.adminPrincipalArns") and "STS session" in problem
    assert "arn:aws:iam::<account>:role/<name>" in problem  # says how to fix it


def test_a_principal_listed_twice_is_refused():
    (problem,) = problems({"cluster": {"adminPrincipalArns": [ADMIN_ROLE, ADMIN_ROLE]}})
    assert "listed twice" in problem and "one access entry per principal" in problem
