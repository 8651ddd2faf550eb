"""Policy `ray-custom-resources-reach-raylet` (policies/llm_pd_eks_policy/ray_resources.py), through the pack."""

from __future__ import annotations

import copy
import json

import kuberay_start_params as ko
import pytest
from helpers import RAY_SERVICE
from policy_fixtures import judge, mandatory, of, ray_service
from unit.test_kuberay_start_params import CANDIDATES

from llm_pd_eks.ray_resources import custom_resource_problem

POLICY = "ray-custom-resources-reach-raylet"


def with_group_resources(resources: dict[str, str]):
    res = ray_service()
    props = copy.deepcopy(res.props)
    props["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["resources"] = resources
    return type(res)(res.type, res.name, props)


def test_a_role_resource_ending_in_gpu_is_refused():
    verdicts = of(judge([with_group_resources({"prefill_gpu": "8", "accelerator_type:H100": "1"})]), POLICY)
    assert len(verdicts) == 1
    message = verdicts[0].message
    assert "'prefill_gpu'" in message and "--num-gpus" in message and "worker group 'gpu'" in message
    assert sum("'prefill_gpu'" in line for line in message.splitlines()) == 1  # one line says it all


@pytest.mark.parametrize("name", ["decode_GPU", "mygpu", "Decode_Gpu"])
def test_any_case_is_refused(name):
    assert len(of(judge([with_group_resources({name: "8"})]), POLICY)) == 1


@pytest.mark.parametrize(
    "resources",
    [
        {"prefill_slot": "8", "accelerator_type:H100": "1"},
        {"CPU": "2", "GPU": "4"},  # KubeRay's own table test: canonical names, meant as such
        {"nvidia.com/gpu": "1", "TPU": "4"},
    ],
)
def test_names_that_reach_the_raylet_or_are_meant_as_standard_pass(resources):
    assert of(judge([with_group_resources(resources)]), POLICY) == []


def test_the_program_rendered_stacks_pass(programs):
    for stack in ("dev", "staging", "prod"):
        rs = programs(stack).one(RAY_SERVICE)
        res = ray_service()
        props = {
            "apiVersion": "ray.io/v1",
            "kind": "RayService",
            "metadata": {"name": rs.name},
            "spec": json.loads(json.dumps(rs.inputs["spec"])),
        }
        assert mandatory(of(judge([type(res)(RAY_SERVICE, rs.name, props)]), POLICY)) == []


@pytest.mark.parametrize("name", CANDIDATES)
def test_the_pack_agrees_with_the_operator_and_the_program(name):
    from llm_pd_eks_policy.ray_resources import reinterpreted_flag

    params: dict[str, str] = {}
    ko.update_ray_start_params_resources(params, {name: "8"})
    reaches = "resources" in params and name in json.loads(params["resources"].strip("'"))
    assert (reinterpreted_flag(name) is None) is reaches
    assert (custom_resource_problem(name) is None) is (reaches and name not in ("CPU", "GPU", "memory"))
