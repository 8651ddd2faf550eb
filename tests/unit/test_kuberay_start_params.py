"""The transcription of KubeRay's `ray start` derivation against KubeRay's own table tests, and the
program's resource-name rule (llm_pd_eks/ray_resources.py) against the transcription."""

from __future__ import annotations

import json

import kuberay_start_params as ko
import pytest
from helpers import DATA

from llm_pd_eks.ray_resources import custom_resource_problem, operator_reinterpretation

TABLES = json.loads((DATA / "kuberay-start-params" / "tables.json").read_text())


def names(table: str) -> list[str]:
    return [case["name"] for case in TABLES[table]]


@pytest.mark.parametrize("case", TABLES["TestIsGPUResourceKey"], ids=names("TestIsGPUResourceKey"))
def test_is_gpu_resource_key_matches_kuberay(case):
    assert ko.is_gpu_resource_key(case["resourceKey"]) is case["expected"]


UPDATE = "TestUpdateRayStartParamsResources"


@pytest.mark.parametrize("case", TABLES[UPDATE], ids=names(UPDATE))
def test_update_ray_start_params_resources_matches_kuberay(case):
    params = dict(case["initialRayStartParams"])
    ko.update_ray_start_params_resources(params, case["groupResources"])
    assert params == case["expectedRayStartParams"]


@pytest.mark.parametrize("case", TABLES["TestGenerateRayStartCommand"], ids=names("TestGenerateRayStartCommand"))
def test_generate_ray_start_command_matches_kuberay(case):
    params = dict(case["rayStartParams"])
    command = ko.generate_ray_start_command(case["nodeType"], params, {"limits": case["limits"]})
    assert command == case["expected"]


def test_the_tables_are_the_vendored_ones():
    # every case of the three Go tests, none dropped (counts as in pod_test.go / resources_test.go v1.7.0)
    assert [
        len(TABLES[t])
        for t in ("TestIsGPUResourceKey", "TestUpdateRayStartParamsResources", "TestGenerateRayStartCommand")
    ] == [6, 5, 13]


# --- the program's rule, judged by the transcription ------------------------------------------------

CANDIDATES = [
    "prefill_gpu",
    "decode_gpu",
    "PREFILL_GPU",
    "decode_GPU",
    "gpu",
    "GPU",
    "xgpu",
    "nvidia.com/gpu",
    "nvidia.com/MIG-2g.32gb",
    "nvidia.com/mig-1g.10gb",
    "CPU",
    "cpu",
    "Memory",
    "memory",
    "prefill_slot",
    "decode_slot",
    "prefill_gpus",
    "gpu_prefill",
    "accelerator_type:A100",
    "TPU",
    "neuron_cores",
]


@pytest.mark.parametrize("name", CANDIDATES)
def test_the_rule_refuses_exactly_what_the_operator_reinterprets(name):
    params: dict[str, str] = {}
    ko.update_ray_start_params_resources(params, {name: "8"})
    reaches_raylet = json.loads(params["resources"].strip("'")) == {name: 8} if "resources" in params else False
    assert (operator_reinterpretation(name) is None) is reaches_raylet, params
    if not reaches_raylet:
        assert custom_resource_problem(name) is not None


def test_a_rendered_worker_group_reaches_the_raylet_whole():
    # the operator's `ray start` for a dev-shaped group: num-gpus from nvidia.com/gpu, the role's slot
    # and accelerator type in --resources, CPUs from the request (no CPU limit), memory from the limit
    group = {
        "rayStartParams": {},
        "resources": {"prefill_slot": "8", "accelerator_type:H100": "1"},
        "template": {
            "spec": {
                "containers": [
                    {
                        "resources": {
                            "requests": {"cpu": "190", "memory": "1741Gi", "hugepages-2Mi": "5128Mi"},
                            "limits": {
                                "nvidia.com/gpu": "8",
                                "vpc.amazonaws.com/efa": "32",
                                "memory": "1741Gi",
                                "hugepages-2Mi": "5128Mi",
                            },
                        }
                    }
                ]
            }
        },
    }
    command = ko.worker_ray_start(group)
    assert ko.raylet_resources(command) == {
        "CPU": 190,
        "GPU": 8,
        "memory": 1741 * 2**30,
        "prefill_slot": 8,
        "accelerator_type:H100": 1,
    }
    assert " --block " in command and " --address=" in command


def test_a_gpu_suffixed_role_resource_is_swallowed():
    group = {
        "resources": {"prefill_gpu": "8"},
        "template": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]}},
    }
    assert "prefill_gpu" not in ko.raylet_resources(ko.worker_ray_start(group))
