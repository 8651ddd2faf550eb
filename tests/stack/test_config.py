"""The strict stack config: one test per class of mistake a user can make, each showing the message."""

from __future__ import annotations

import json

import pytest
from helpers import config_problems, merged, validate_values

from llm_pd_eks.config import StackConfig
from llm_pd_eks_tools.core.stackfile import PROJECT
from llm_pd_eks_tools.plan.preview.mockrun import run_program

GOOD = {
    "network": {"vpcCidr": "10.0.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"]},
    "gpuNodes": {"instanceType": "g6e.12xlarge", "availabilityZone": "us-west-2a"},
}


def problems(overrides: dict, region: str | None = "us-west-2", drop: tuple[str, ...] = ()) -> list[str]:
    values = {k: v for k, v in merged(GOOD, overrides).items() if k not in drop}
    return config_problems(values, region)


def test_good_config_gets_the_model_defaults():
    cfg = validate_values(GOOD)
    assert isinstance(cfg, StackConfig)
    assert cfg.network.nat_gateways == "single"
    assert cfg.gpu_nodes.min_size == 2
    assert cfg.network.private_cidrs() == ["10.0.0.0/19", "10.0.32.0/19"]
    assert cfg.network.public_cidrs() == ["10.0.224.0/22", "10.0.228.0/22"]


def test_unknown_key_is_refused_by_name_with_a_suggestion():
    (p,) = problems({"gpuNode": {"instanceType": "p5.48xlarge"}})
    assert p == f"{PROJECT}:gpuNode: unknown key (did you mean 'gpuNodes'?)"


def test_unknown_nested_key_is_refused_with_its_path():
    (p,) = problems({"gpuNodes": {"instanceTyp": "p5.48xlarge"}})
    assert p == f"{PROJECT}:gpuNodes.instanceTyp: unknown key"


def test_overlapping_subnets():
    (p,) = problems({"network": {"privateSubnetCidrs": ["10.0.0.0/20", "10.0.8.0/21"]}})
    assert "private subnet 10.0.0.0/20 overlaps private subnet 10.0.8.0/21" in p
    assert p.startswith(f"{PROJECT}:network")


def test_subnet_that_does_not_fit_the_vpc():
    found = problems({"network": {"publicSubnetCidrs": ["10.0.0.0/24", "10.1.0.0/24"]}})
    assert f"{PROJECT}:network: public subnet 10.1.0.0/24 does not fit in vpcCidr 10.0.0.0/16" in found
    # 10.0.0.0/24 fits, but sits inside the first carved private /19: each problem on its own line
    assert f"{PROJECT}:network: private subnet 10.0.0.0/19 overlaps public subnet 10.0.0.0/24" in found
    assert len(found) == 2


def test_malformed_cidr():
    (p,) = problems({"network": {"vpcCidr": "10.0.0.300/16"}})
    assert p.startswith(f"{PROJECT}:network.vpcCidr: '10.0.0.300/16' is not a valid CIDR block")


def test_fewer_than_two_azs():
    found = problems({"network": {"availabilityZones": ["us-west-2a"]}})
    assert any(p.startswith(f"{PROJECT}:network.availabilityZones:") and "at least 2" in p for p in found)


def test_az_not_in_region():
    (p,) = problems({"network": {"availabilityZones": ["us-west-2a", "eu-west-1b"]}})
    assert p == f"{PROJECT}:network.availabilityZones: 'eu-west-1b' is not an AZ of region us-west-2"


def test_gpu_az_not_among_network_azs():
    (p,) = problems({"gpuNodes": {"availabilityZone": "us-west-2c"}})
    assert p == (
        f"{PROJECT}:gpuNodes.availabilityZone: 'us-west-2c' is not one of the network's availability zones "
        "(us-west-2a, us-west-2b)"
    )


def test_instance_type_without_efa():
    (p,) = problems({"gpuNodes": {"instanceType": "g4dn.xlarge"}})
    assert p.startswith(f"{PROJECT}:gpuNodes.instanceType: 'g4dn.xlarge' is not an EFA-capable GPU instance type")
    assert "p5.48xlarge" in p  # it lists what is supported


def test_gpu_group_below_two_nodes():
    (p,) = problems({"gpuNodes": {"minSize": 1, "desiredSize": 1}})
    assert p == f"{PROJECT}:gpuNodes.minSize: minSize is 1: prefill and decode need separate GPU nodes, so at least 2"


def test_min_greater_than_max():
    (p,) = problems({"systemNodes": {"minSize": 4, "desiredSize": 4, "maxSize": 3}})
    assert p == f"{PROJECT}:systemNodes: minSize (4) is greater than maxSize (3)"


def test_missing_region():
    (p,) = problems({}, region=None)
    assert p.startswith("aws:region: not set")


def test_missing_required_section():
    (p,) = problems({}, drop=("gpuNodes",))
    assert p == f"{PROJECT}:gpuNodes: Field required"


def test_every_problem_is_reported_at_once():
    found = problems(
        {
            "netwrok": {},
            "network": {"availabilityZones": ["us-west-2a", "eu-west-1b"]},
            "gpuNodes": {"instanceType": "m5.large", "minSize": 1, "availabilityZone": "us-west-2c"},
            "systemNodes": {"minSize": 3, "desiredSize": 3, "maxSize": 2},
        }
    )
    joined = "\n".join(found)
    for fragment in (
        "netwrok: unknown key",
        "'eu-west-1b' is not an AZ",
        "'m5.large' is not an EFA-capable",
        "gpuNodes.minSize",
        "minSize (3) is greater than maxSize (2)",
        "'us-west-2c' is not one of",
    ):
        assert fragment in joined
    assert len(found) == 6


def test_bad_config_registers_nothing():
    config = {f"{PROJECT}:{k}": json.dumps(v) for k, v in GOOD.items()}
    config["aws:region"] = "us-west-2"
    config[f"{PROJECT}:gpuNodes"] = json.dumps({**GOOD["gpuNodes"], "minSize": 1})
    with pytest.raises(Exception) as info:
        run_program("dev", config=config, secret_keys=[])
    assert "prefill and decode need separate GPU nodes" in str(info.value)
    assert info.value.registrations == []  # type: ignore[attr-defined]
