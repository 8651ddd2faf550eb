"""The Ray head survives its node: a disruption budget, the autoscaler's safe-to-evict annotation, and
(prod) GCS fault tolerance through an external Valkey reached over TLS with a secret AUTH token."""

from __future__ import annotations

import re

import pytest
from helpers import RAY_SERVICE

from llm_pd_eks.gcs_store import GCS_SECRET_KEY, GCS_STORE_PORT, replication_group_id
from llm_pd_eks.ray_head_protection import HEAD_NODE_TYPE_LABEL
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, eks_cluster_ids, run_program

PDB = "kubernetes:policy/v1:PodDisruptionBudget"
REPLICATION_GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"
SECRET = "kubernetes:core/v1:Secret"
SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's marker of a secret value in a property struct


@pytest.fixture(scope="module")
def prod() -> ProgramRun:
    return run_program("prod")


@pytest.fixture(scope="module")
def dev() -> ProgramRun:
    return run_program("dev")


def head(run: ProgramRun) -> dict:
    return run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["headGroupSpec"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_head_is_never_a_voluntary_eviction(stack, request):
    run = request.getfixturevalue(stack)
    template = head(run)["template"]
    assert template["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    (budget,) = [r for r in run.of_type(PDB) if "head" in r.name]
    assert budget.inputs["spec"]["minAvailable"] == 1
    # selects the head pod (its template labels plus KubeRay's node-type label) and no worker
    selector = budget.inputs["spec"]["selector"]["matchLabels"]
    assert selector.items() <= {**template["metadata"]["labels"], **HEAD_NODE_TYPE_LABEL}.items()
    assert selector["ray.io/node-type"] == "head"
    for group in run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        worker_labels = {**group["template"]["metadata"]["labels"], "ray.io/node-type": "worker"}
        assert not selector.items() <= worker_labels.items()
    assert budget.inputs["metadata"]["namespace"] == run.one(RAY_SERVICE).inputs["metadata"]["namespace"]


def test_the_stacks_choose_gcs_fault_tolerance(prod, dev):
    assert stack_config("prod").serving.gcs_fault_tolerance is True
    assert stack_config("dev").serving.gcs_fault_tolerance is False
    assert "gcsFaultToleranceOptions" not in dev.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]
    assert not dev.of_type(REPLICATION_GROUP)


def test_prod_head_keeps_its_state_in_valkey_over_tls(prod):
    store = prod.one(REPLICATION_GROUP).inputs
    options = prod.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]
    endpoint = prod.one(REPLICATION_GROUP).outputs["primaryEndpointAddress"]
    # rediss:// is Ray's TLS scheme (ray/_private/services.py get_address)
    assert options["redisAddress"] == f"rediss://{endpoint}:{GCS_STORE_PORT}"
    assert (store["transitEncryptionEnabled"], store["transitEncryptionMode"]) == (True, "required")
    assert store["atRestEncryptionEnabled"] is True and store["engine"] == "valkey"
    assert store["automaticFailoverEnabled"] is True and store["numCacheClusters"] == 2


def secret_value(value):
    """The value inside Pulumi's secret marker; fails when `value` is not marked secret."""
    assert isinstance(value, dict) and SECRET_SIG in value, f"not a secret: {value!r}"
    return value["value"]


def test_the_auth_token_is_a_secret_in_the_store_and_in_kubernetes(prod):
    token = prod.one("random:index/randomPassword:RandomPassword").outputs["result"]
    assert secret_value(prod.one(REPLICATION_GROUP).inputs["authToken"]) == token
    ref = prod.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]["redisPassword"]
    key_ref = ref["valueFrom"]["secretKeyRef"]
    (secret,) = [s for s in prod.of_type(SECRET) if s.inputs["metadata"]["name"] == key_ref["name"]]
    assert key_ref["key"] == GCS_SECRET_KEY
    assert secret_value(secret.inputs["stringData"]) == {GCS_SECRET_KEY: token}
    assert secret.inputs["metadata"]["namespace"] == prod.one(RAY_SERVICE).inputs["metadata"]["namespace"]


def test_the_store_admits_only_the_nodes(prod):
    (sg,) = [r for r in prod.of_type("aws:ec2/securityGroup:SecurityGroup") if "gcs-store" in r.name]
    # the group EKS made for the cluster: every node and the control plane's ENIs are members
    nodes = eks_cluster_ids(prod.one("eks:index:Cluster").name)["eksClusterSecurityGroupId"]
    (rule,) = sg.inputs["ingress"]
    assert (rule["fromPort"], rule["toPort"], rule["protocol"]) == (GCS_STORE_PORT, GCS_STORE_PORT, "tcp")
    assert rule["securityGroups"] == [nodes] and not rule.get("cidrBlocks")
    assert not sg.inputs.get("egress")
    assert prod.one(REPLICATION_GROUP).inputs["securityGroupIds"] == [sg.id]


@pytest.mark.parametrize(
    "cluster", ["llm-pd-eks-prod", "LLM_pd--Eks", "9-cluster", "a" * 31 + "-b" * 20, "llm-pd-eks-" + "x" * 80]
)
def test_the_store_id_is_one_elasticache_takes(cluster):
    store_id = replication_group_id(cluster)
    assert re.fullmatch(r"[a-z][a-z0-9-]{0,39}", store_id) and "--" not in store_id and not store_id.endswith("-")
    assert store_id.endswith("-ray-gcs")
