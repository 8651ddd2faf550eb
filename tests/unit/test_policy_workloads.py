"""In-process unit tests (awsguard style): each policy's `validate` called directly with
pulumi_policy's own ResourceValidationArgs / StackValidationArgs (pulumi_policy 1.21 policy.py
constructors), a known-good input changed once; and the command-line reader held against the
shell and env(1) themselves."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, Optional

import pytest
from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)

from llm_pd_eks_policy.pod_efa import gpu_pods_efa
from llm_pd_eks_policy.ray_serving import nixl_libfabric
from llm_pd_eks_policy.visibility import helm_release_visible
from llm_pd_eks_policy.workloads import UNSET, command_line

KV = {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"backends": ["LIBFABRIC"]}}


def _opts() -> PolicyResourceOptions:
    return PolicyResourceOptions(
        protect=False,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
    )


def _urn(resource_type: str, name: str) -> str:
    return f"urn:pulumi:test::llm-pd-eks::{resource_type}::{name}"


def resource_args(resource_type: str, name: str, props: dict, config: Optional[dict] = None) -> ResourceValidationArgs:
    return ResourceValidationArgs(resource_type, props, _urn(resource_type, name), name, _opts(), None, config)


def policy_resource(resource_type: str, name: str, props: dict) -> PolicyResource:
    return PolicyResource(resource_type, props, _urn(resource_type, name), name, _opts(), None, None, [], {})


def collect(policy: Any, args: Any) -> list[str]:
    messages: list[str] = []
    policy.validate(args, lambda message, urn=None: messages.append(message))
    return messages


def deployment(command: list[str], efa: Optional[int] = 32, claims: bool = False) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": "32", "memory": "256Gi"}
    if not claims:
        limits["nvidia.com/gpu"] = 8
    if efa is not None:
        limits["vpc.amazonaws.com/efa"] = efa
    container: dict[str, Any] = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.11.0",
        "command": command,
        "resources": {"limits": limits},
        "env": [{"name": "FI_PROVIDER", "value": "efa"}],
    }
    pod: dict[str, Any] = {
        "containers": [container],
        "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
    }
    if claims:
        container["resources"]["claims"] = [{"name": "gpu"}]
        pod["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "h100x8"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "llm"},
        "spec": {"replicas": 1, "template": {"spec": pod}},
    }


SERVE = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--kv-transfer-config"]


def test_nixl_rule_on_a_deployment():
    args = resource_args("kubernetes:apps/v1:Deployment", "vllm", deployment([*SERVE, json.dumps(KV)]))
    assert collect(nixl_libfabric, args) == []
    ucx = {**KV, "kv_connector_extra_config": {"backends": ["UCX"]}}
    bad = resource_args("kubernetes:apps/v1:Deployment", "vllm", deployment([*SERVE, json.dumps(ucx)]))
    (message,) = collect(nixl_libfabric, bad)
    assert "Deployment 'vllm'" in message and "['UCX']" in message


def test_nixl_rule_config_allows_a_named_connector():
    lmcache = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    props = deployment([*SERVE, lmcache])
    assert len(collect(nixl_libfabric, resource_args("kubernetes:apps/v1:Deployment", "vllm", props))) == 1
    allowed = resource_args(
        "kubernetes:apps/v1:Deployment", "vllm", props, {"allowedConnectors": ["LMCacheConnectorV1"]}
    )
    assert collect(nixl_libfabric, allowed) == []


def _template(device_class: str) -> PolicyResource:
    return policy_resource(
        "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate",
        "h100x8",
        {
            "metadata": {"name": "h100x8", "namespace": "llm"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpus",
                                "exactly": {
                                    "deviceClassName": device_class,
                                    "allocationMode": "ExactCount",
                                    "count": 8,
                                },
                            }
                        ]
                    }
                }
            },
        },
    )


@pytest.mark.parametrize(
    "efa, device_class, reports",
    [(32, "gpu.nvidia.com", 0), (None, "gpu.nvidia.com", 1), (8, "gpu.nvidia.com", 1), (None, "net.example.com", 0)],
)
def test_efa_rule_on_dra_gpu_claims(efa, device_class, reports):
    workload = policy_resource(
        "kubernetes:apps/v1:Deployment", "vllm", deployment([*SERVE, json.dumps(KV)], efa=efa, claims=True)
    )
    messages = collect(gpu_pods_efa, StackValidationArgs([workload, _template(device_class)]))
    assert len(messages) == reports
    if reports:
        assert "DRA" in messages[0] and "32" in messages[0]  # 8 of p5.48xlarge's 8 GPUs -> 32 of its 32 EFA


def test_visibility_rule_on_a_release_and_its_opt_out():
    props = {"chart": "./charts/llm", "values": {"resources": {"limits": {"nvidia.com/gpu": 8}}}}
    args = resource_args("kubernetes:helm.sh/v3:Release", "llm", props)
    assert len(collect(helm_release_visible, args)) == 1
    allowed = resource_args("kubernetes:helm.sh/v3:Release", "llm", props, {"unjudgeable": {"allow": ["llm"]}})
    assert collect(helm_release_visible, allowed) == []


# -- the command-line reader against the shell and env(1) ------------------------------------------
SHELL_CASES = [
    ["bash", "-c", "export FI_PROVIDER=tcp; printenv FI_PROVIDER"],
    ["bash", "-c", "export A=1 FI_PROVIDER=sockets && printenv FI_PROVIDER"],
    ["sh", "-c", "FI_PROVIDER=tcp printenv FI_PROVIDER"],
    ["sh", "-c", "set -e\nFI_PROVIDER=shm\nprintenv FI_PROVIDER"],
    ["bash", "-c", "unset FI_PROVIDER; printenv FI_PROVIDER"],
    ["bash", "-c", "export FI_PROVIDER='efa'; printenv FI_PROVIDER"],
    ["bash", "-c", "true; printenv FI_PROVIDER"],
    ["env", "FI_PROVIDER=verbs", "printenv", "FI_PROVIDER"],
    ["env", "-u", "FI_PROVIDER", "printenv", "FI_PROVIDER"],
    ["env", "-i", "PATH=/usr/bin:/bin", "printenv", "FI_PROVIDER"],
    ["env", "--unset=FI_PROVIDER", "printenv", "FI_PROVIDER"],
    ["printenv", "FI_PROVIDER"],
]


@pytest.mark.parametrize("argv", SHELL_CASES, ids=range(len(SHELL_CASES)))
def test_command_line_reader_agrees_with_the_shell(argv):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "FI_PROVIDER": "efa"}
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    shell = run.stdout.strip() if run.returncode == 0 else UNSET
    ours = command_line(argv).last("FI_PROVIDER")
    assert (env["FI_PROVIDER"] if ours is None else ours) == shell
