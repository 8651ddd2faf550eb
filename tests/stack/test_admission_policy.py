"""The in-cluster GPU-pod admission policy: its CEL evaluated offline with cel-python against the policy
pack's pod fixtures (`policy_fixtures.gpu_container`, `kv_transfer`), a known-good pod changed once per
case; the program's own worker pods pass it; the objects each stack renders (audit in dev, deny in
staging and prod)."""

from __future__ import annotations

import copy
import json
from typing import Any, Optional

import pytest
from policy_fixtures import gpu_container, kv_transfer
from pydantic import ValidationError

from llm_pd_eks.admission_cel import POLICY_NAME, VALIDATION_ACTIONS, policy_cel
from llm_pd_eks.config import AdmissionPolicyConfig
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.ops.verify.admission import CelPolicy
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun

POLICY = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"
P5 = CelPolicy.from_cel(policy_cel("p5.48xlarge"))  # 8 GPUs, 32 EFA interfaces
P4D = CelPolicy.from_cel(policy_cel("p4d.24xlarge"))  # 8 GPUs, 4 EFA interfaces
SERVE = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--kv-transfer-config"]


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A pod of the given containers (default: the pack's compliant 8-GPU, 32-EFA container)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vllm", "namespace": "llm"},
        "spec": {"containers": list(containers) or [gpu_container()], **spec},
    }


def failed(policy: CelPolicy, subject: dict[str, Any], **kw: Any) -> list[str]:
    verdict = policy.judge(subject, **kw)
    assert verdict.matched, "the policy should judge a pod asking for GPUs"
    assert verdict.errors == {}, verdict.errors
    return verdict.failed


def with_(container: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**copy.deepcopy(container), **fields}


def test_the_pack_fixtures_known_good_gpu_pod_passes():
    assert failed(P5, pod()) == []
    assert failed(P5, pod(nodeSelector={"node.kubernetes.io/instance-type": "p5.48xlarge"})) == []


# --- which pods are judged --------------------------------------------------------------------------


def test_pods_without_gpus_are_not_judged():
    cpu = {"name": "app", "image": "busybox", "securityContext": {"privileged": True}}
    assert not P5.judge(pod(cpu)).matched
    zero = with_(cpu, resources={"limits": {"nvidia.com/gpu": "0"}})
    assert not P5.judge(pod(zero)).matched


def test_gpus_in_an_init_container_or_in_requests_only_are_judged():
    worker = gpu_container()
    init = with_(worker, name="warmup", env=[{"name": "FI_PROVIDER", "value": "tcp"}])
    assert failed(P5, pod(worker, initContainers=[init])) == ["fi-provider-literal"]
    requests_only = with_(worker, resources={"requests": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "2"}})
    assert failed(P5, pod(requests_only)) == ["efa-devices"]


def test_an_update_is_judged_only_where_it_changes_the_spec():
    bad = pod(gpu_container(fi_provider="tcp"))
    relabelled = copy.deepcopy(bad)
    relabelled["metadata"]["labels"] = {"drained": "true"}
    assert not P5.judge(relabelled, operation="UPDATE", old=bad).matched
    new_image = copy.deepcopy(bad)
    new_image["spec"]["containers"][0]["image"] = "rayproject/ray-llm:2.61.0"
    assert failed(P5, new_image, operation="UPDATE", old=bad) == ["fi-provider-literal"]


# --- EFA devices ------------------------------------------------------------------------------------


def test_a_gpu_pod_without_efa_devices_fails():
    assert failed(P5, pod(gpu_container(efa=None))) == ["efa-devices"]


def test_efa_share_follows_the_gpus_asked_for():
    # 4 of a p5's 8 GPUs: 16 of its 32 EFA devices
    assert failed(P5, pod(gpu_container(gpus=4, efa=16))) == []
    assert failed(P5, pod(gpu_container(gpus=4, efa=8))) == ["efa-devices"]
    # one GPU of a p4d: its share rounds down to 0, at least one device still
    assert failed(P4D, pod(gpu_container(gpus=1, efa=1))) == []


def test_unpinned_pods_take_the_stacks_gpu_type():
    four = pod(gpu_container(efa=4))
    assert failed(P4D, four) == []
    assert failed(P5, four) == ["efa-devices"]


def test_a_pin_to_another_instance_type_decides_the_share():
    four = gpu_container(efa=4)
    assert failed(P5, pod(four, nodeSelector={"node.kubernetes.io/instance-type": "p4d.24xlarge"})) == []
    # a GPU type without EFA (not in the EC2 table's EFA rows): no EFA devices asked
    none = gpu_container(efa=None)
    assert failed(P5, pod(none, nodeSelector={"node.kubernetes.io/instance-type": "g5.2xlarge"})) == []
    assert failed(P5, pod(none, nodeSelector={"beta.kubernetes.io/instance-type": "p5.48xlarge"})) == ["efa-devices"]


