"""Serving rules (NIXL over LIBFABRIC, EFA share and FI_PROVIDER=efa) on every workload kind a vLLM
engine can run in, through the real analyzer protocol: a known-good GPU stack plus one vLLM
workload, changed once per case."""

from __future__ import annotations

import copy
import json
from typing import Any, Optional

import pytest
import yaml
from policy_fixtures import UNKNOWN, Res, gpu_container, gpu_stack, judge, mandatory, of

NIXL, EFA = "nixl-libfabric-backend", "ray-gpu-pods-efa"
GOOD_KV = {
    "kv_connector": "NixlConnector",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
}
SERVE = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--tensor-parallel-size", "8"]
POD_PATHS = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
API = {"Pod": "v1", "Job": "batch/v1", "CronJob": "batch/v1"}
TOKEN = {"Pod": "core/v1", "Job": "batch/v1", "CronJob": "batch/v1"}


def engine(kv: Any = GOOD_KV, command: Optional[list] = None, **kw) -> dict[str, Any]:
    """A compliant vLLM engine container: 8 GPUs and all 32 EFA devices of a p5.48xlarge,
    FI_PROVIDER=efa, NixlConnector over LIBFABRIC on the command line."""
    container = gpu_container(**kw)
    container["name"] = "vllm"
    container["image"] = "vllm/vllm-openai:v0.11.0"
    container["command"] = (
        command
        if command is not None
        else [*SERVE, "--kv-transfer-config", kv if isinstance(kv, str) else json.dumps(kv)]
    )
    return container


def manifest(kind: str = "Deployment", container: Optional[dict] = None, **pod: Any) -> dict[str, Any]:
    """The object as `kubectl apply` takes it."""
    spec: dict[str, Any] = {"containers": [container or engine()], **pod}
    obj: dict[str, Any] = {
        "apiVersion": API.get(kind, "apps/v1"),
        "kind": kind,
        "metadata": {"name": "vllm", "namespace": "llm"},
    }
    node = obj
    path = POD_PATHS[kind]
    for step in path[:-1]:
        node = node.setdefault(step, {})
    node[path[-1]] = spec
    return obj


def workload(kind: str = "Deployment", container: Optional[dict] = None, **pod: Any) -> Res:
    return Res(f"kubernetes:{TOKEN.get(kind, 'apps/v1')}:{kind}", "vllm", manifest(kind, container, **pod))


def stack(*extra: Res) -> list[Res]:
    return [*gpu_stack().values(), *extra]


def test_known_good_stack_with_a_vllm_deployment_passes():
    assert mandatory(judge(stack(workload()))) == []


# -- every kind ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(POD_PATHS))
def test_gpu_pod_of_any_kind_needs_its_efa_share(kind):
    assert of(judge(stack(workload(kind))), EFA) == []
    found = of(judge(stack(workload(kind, engine(efa=None)))), EFA)
    assert len(found) == 1 and f"{kind} 'vllm'" in found[0].message and "vpc.amazonaws.com/efa" in found[0].message


@pytest.mark.parametrize("kind", list(POD_PATHS))
def test_kv_connector_on_the_command_line_of_any_kind(kind):
    bad = copy.deepcopy(GOOD_KV)
    bad["kv_connector_extra_config"]["backends"] = ["UCX", "LIBFABRIC"]
    found = of(judge([workload(kind, engine(kv=bad))]), NIXL)
    assert len(found) == 1 and "--kv-transfer-config" in found[0].message and "['UCX', 'LIBFABRIC']" in found[0].message


def test_a_patch_resource_is_judged_like_the_object():
    patch = Res("kubernetes:apps/v1:DeploymentPatch", "vllm-patch", manifest(container=engine(fi_provider="tcp")))
    found = of(judge(stack(patch)), EFA)
    assert len(found) == 1 and "FI_PROVIDER=efa (is 'tcp'" in found[0].message


# -- objects carried inside other resources --------------------------------------------------------
def _carriers(obj: dict[str, Any]) -> list[Res]:
    return [
        Res("kubernetes:yaml:ConfigGroup", "cg1", {"objs": [obj]}),
        Res("kubernetes:yaml/v2:ConfigGroup", "cg2", {"yaml": [yaml.safe_dump(obj)]}),
        Res("kubernetes:yaml/v2:ConfigGroup", "cg2json", {"yaml": json.dumps(obj)}),
        Res(
            "kubernetes:yaml:ConfigGroup",
            "cg1multi",
            {"yaml": yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "llm"}}, obj])},
        ),
        Res("kubernetes:helm.sh/v3:Release", "rel", {"chart": "./charts/vllm", "values": {"extraObjects": [obj]}}),
        Res(
            "kubernetes:helm.sh/v4:Chart", "chart", {"chart": "./charts/vllm", "values": {"manifest": json.dumps(obj)}}
        ),
    ]


