"""What the Ray pods ask Kubernetes for: the head sized as the AWS Ray LLM DLC sizes it.

The DLC's own KubeRay test manifest is vendored as data (tests/data/dlc-ray-llm, SOURCE); quantities
are compared by value, not by spelling.
"""

from __future__ import annotations

import json
from decimal import Decimal

from helpers import DATA, RAY_SERVICE
from kuberay_start_params import parse_quantity

from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun

KINDS = ("requests", "limits")
DLC = json.loads((DATA / "dlc-ray-llm" / "eks-multi-node-pods.json").read_text())


def amounts(resources: dict) -> dict[str, dict[str, Decimal]]:
    """requests and limits by value (Kubernetes' resource.ParseQuantity, tests/kuberay_start_params.py)."""
    return {kind: {k: parse_quantity(str(v)) for k, v in (resources.get(kind) or {}).items()} for kind in KINDS}


def head_container(run: ProgramRun) -> dict:
    spec = run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "ray-head"]
    return container


def test_the_head_is_sized_as_the_dlc_sizes_its_head(run: ProgramRun):
    assert amounts(head_container(run)["resources"]) == amounts(DLC["head"]["resources"])


# --- QoS class ----------------------------------------------------------------------------------
# Kubernetes docs, "Pod Quality of Service Classes" (concepts/workloads/pods/pod-qos): Guaranteed iff
# every container (init containers included) has a CPU and a memory limit and requests equal to them;
# BestEffort iff no container has any CPU or memory request or limit; Burstable otherwise. A limit
# without a request gets the limit as its request ("Assign Memory/CPU Resources to Containers").
QOS_RESOURCES = ("cpu", "memory")
KUBERAY = json.loads((DATA / "kuberay" / "injected-containers-v1.7.0.json").read_text())


def qos_class(pod_spec: dict) -> str:
    containers = [*(pod_spec.get("initContainers") or []), *pod_spec["containers"]]
    guaranteed, any_set = True, False
    for container in containers:
        res = amounts(container.get("resources") or {})
        requests = {**res["limits"], **res["requests"]}  # requests defaulted from limits
        for name in QOS_RESOURCES:
            any_set = any_set or name in requests or name in res["limits"]
            if name not in res["limits"] or requests.get(name) != res["limits"][name]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def as_kuberay_creates(run: ProgramRun) -> dict[str, dict]:
    """Each group's pod spec with the containers KubeRay v1.7.0 adds (tests/data/kuberay, SOURCE)."""
    cluster = run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]
    head = dict(cluster["headGroupSpec"]["template"]["spec"])
    if cluster.get("enableInTreeAutoscaling"):
        sidecar = KUBERAY["head_sidecar"]
        head["containers"] = [*head["containers"], {"name": sidecar["name"], "resources": sidecar["resources"]}]
    pods = {"head": head}
    init = KUBERAY["worker_init"]
    for group in cluster["workerGroupSpecs"]:
        spec = dict(group["template"]["spec"])
        spec["initContainers"] = [
            *(spec.get("initContainers") or []),
            {"name": init["name"], "resources": init["resources"]},
        ]
        pods[group["groupName"]] = spec
    return pods


def test_workers_are_guaranteed_and_the_head_burstable(run: ProgramRun):
    pods = as_kuberay_creates(run)
    assert {role: qos_class(spec) for role, spec in pods.items()} == {
        "head": "Burstable",
        "prefill": "Guaranteed",
        "decode": "Guaranteed",
    }


def test_the_qos_rules_as_written():
    def pod(*resources: dict) -> dict:
        return {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)]}

    equal = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m", "memory": "1024Mi"}}
    assert qos_class(pod(equal)) == "Guaranteed"
    assert qos_class(pod({"limits": {"cpu": "1", "memory": "1Gi"}})) == "Guaranteed"  # requests defaulted
    assert qos_class(pod(equal, {})) == "Burstable"  # one container without limits
    assert qos_class(pod({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}})) == "Burstable"
    assert qos_class(pod({"limits": {"nvidia.com/gpu": "1"}})) == "BestEffort"  # only cpu and memory count
    assert qos_class(pod({})) == "BestEffort"
