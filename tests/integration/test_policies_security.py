"""Rule 8 (no literal secrets, no internet-facing serve endpoint, restricted EKS public endpoint)."""

from __future__ import annotations

import pytest
from policy_fixtures import UNKNOWN, Res, gpu_container, judge, kv_transfer, of, ray_service, serve_config

SERVICE = "kubernetes:core/v1:Service"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
HF_TOKEN = "hf_" + "a1B2c3D4" * 5  # shape of a Hugging Face token (40 chars), not a real one


def deployment(env: list[dict]) -> Res:
    return Res(
        DEPLOYMENT,
        "gateway",
        {
            "spec": {
                "template": {
                    "spec": {
                        "initContainers": [{"name": "init", "image": "busybox:1.37"}],
                        "containers": [{"name": "app", "image": "nginx:1.29", "env": env}],
                    }
                }
            }
        },
    )


# -- literal secrets ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "env, violation",
    [
        ([{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}], False),
        ([{"name": "MAX_TOKENS", "value": "4096"}, {"name": "TOKENIZER", "value": "auto"}], False),
        ([{"name": "HF_TOKEN", "value": ""}], False),
        ([{"name": "HF_TOKEN", "value": UNKNOWN}], False),  # an Output not known yet
        ([{"name": "HF_TOKEN", "value": "abc"}], True),
        ([{"name": "DB_PASSWORD", "value": "hunter2"}], True),
        ([{"name": "MODEL_AUTH", "value": HF_TOKEN}], True),  # by value shape, whatever the name
        ([{"name": "X", "value": "AKIA" + "ABCDEFGHIJKLMNOP"}], True),
    ],
)
def test_literal_secret_env_values(env, violation):
    dep = deployment(env)
    found = of(judge([dep]), "no-literal-secrets-in-pods")
    assert [v.urn for v in found] == ([dep.urn] if violation else [])
    if violation:
        assert env[0]["name"] in found[0].message and "secretKeyRef" in found[0].message
        assert env[0]["value"] not in found[0].message  # the verdict must not echo the secret


def test_literal_secret_in_ray_pods_and_serve_runtime_env():
    head = ray_service(head_env=({"name": "HF_TOKEN", "value": HF_TOKEN},))
    worker = ray_service(worker=gpu_container(env=({"name": "WANDB_API_KEY", "value": "0123"},)))
    cfg = serve_config(kv_transfer())
    cfg["applications"][0]["args"]["decode_config"]["runtime_env"]["env_vars"]["HF_TOKEN"] = HF_TOKEN
    in_serve = ray_service(cfg)
    for svc, name in ((head, "HF_TOKEN"), (worker, "WANDB_API_KEY"), (in_serve, "HF_TOKEN")):
        found = of(judge([svc]), "no-literal-secrets-in-pods")
        assert len(found) == 1 and name in found[0].message
    assert "serveConfigV2" in of(judge([in_serve]), "no-literal-secrets-in-pods")[0].message


def test_allowed_env_names_from_config():
    dep = deployment([{"name": "PUBLIC_TOKEN", "value": "not-a-secret"}])
    cfg = {"no-literal-secrets-in-pods": {"allowedEnvNames": ["PUBLIC_TOKEN"]}}
    assert of(judge([dep], cfg), "no-literal-secrets-in-pods") == []


# -- internet-facing serve endpoint ------------------------------------------------------------
def service(kind: str = "LoadBalancer", annotations=None) -> Res:
    return Res(
        SERVICE,
        "llm-serve",
        {
            "metadata": {"name": "llm-serve", "annotations": annotations or {}},
            "spec": {"type": kind, "ports": [{"port": 8000}]},
        },
    )


SCHEME = "service.beta.kubernetes.io/aws-load-balancer-scheme"