CARRIER_IDS = [
    "configgroup-objs",
    "configgroup-v2-yaml",
    "configgroup-v2-json",
    "configgroup-multidoc",
    "helm-release-values",
    "helm-chart-json-text",
]


@pytest.mark.parametrize("index", range(6), ids=CARRIER_IDS)
def test_workloads_inside_configgroups_and_helm_values(index):
    good = _carriers(manifest())[index]
    # a v3 Release of a chart the config lists as running no GPU pod of its own: what it carries is judged
    listed = {"serving-workloads-visible": {"chartsWithoutGpuPods": ["vllm"]}}
    assert mandatory(judge(stack(good), listed)) == []
    bad = _carriers(
        manifest(container=engine(efa=None, kv={"kv_connector": "P2pNcclConnector", "kv_role": "kv_both"}))
    )[index]
    verdicts = judge(stack(bad))
    assert of(verdicts, EFA) and "Deployment 'vllm' (in" in of(verdicts, EFA)[0].message
    assert of(verdicts, NIXL) and "'P2pNcclConnector'" in of(verdicts, NIXL)[0].message


# -- command lines that change the environment -----------------------------------------------------
KV = json.dumps(GOOD_KV)


@pytest.mark.parametrize(
    "command, violation",
    [
        (["bash", "-c", f"export FI_PROVIDER=efa; exec vllm serve m --kv-transfer-config '{KV}'"], False),
        (["bash", "-c", f"export FI_PROVIDER=tcp; exec vllm serve m --kv-transfer-config '{KV}'"], True),
        (["/bin/sh", "-c", f"set -e\nFI_PROVIDER=sockets\nvllm serve m --kv-transfer-config '{KV}'"], True),
        (["sh", "-c", f"FI_PROVIDER=tcp vllm serve m --kv-transfer-config '{KV}'"], True),
        (["env", "FI_PROVIDER=tcp", "vllm", "serve", "m", "--kv-transfer-config", KV], True),
        (["/usr/bin/env", "-u", "FI_PROVIDER", "vllm", "serve", "m", "--kv-transfer-config", KV], True),
        (["env", "-i", "PATH=/usr/bin", "vllm", "serve", "m", "--kv-transfer-config", KV], True),
        (["bash", "-c", f"unset FI_PROVIDER && vllm serve m --kv-transfer-config '{KV}'"], True),
        (["bash", "-c", f"export FI_PROVIDER=$FABRIC; vllm serve m --kv-transfer-config '{KV}'"], True),
        (["bash", "-c", f"export FI_PROVIDER=${{FI_PROVIDER}}; vllm serve m --kv-transfer-config '{KV}'"], False),
    ],
    ids=[
        "export-efa",
        "export-tcp",
        "assignment-line",
        "prefix",
        "env",
        "env-u",
        "env-i",
        "unset",
        "expansion",
        "self",
    ],
)
def test_command_lines_that_set_fi_provider(command, violation):
    found = of(judge(stack(workload(container=engine(command=command)))), EFA)
    assert bool(found) == violation
    if violation:
        assert "command line" in found[0].message


@pytest.mark.parametrize(
    "flag, problem",
    [
        (["--kv-transfer-config", json.dumps({**GOOD_KV, "kv_connector_extra_config": {}})], "unset"),
        (
            ["--kv_transfer_config=" + json.dumps({**GOOD_KV, "kv_connector": "MooncakeConnector"})],
            "'MooncakeConnector'",
        ),
        (["--kv-transfer-config", "{kv_connector: NixlConnector"], "not JSON"),
        (
            ["--kv-transfer-config.kv_connector", "LMCacheConnectorV1", "--kv-transfer-config.kv_role", "kv_both"],
            "'LMCacheConnectorV1'",
        ),
    ],
    ids=["no-backends", "underscores", "not-json", "dotted"],
)
def test_vllm_kv_transfer_flag_forms(flag, problem):
    found = of(judge([workload(container=engine(command=[*SERVE, *flag]))]), NIXL)
    assert len(found) == 1 and problem in found[0].message


def test_kv_transfer_flag_inside_a_shell_script():
    bad = json.dumps({**GOOD_KV, "kv_connector_extra_config": {"backends": ["UCX"]}})
    script = ["bash", "-c", f"vllm serve m --kv-transfer-config '{bad}'"]
    found = of(judge([workload(container=engine(command=script))]), NIXL)
    assert len(found) == 1 and "['UCX']" in found[0].message


# -- envFrom in the order Kubernetes applies it ----------------------------------------------------
def _cm(name: str, provider: str) -> Res:
    return Res(
        "kubernetes:core/v1:ConfigMap",
        name,
        {"metadata": {"name": name, "namespace": "llm"}, "data": {"FI_PROVIDER": provider}},
    )


