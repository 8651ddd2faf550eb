"""Helm releases through the real analyzer protocol: chart values that expose a public load balancer
(ingress controllers, the KubeRay operator), Services carried in values or ConfigGroups, and releases
whose rendered GPU/vLLM pods the pack cannot see (fail closed, opt out by name)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from policy_fixtures import UNKNOWN, Res, gpu_container, judge, mandatory, of

EXPOSED, VISIBLE = "serve-endpoint-not-internet-facing", "serving-workloads-visible"
RELEASE = "kubernetes:helm.sh/v3:Release"
INTERNAL = {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal"}


def release(chart: str, values: Any, name: str = "ingress", **props: Any) -> Res:
    return Res(RELEASE, name, {"chart": chart, "version": "4.11.3", "namespace": "ingress", "values": values, **props})


@pytest.mark.parametrize(
    "chart, good, bad",
    [
        ("ingress-nginx", {"controller": {"service": {"annotations": INTERNAL}}}, {"controller": {}}),
        (
            "ingress-nginx",
            {"controller": {"service": {"type": "ClusterIP"}}},
            {"controller": {"service": {"type": "LoadBalancer", "annotations": {}}}},
        ),
        (
            "ingress-nginx",
            {"controller": {"service": {"external": {"enabled": False}}}},
            {"controller": {"service": {"internal": {"enabled": True}}}},
        ),
        ("traefik", {"service": {"annotations": INTERNAL}}, {}),
        (
            "traefik",
            {"service": {"enabled": False}},
            {"service": {"annotations": {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing"}}},
        ),
        ("kuberay-operator", {"service": {"type": "ClusterIP"}}, {"service": {"type": "LoadBalancer"}}),
        (
            "aws-load-balancer-controller",
            {"ingressClassParams": {"spec": {"scheme": "internal"}}},
            {"ingressClassParams": {"spec": {"scheme": "internet-facing"}}},
        ),
    ],
    ids=[
        "nginx-default",
        "nginx-type",
        "nginx-internal-extra",
        "traefik-default",
        "traefik-annotation",
        "kuberay-operator",
        "lbc-class-params",
    ],
)
def test_chart_values_that_expose_a_public_load_balancer(chart, good, bad):
    assert mandatory(judge([release(chart, good)])) == []
    found = of(judge([release(chart, bad)]), EXPOSED)
    assert len(found) == 1 and f"chart {chart!r}" in found[0].message


@pytest.mark.parametrize(
    "chart", ["ingress-nginx/ingress-nginx", "oci://ghcr.io/traefik/helm/traefik", "./vendor/ingress-nginx-4.11.3.tgz"]
)
def test_chart_names_in_every_spelling(chart):
    assert of(judge([release(chart, {})]), EXPOSED)


def test_unknown_values_are_not_judged_and_value_files_fail_closed():
    assert of(judge([release("ingress-nginx", UNKNOWN)]), EXPOSED) == []
    found = of(
        judge(
            [
                release(
                    "ingress-nginx",
                    {"controller": {"service": {"annotations": INTERNAL}}},
                    valueYamlFiles=[
                        {
                            "4dabf18193072939515e22adb298388d": "c44067f5952c0a294b673a41bacd8c17",
                            "path": "values/ingress.yaml",
                        }
                    ],
                )
            ]
        ),
        EXPOSED,
    )
    assert len(found) == 1 and "valueYamlFiles" in found[0].message


SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "llm-lb", "namespace": "llm"},
    "spec": {"type": "LoadBalancer", "ports": [{"port": 8000}]},
}


@pytest.mark.parametrize("carrier", ["objs", "yaml", "helm"])
def test_services_carried_in_other_resources(carrier):
    def build(service: dict) -> Res:
        if carrier == "objs":
            return Res("kubernetes:yaml/v2:ConfigGroup", "cg", {"objs": [service]})
        if carrier == "yaml":
            return Res("kubernetes:yaml:ConfigGroup", "cg", {"yaml": [yaml.safe_dump(service)]})
        return release("./charts/llm", {"extraObjects": [service]}, name="llm")

    internal = {**SERVICE, "metadata": {**SERVICE["metadata"], "annotations": INTERNAL}}
    assert of(judge([build(internal)]), EXPOSED) == []
    found = of(judge([build(SERVICE)]), EXPOSED)
    assert len(found) == 1 and "Service at" in found[0].message


# -- releases whose rendered pods are not in the plan ----------------------------------------------
def _gpu_values() -> dict[str, Any]:
    container = gpu_container()
    return {
        "image": {"repository": "vllm/vllm-openai", "tag": "v0.11.0"},
        "resources": container["resources"],
        "env": container["env"],
    }


def test_release_running_gpu_pods_from_values_fails_closed():
    quiet = release("./charts/llm", {"replicaCount": 2, "image": {"repository": "nginx"}}, name="llm")
    assert of(judge([quiet], {VISIBLE: {"chartsWithoutGpuPods": ["llm"]}}), VISIBLE) == []
    (unlisted,) = of(judge([quiet]), VISIBLE)  # its defaults may run GPU pods no value shows
    assert "chart 'llm'" in unlisted.message and "defaults" in unlisted.message
    found = of(judge([release("./charts/llm", _gpu_values(), name="llm")]), VISIBLE)
    assert len(found) == 1
    assert "helm.v4.Chart" in found[0].message and "unjudgeable.allow" in found[0].message
    assert "resources.limits.nvidia.com/gpu" in found[0].message


@pytest.mark.parametrize(
    "values",
    [
        {"engine": {"args": ["--kv-transfer-config", '{"kv_connector": "NixlConnector"}']}},
        {"serve": {"kv_transfer_config": {"kv_connector": "NixlConnector"}}},
        {"pod": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpus"}]}},
    ],
    ids=["kv-flag", "kv-config", "dra"],
)
def test_release_signals_of_a_serving_workload(values):
    assert of(judge([release("./charts/llm", values, name="llm")]), VISIBLE)


def test_opt_out_is_by_name():
    bad = release("./charts/llm", _gpu_values(), name="llm")
    other = {VISIBLE: {"unjudgeable": {"allow": ["something-else"]}}}
    assert of(judge([bad], other), VISIBLE)
    assert of(judge([bad], {VISIBLE: {"unjudgeable": {"allow": ["llm"]}}}), VISIBLE) == []


def test_tolerations_naming_the_gpu_resource_are_no_workload():
    # The device plugin and DCGM exporter charts tolerate the GPU taint; they run no GPU pods of their own.
    values = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    assert of(judge([release("nvidia-device-plugin", values, name="nvidia")]), VISIBLE) == []