def affinity(*terms: list[str]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": t}]}
                    for t in terms
                ]
            }
        }
    }


def test_every_instance_type_a_required_affinity_admits_is_judged():
    four = gpu_container(efa=4)
    assert failed(P5, pod(four, affinity=affinity(["p4d.24xlarge", "p4de.24xlarge"]))) == []
    assert failed(P4D, pod(four, affinity=affinity(["p4d.24xlarge"], ["p5.48xlarge"]))) == ["efa-devices"]
    assert failed(P4D, pod(gpu_container(efa=32), affinity=affinity(["p4d.24xlarge"], ["p5.48xlarge"]))) == []


# --- FI_PROVIDER ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, envfrom, problem",
    [
        ([{"name": "FI_PROVIDER", "value": "tcp"}], None, True),
        ([{"name": "FI_PROVIDER", "valueFrom": {"configMapKeyRef": {"name": "fabric", "key": "p"}}}], None, True),
        ([{"name": "FI_PROVIDER", "value": "efa"}, {"name": "FI_PROVIDER", "value": "tcp"}], None, True),
        ([], [{"configMapRef": {"name": "fabric"}}], True),
        ([{"name": "FI_PROVIDER", "value": "efa"}], [{"configMapRef": {"name": "fabric"}}], False),
        ([], None, False),  # unset: the rule judges FI_PROVIDER where it is set
    ],
    ids=["tcp", "configmap-ref", "duplicate-last-tcp", "envfrom-only", "envfrom-with-literal", "unset"],
)
def test_fi_provider_is_a_literal_efa(env, envfrom, problem):
    container = with_(gpu_container(fi_provider=None), env=env)
    if envfrom is not None:
        container["envFrom"] = envfrom
    assert failed(P5, pod(container)) == (["fi-provider-literal"] if problem else [])


@pytest.mark.parametrize(
    "script, problem",
    [
        ("export FI_PROVIDER=tcp; exec vllm serve", True),
        ("unset FI_PROVIDER; exec vllm serve", True),
        ("export FI_PROVIDER=efa,tcp; exec vllm serve", True),
        ("FI_PROVIDER+=,tcp exec vllm serve", True),
        ("printf -v FI_PROVIDER tcp; exec vllm serve", True),
        ("export FI_PROVIDER=efa; echo $FI_PROVIDER ${FI_PROVIDER}; exec vllm serve", False),
        ("export FI_PROVIDER='efa'; exec vllm serve", False),
        ("export FI_PROVIDER_PATH=/opt/amazon/efa/lib/libfabric; exec vllm serve", False),
        ("env -u FI_PROVIDER vllm serve", True),
    ],
)
def test_command_lines_that_set_fi_provider(script, problem):
    container = with_(gpu_container(), command=["/bin/bash", "-c", script])
    assert failed(P5, pod(container)) == (["fi-provider-literal"] if problem else [])


# --- NIXL backend ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backends, problem",
    [
        (["LIBFABRIC"], False),
        (["UCX"], True),
        (["LIBFABRIC", "UCX"], True),
        (["UCX", "LIBFABRIC"], True),
        ([], True),
        (None, True),  # NixlConnector without backends: NIXL's default, UCX
    ],
)
def test_nixl_backends_on_the_command_line(backends: Optional[list[str]], problem: bool):
    kv = kv_transfer(backends)
    container = with_(gpu_container(), command=[*SERVE, json.dumps(kv)])
    assert failed(P5, pod(container)) == (["nixl-libfabric"] if problem else [])


def test_nixl_backends_inside_a_shell_script_with_escaped_quotes():
    good = json.dumps(json.dumps(kv_transfer()))  # "{\"kv_connector\": ...}" as a shell script writes it
    bad = json.dumps(json.dumps(kv_transfer(["UCX"])))
    script = f"exec vllm serve Qwen/Qwen2.5-7B-Instruct --kv-transfer-config {good}"
    assert failed(P5, pod(with_(gpu_container(), command=["/bin/sh", "-c", script]))) == []
    both = f"{script} && vllm serve --kv-transfer-config {bad}"
    assert failed(P5, pod(with_(gpu_container(), command=["/bin/sh", "-c", both]))) == ["nixl-libfabric"]