@pytest.mark.parametrize("order, violation", [(("a", "b"), True), (("b", "a"), False)])
def test_env_from_later_source_wins(order, violation):
    # Kubernetes docs (Define Environment Variables / ConfigMap envFrom): a key in several sources
    # takes the value of the last source.
    container = engine(fi_provider=None)
    container["envFrom"] = [{"configMapRef": {"name": n}} for n in order]
    found = of(judge(stack(workload(container=container), _cm("a", "efa"), _cm("b", "tcp"))), EFA)
    assert bool(found) == violation


# -- RayJob and runtime_env ------------------------------------------------------------------------
def ray_job(entrypoint: str = "python -m serve_pd", runtime_env: Optional[dict] = None) -> Res:
    worker = gpu_container()
    spec: dict[str, Any] = {
        "entrypoint": entrypoint,
        "rayClusterSpec": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray-llm:2.60.0-py311-cu128"}]}
                },
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": 1,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [worker]}},
                }
            ],
        },
    }
    if runtime_env is not None:
        spec["runtimeEnvYAML"] = yaml.safe_dump(runtime_env)
    return Res(
        "kubernetes:ray.io/v1:RayJob",
        "bench",
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "bench", "namespace": "llm"}, "spec": spec},
    )


def test_known_good_ray_job_passes():
    good = ray_job(f"vllm serve m --kv-transfer-config '{KV}'", {"env_vars": {"FI_PROVIDER": "efa"}})
    assert mandatory(judge(stack(good))) == []


@pytest.mark.parametrize(
    "job, where",
    [
        (ray_job(runtime_env={"env_vars": {"FI_PROVIDER": "tcp"}}), "spec.runtimeEnvYAML"),
        (ray_job(runtime_env={"py_executable": "env FI_PROVIDER=sockets python"}), "py_executable"),
        (ray_job("FI_PROVIDER=tcp python -m serve_pd"), "spec.entrypoint"),
    ],
    ids=["env_vars", "py_executable", "entrypoint"],
)
def test_ray_job_environment_overrides(job, where):
    found = of(judge(stack(job)), EFA)
    assert len(found) == 1 and where in found[0].message


def test_ray_job_entrypoint_kv_transfer_config():
    bad = json.dumps({**GOOD_KV, "kv_connector_extra_config": {"backends": "LIBFABRIC"}})
    found = of(judge([ray_job(f"vllm serve m --kv-transfer-config '{bad}'")]), NIXL)
    assert len(found) == 1 and "spec.entrypoint" in found[0].message and "letter by letter" in found[0].message


def test_serve_config_runtime_env_interpreter():
    from policy_fixtures import kv_transfer, ray_service, serve_config

    config = serve_config(kv_transfer())
    config["applications"][0]["args"]["prefill_config"]["runtime_env"]["py_executable"] = "env FI_PROVIDER=tcp python"
    found = of(judge(stack(ray_service(config))), EFA)
    assert len(found) == 1 and "prefill_config" in found[0].message and "py_executable" in found[0].message


# -- GPUs through DRA ------------------------------------------------------------------------------
def _claim_template(device_class: Any = "gpu.nvidia.com", count: Any = 8, v1: bool = True) -> Res:
    request: dict[str, Any] = {"name": "gpus"}
    exact = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if v1:
        request["exactly"] = exact
    else:
        request.update(exact)
    api = "resource.k8s.io/v1" if v1 else "resource.k8s.io/v1beta1"
    return Res(
        f"kubernetes:{api}:ResourceClaimTemplate",
        "gpus",
        {
            "apiVersion": api,
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpus", "namespace": "llm"},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        },
    )


def _dra_workload(efa: Optional[int]) -> Res:
    container = engine(gpus=0, efa=efa)
    del container["resources"]["limits"]["nvidia.com/gpu"], container["resources"]["requests"]["nvidia.com/gpu"]
    container["resources"]["claims"] = [{"name": "gpu"}]
    return workload(container=container, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "gpus"}])


@pytest.mark.parametrize("v1", [True, False], ids=["v1", "v1beta1"])
def test_gpus_through_dra_claims_need_efa(v1):
    assert of(judge(stack(_dra_workload(32), _claim_template(v1=v1))), EFA) == []
    found = of(judge(stack(_dra_workload(None), _claim_template(v1=v1))), EFA)
    assert len(found) == 1 and "DRA" in found[0].message and "32" in found[0].message


def test_dra_claims_for_other_devices_or_not_known_yet():
    assert of(judge(stack(_dra_workload(None), _claim_template(device_class="fpga.example.com"))), EFA) == []
    assert of(judge(stack(_dra_workload(None), _claim_template(device_class=UNKNOWN))), EFA) == []
    # The template is not in the stack: the pack cannot see what it allocates, so it counts as a GPU.
    assert of(judge(stack(_dra_workload(None))), EFA)
