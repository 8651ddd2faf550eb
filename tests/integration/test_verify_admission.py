"""`make verify`'s admission-policy check against the fake API server (tests/verify_fakes.py): the policy
and binding as the stack renders them, its CEL evaluated again on every live pod; a missing policy,
a binding in the wrong mode, the server's type-checking warnings and a failing live pod each named."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from verify_fakes import Cluster, FakeKubeApi, admission_objects, gpu_worker_container

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks_tools.ops.verify.admission import check_admission_policy
from llm_pd_eks_tools.ops.verify.kube import Deadline, KubeClient, load_kubeconfig
from llm_pd_eks_tools.ops.verify.results import Context, Expected, Status

P4D = GPU_INSTANCE_TYPES["p4d.24xlarge"]


def expected(mode: str) -> Expected:
    return Expected(2, "us-west-2a", P4D, None, None, None, 1.0, admission_mode=mode)


def gpu_pod(name: str, namespace: str = "llm", **container: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{**gpu_worker_container(), **container}]},
        "status": {"phase": "Running"},
    }


def check(cluster: Cluster, mode: str = "audit") -> Any:
    api = FakeKubeApi(cluster)
    try:
        deadline = Deadline(60)
        client = KubeClient(load_kubeconfig(api.kubeconfig(), deadline), deadline)
        return check_admission_policy(client, expected(mode), Context())
    finally:
        api.close()


def test_compliant_gpu_pods_pass_in_every_mode():
    for mode in ("audit", "warn", "deny"):
        result = check(Cluster(pods=[gpu_pod("w-1")], admission=admission_objects(P4D.name, mode)), mode)
        assert result.status == Status.PASS, result.detail
        assert result.data["judged"] == 1


def test_a_failing_live_pod_is_named_with_its_rule():
    bad = gpu_pod("w-2", env=[{"name": "FI_PROVIDER", "value": "tcp"}])
    result = check(Cluster(pods=[gpu_pod("w-1"), bad], admission=admission_objects(P4D.name, "audit")))
    assert result.status == Status.FAIL
    assert result.data["failures"] == ["llm/w-2: fi-provider-literal"]
    assert "refused under deny" in result.detail


def test_pods_of_exempt_namespaces_and_cpu_pods_are_not_judged():
    system = gpu_pod("dcgm", namespace="kube-system", securityContext={"privileged": True})
    cpu = {"metadata": {"name": "api", "namespace": "llm"}, "spec": {"containers": [{"name": "api"}]}}
    result = check(
        Cluster(pods=[gpu_pod("w-1"), cpu], other_pods=[system], admission=admission_objects(P4D.name, "deny")), "deny"
    )
    assert result.status == Status.PASS and result.data["judged"] == 1


def test_no_gpu_pod_is_unverified_not_a_pass():
    result = check(Cluster(admission=admission_objects(P4D.name, "audit")))
    assert result.status == Status.UNVERIFIED


def test_a_binding_in_another_mode_fails():
    result = check(Cluster(pods=[gpu_pod("w-1")], admission=admission_objects(P4D.name, "audit")), "deny")
    assert result.status == Status.FAIL and "admissionPolicy.mode deny" in result.detail


def test_a_missing_policy_fails():
    result = check(Cluster(pods=[gpu_pod("w-1")]))
    assert result.status == Status.FAIL and "not in the cluster" in result.detail


def test_type_checking_warnings_are_named_beside_the_pods_verdict():
    objects = admission_objects(P4D.name, "audit")
    policy = objects["validatingadmissionpolicies"][0]
    policy["status"]["typeChecking"] = {
        "expressionWarnings": [{"fieldRef": "spec.validations[0].expression", "warning": "undefined field"}]
    }
    result = check(Cluster(pods=[gpu_pod("w-1")], admission=objects))
    assert result.status == Status.PASS
    assert "type check warns: spec.validations[0].expression: undefined field" in result.detail
    bad = gpu_pod("w-2", securityContext={"privileged": True})
    result = check(Cluster(pods=[bad], admission=objects))
    assert result.status == Status.FAIL and "llm/w-2: no-privilege" in result.detail and "type check" in result.detail


@pytest.mark.parametrize("drop", [0, 3])
def test_a_policy_lacking_a_rule_of_the_stack_fails(drop):
    objects = copy.deepcopy(admission_objects(P4D.name, "audit"))
    del objects["validatingadmissionpolicies"][0]["spec"]["validations"][drop]
    result = check(Cluster(pods=[gpu_pod("w-1")], admission=objects))
    assert result.status == Status.FAIL and "run `pulumi up`" in result.detail
    assert len(result.data["notDeployed"]) == 1


def test_a_pod_the_cel_cannot_evaluate_is_a_named_failure_not_a_crash():
    odd = gpu_pod("w-3", env="FI_PROVIDER=efa")  # not a list: the API server would never serve it so
    result = check(Cluster(pods=[odd], admission=admission_objects(P4D.name, "audit")))
    assert result.status == Status.FAIL
    assert result.data["failures"] and all(f.startswith("llm/w-3: ") for f in result.data["failures"])
    assert "could not be evaluated" in result.detail