@pytest.mark.parametrize(
    "svc, violation",
    [
        (service("ClusterIP"), False),
        (service(annotations={SCHEME: "internal"}), False),
        (service(annotations={"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}), False),
        (service(annotations={SCHEME: UNKNOWN}), False),
        (service(UNKNOWN), False),
        (service(), True),
        (service(annotations={SCHEME: "internet-facing"}), True),
    ],
)
def test_serve_service_is_not_internet_facing(svc, violation):
    found = of(judge([svc]), "serve-endpoint-not-internet-facing")
    assert [v.urn for v in found] == ([svc.urn] if violation else [])
    if violation:
        assert "llm-serve" in found[0].message and f"{SCHEME}: internal" in found[0].message


def test_internet_facing_allowed_by_config():
    cfg = {"serve-endpoint-not-internet-facing": {"allowInternetFacing": True}}
    assert of(judge([service()], cfg), "serve-endpoint-not-internet-facing") == []


def test_ray_serve_service_and_alb_ingress():
    lb = {"metadata": {"annotations": {SCHEME: "internet-facing"}}, "spec": {"type": "LoadBalancer"}}
    found = of(judge([ray_service(serve_service=lb)]), "serve-endpoint-not-internet-facing")
    assert len(found) == 1 and "spec.serveService" in found[0].message
    internal = {"metadata": {"annotations": {SCHEME: "internal"}}, "spec": {"type": "LoadBalancer"}}
    assert of(judge([ray_service(serve_service=internal)]), "serve-endpoint-not-internet-facing") == []
    ingress = Res(
        "kubernetes:networking.k8s.io/v1:Ingress",
        "llm",
        {"metadata": {"annotations": {"alb.ingress.kubernetes.io/scheme": "internet-facing"}}},
    )
    assert len(of(judge([ingress]), "serve-endpoint-not-internet-facing")) == 1


# -- EKS public endpoint -----------------------------------------------------------------------
def eks_component(**props) -> Res:
    return Res("eks:index:Cluster", "cluster-eks", {"name": "llm-pd-eks-test", **props})


def aws_cluster(**vpc) -> Res:
    return Res("aws:eks/cluster:Cluster", "cluster-eks-eksCluster", {"vpcConfig": {"subnetIds": [UNKNOWN], **vpc}})


@pytest.mark.parametrize(
    "cluster, violation",
    [
        (eks_component(endpointPublicAccess=True, publicAccessCidrs=["203.0.113.0/24"]), False),
        (eks_component(endpointPublicAccess=False), False),
        (eks_component(endpointPublicAccess=True, publicAccessCidrs=UNKNOWN), False),
        (eks_component(endpointPublicAccess=UNKNOWN), False),
        (eks_component(endpointPublicAccess=True, publicAccessCidrs=["0.0.0.0/0"]), True),
        (eks_component(endpointPublicAccess=True), True),  # AWS default: 0.0.0.0/0
        (eks_component(publicAccessCidrs=["10.0.0.0/8", "::/0"]), True),
        (aws_cluster(endpointPublicAccess=True, publicAccessCidrs=["198.51.100.7/32"]), False),
        (aws_cluster(endpointPublicAccess=False, endpointPrivateAccess=True), False),
        (aws_cluster(publicAccessCidrs=["0.0.0.0/0"]), True),  # pulumi-eks' child in a real preview
        (aws_cluster(), True),
    ],
)
def test_eks_public_endpoint_not_open_to_the_world(cluster, violation):
    found = of(judge([cluster]), "eks-public-endpoint-restricted")
    assert [v.urn for v in found] == ([cluster.urn] if violation else [])
    if violation:
        assert cluster.name in found[0].message and "publicAccessCidrs" in found[0].message


def test_allowed_public_cidrs_from_config():
    open_cluster = eks_component(endpointPublicAccess=True, publicAccessCidrs=["0.0.0.0/0"])
    office = eks_component(endpointPublicAccess=True, publicAccessCidrs=["203.0.113.0/24"])
    allow_world = {"eks-public-endpoint-restricted": {"allowedPublicAccessCidrs": ["0.0.0.0/0"]}}
    assert of(judge([open_cluster], allow_world), "eks-public-endpoint-restricted") == []
    only_vpn = {"eks-public-endpoint-restricted": {"allowedPublicAccessCidrs": ["198.51.100.0/24"]}}
    found = of(judge([office], only_vpn), "eks-public-endpoint-restricted")
    assert len(found) == 1 and "198.51.100.0/24" in found[0].message