def test_nixl_config_in_an_env_value_and_unicode_escapes():
    env = [{"name": "FI_PROVIDER", "value": "efa"}, {"name": "KV_CONFIG", "value": json.dumps(kv_transfer(["UCX"]))}]
    assert failed(P5, pod(with_(gpu_container(), env=env))) == ["nixl-libfabric"]
    # a second key spelled with an escape ("backend\u0073") would win in a JSON decoder
    hidden = json.dumps(kv_transfer())[:-1] + ', "kv_connector_extra_config": {"backend\\u0073": ["UCX"]}}'
    assert failed(P5, pod(with_(gpu_container(), command=[*SERVE, hidden]))) == ["nixl-libfabric"]


def test_other_kv_connectors_are_not_this_rule():
    lmcache = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    assert failed(P5, pod(with_(gpu_container(), command=[*SERVE, lmcache]))) == []


# --- privilege -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "security, pod_fields, problem",
    [
        ({"capabilities": {"add": ["IPC_LOCK"]}}, {}, False),
        ({"privileged": True}, {}, True),
        ({"capabilities": {"add": ["IPC_LOCK", "SYS_ADMIN"]}}, {}, True),
        ({"privileged": False, "capabilities": {"drop": ["ALL"]}}, {}, False),
        (None, {"hostNetwork": True}, True),
        (None, {"hostIPC": True}, True),
        (None, {"hostPID": True}, True),
    ],
    ids=["ipc-lock", "privileged", "sys-admin", "dropped", "host-network", "host-ipc", "host-pid"],
)
def test_no_privilege_beyond_ipc_lock(security, pod_fields, problem):
    container = gpu_container() if security is None else with_(gpu_container(), securityContext=security)
    assert failed(P5, pod(container, **pod_fields)) == (["no-privilege"] if problem else [])


def test_a_privileged_sidecar_of_a_gpu_pod_fails():
    sidecar = {"name": "debug", "image": "busybox", "securityContext": {"privileged": True}}
    assert failed(P5, pod(gpu_container(), sidecar)) == ["no-privilege"]


# --- the program's own pods and objects ------------------------------------------------------------


def _worker_pods(run: ProgramRun) -> list[dict[str, Any]]:
    spec = run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]
    templates = [g["template"] for g in spec["workerGroupSpecs"]] + [spec["headGroupSpec"]["template"]]
    return [{"metadata": {"name": "t", "namespace": "llm"}, "spec": t["spec"]} for t in templates]


def test_the_programs_own_worker_pods_pass(run: ProgramRun):
    policy = CelPolicy.from_cel(policy_cel(stack_config(run.stack).gpu_nodes.instance_type))
    judged = [policy.judge(p) for p in _worker_pods(run)]
    assert sum(v.matched for v in judged) == 2  # prefill and decode; the head asks for no GPU
    assert all(v.failed == [] and v.errors == {} for v in judged), judged


def test_each_stack_renders_the_policy_and_binding_for_its_mode(run: ProgramRun):
    config = stack_config(run.stack)
    policy, binding = run.one(POLICY).inputs, run.one(BINDING).inputs
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == POLICY_NAME
    wanted = {"dev": ["Audit"], "staging": ["Deny", "Audit"], "prod": ["Deny", "Audit"]}[run.stack]
    assert binding["spec"]["validationActions"] == wanted == list(VALIDATION_ACTIONS[config.admission_policy.mode])
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods"] and rule["operations"] == ["CREATE", "UPDATE"]
    (exempt,) = spec["matchConstraints"]["namespaceSelector"]["matchExpressions"]
    assert exempt == {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
    cel = policy_cel(config.gpu_nodes.instance_type)
    assert [v["expression"] for v in spec["validations"]] == [r.expression for r in cel.validations]
    assert [v["name"] for v in spec["variables"]] == [v.name for v in cel.variables]
    # what the API server evaluates compiles and judges as the offline tests do
    live = CelPolicy.from_spec(spec, {r.expression: r.name for r in cel.validations})
    assert live.judge(pod(gpu_container(fi_provider="tcp"))).failed == ["fi-provider-literal"]


# --- the config section ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, words",
    [
        ({"mode": "enforce"}, "mode"),
        ({"mode": "audit", "exemptNamespaces": ["Kube_System"]}, "not a namespace name"),
        ({"exemptNamespaces": ["kube-system", "kube-system"]}, "listed twice"),
        ({"mod": "audit"}, "mod"),
    ],
)
def test_the_admission_policy_section_is_strict(values, words):
    with pytest.raises(ValidationError) as info:
        AdmissionPolicyConfig.model_validate(values)
    assert words in str(info.value)


def test_a_new_stack_denies_and_exempts_kube_system():
    config = AdmissionPolicyConfig()
    assert (config.mode, config.exempt_namespaces) == ("deny", ["kube-system"])
