"""Resource sets for the policy tests, as the engine would send them to the analyzer.

`Res` builds `pulumi.runtime.proto` AnalyzerResource messages (URNs, parents, property
dependencies, unknown values); `gpu_stack` and `ray_service` build a compliant baseline that each
test bends in exactly one way. One policy-pack process serves the whole session (`pack()`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml
from google.protobuf import struct_pb2
from helpers import LAUNCH_TEMPLATE, NODE_GROUP, PLACEMENT_GROUP, RAY_SERVICE, SUBNET

from llm_pd_eks.pulumi_sdk import analyzer_pb2
from llm_pd_eks_policy.efa_table import EFA_NETWORK_CARDS
from llm_pd_eks_tools.plan.preview.analyzer import UNKNOWN, PolicyPackServer, Verdict

STACK, PROJECT = "test", "llm-pd-eks"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"

_server: Optional[PolicyPackServer] = None


def pack() -> PolicyPackServer:
    """The policy pack as a running analyzer, started on first use; conftest's session fixture stops
    it at the end of the session. (`judge` is a plain helper used by dozens of tests, so it reaches
    the server through here rather than through a fixture argument.)"""
    global _server
    if _server is None:
        _server = PolicyPackServer()
        _server.start()
    return _server


def close_pack() -> None:
    global _server
    if _server is not None:
        _server.close()
        _server = None


@dataclass
class Res:
    """One resource as the engine knows it during a preview."""

    type: str
    name: str
    props: dict[str, Any]
    deps: dict[str, list["Res"]] = field(default_factory=dict)  # property -> resources feeding it
    parent: Optional["Res"] = None
    protect: bool = False

    @property
    def urn(self) -> str:
        chain, p = [self.type], self.parent
        while p is not None:
            chain.insert(0, p.type)
            p = p.parent
        return f"urn:pulumi:{STACK}::{PROJECT}::{'$'.join(chain)}::{self.name}"

    def message(self) -> analyzer_pb2.AnalyzerResource:
        props = struct_pb2.Struct()
        props.update(self.props)
        parent = self.parent.urn if self.parent else ""
        all_deps = sorted({d.urn for ds in self.deps.values() for d in ds})
        return analyzer_pb2.AnalyzerResource(
            type=self.type,
            name=self.name,
            urn=self.urn,
            parent=parent,
            properties=props,
            options=analyzer_pb2.AnalyzerResourceOptions(protect=self.protect, parent=parent),
            dependencies=all_deps,
            propertyDependencies={
                k: analyzer_pb2.AnalyzerPropertyDependencies(urns=[d.urn for d in v]) for k, v in self.deps.items()
            },
        )


def judge(resources, config: Optional[dict] = None) -> list[Verdict]:
    """Every resource through Analyze, the set through AnalyzeStack, as the engine does."""
    resources = list(resources.values()) if isinstance(resources, dict) else list(resources)
    return pack().analyze_all([r.message() for r in resources], config)


def of(verdicts: list[Verdict], policy: str, enforcement: str = "mandatory") -> list[Verdict]:
    return [v for v in verdicts if v.policy == policy and v.enforcement == enforcement]


def mandatory(verdicts: list[Verdict]) -> list[Verdict]:
    return [v for v in verdicts if v.enforcement == "mandatory"]


# -- AWS: the EFA GPU node group -------------------------------------------------------------------
COMPONENT = "llm-pd-eks:index:EfaGpuNodeGroup"


def efa_interfaces(cards: "int | tuple[int, ...]", security_group: Any = "sg-efa") -> list[dict[str, Any]]:
    """One EFA interface per EFA network card (`cards`: a count, i.e. cards 0..n-1, or the indexes):
    'efa' (with ENA) on card 0, 'efa-only' on the rest; a type whose card 0 has no EFA (p6-b300)
    gets a plain ENA interface there."""
    indexes = tuple(range(cards)) if isinstance(cards, int) else tuple(cards)
    primary = (
        []
        if 0 in indexes
        else [
            {
                "networkCardIndex": 0,
                "deviceIndex": 0,
                "interfaceType": "interface",
                "deleteOnTermination": "true",
                "securityGroups": [security_group],
            }
        ]
    )
    return primary + [
        {
            "networkCardIndex": i,
            "deviceIndex": 0 if i == 0 else 1,
            "interfaceType": "efa" if i == 0 else "efa-only",
            "deleteOnTermination": "true",
            "securityGroups": [security_group],
        }
        for i in indexes
    ]


SELF_ALL = {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}


def gpu_stack(
    instance_type: str = "p5.48xlarge",
    azs: tuple[str, ...] = ("us-west-2a",),
    unknown_ids: bool = False,
) -> dict[str, Res]:
    """A compliant GPU node group: private subnet(s) in `azs`, cluster placement group, one EFA
    interface per EFA card (cards from the generated EC2 table), IMDSv2. With `unknown_ids` every ID,
    name and the group name are unknown, as on a first preview, and only property dependencies link
    the resources."""
    comp = Res(COMPONENT, "gpu-nodes", {})
    subnets = {
        f"subnet-{az}": Res(
            SUBNET,
            f"network-private-{az}",
            {
                "availabilityZone": az,
                "mapPublicIpOnLaunch": False,
                "vpcId": "vpc-1",
                "cidrBlock": f"10.0.{i * 32}.0/19",
            },
        )
        for i, az in enumerate(azs)
    }
    pg = Res(PLACEMENT_GROUP, "gpu-nodes-pg", {"strategy": "cluster"}, parent=comp)
    sg = Res(
        SECURITY_GROUP,
        "gpu-nodes-efa-sg",
        {
            "vpcId": "vpc-1",
            "ingress": [SELF_ALL],
            "egress": [SELF_ALL, {"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}],
        },
        parent=comp,
    )
    lt = Res(
        LAUNCH_TEMPLATE,
        "gpu-nodes-lt",
        {
            "instanceType": instance_type,
            "networkInterfaces": efa_interfaces(EFA_NETWORK_CARDS[instance_type], UNKNOWN if unknown_ids else "sg-efa"),
            "metadataOptions": {"httpTokens": "required", "httpEndpoint": "enabled", "httpPutResponseHopLimit": 1},
            "placement": {"groupName": UNKNOWN if unknown_ids else "gpu-nodes-pg-1a2b3c"},
        },
        deps={"placement": [pg], "networkInterfaces": [sg]},
        parent=comp,
    )
    ng = Res(
        NODE_GROUP,
        "gpu-nodes-ng",
        {
            "clusterName": "llm-pd-eks-test",
            "subnetIds": [UNKNOWN if unknown_ids else f"subnet-{az}-id" for az in azs],
            "launchTemplate": {"id": UNKNOWN if unknown_ids else "lt-0123", "version": UNKNOWN if unknown_ids else "1"},
            "amiType": "AL2023_x86_64_NVIDIA",
            "scalingConfig": {"minSize": 2, "desiredSize": 2, "maxSize": 2},
        },
        deps={"subnetIds": list(subnets.values()), "launchTemplate": [lt]},
        parent=comp,
    )
    return {"component": comp, **subnets, "pg": pg, "sg": sg, "lt": lt, "ng": ng}


def without_deps(stack: dict[str, Res]) -> dict[str, Res]:
    """The same stack linked only by known IDs/names (as after an update), no property dependencies."""
    stack = copy.deepcopy(stack)
    for res in stack.values():
        res.deps = {}
    for key, res in stack.items():
        if res.type == SUBNET:
            res.props["id"] = f"{key}-id"
    stack["lt"].props["id"] = "lt-0123"
    stack["sg"].props["id"] = "sg-efa"
    stack["pg"].props["name"] = "gpu-nodes-pg-1a2b3c"
    return stack


# -- Kubernetes: the RayService --------------------------------------------------------------------


def kv_transfer(backends: Optional[list[str]] = ("LIBFABRIC",)) -> dict[str, Any]:
    extra = {} if backends is None else {"kv_connector_extra_config": {"backends": list(backends)}}
    return {"kv_connector": "NixlConnector", "kv_role": "kv_both", **extra}


def serve_config(prefill_kv: dict[str, Any], decode_kv: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """A Ray Serve LLM prefill/decode application as `build_pd_openai_app` takes it."""

    def llm(kv: dict[str, Any]) -> dict[str, Any]:
        return {
            "model_loading_config": {"model_id": "qwen", "model_source": "Qwen/Qwen2.5-7B-Instruct"},
            "engine_kwargs": {"tensor_parallel_size": 1, "kv_transfer_config": kv},
            "runtime_env": {"env_vars": {"VLLM_USE_V1": "1"}},
        }

    return {
        "applications": [
            {
                "name": "llm",
                "route_prefix": "/",
                "import_path": "ray.serve.llm:build_pd_openai_app",
                "args": {"prefill_config": llm(prefill_kv), "decode_config": llm(decode_kv or prefill_kv)},
            }
        ]
    }


def gpu_container(
    gpus: int = 8, efa: Optional[int] = 32, fi_provider: Optional[str] = "efa", env: tuple = ()
) -> dict[str, Any]:
    limits: dict[str, Any] = {"nvidia.com/gpu": gpus, "cpu": "32", "memory": "256Gi"}
    if efa is not None:
        limits["vpc.amazonaws.com/efa"] = efa
    env_list = [{"name": "FI_PROVIDER", "value": fi_provider}] if fi_provider is not None else []
    return {
        "name": "ray-worker",
        "image": "rayproject/ray-llm:2.60.0-py311-cu128",
        "resources": {"limits": limits, "requests": dict(limits)},
        "env": env_list + list(env),
    }


def ray_service(
    config: Any = None,
    worker: Optional[dict[str, Any]] = None,
    serve_service: Optional[dict[str, Any]] = None,
    head_env: tuple = (),
) -> Res:
    """A compliant RayService; `config` replaces the serve config (a dict is dumped to YAML text)."""
    config = serve_config(kv_transfer()) if config is None else config
    spec: dict[str, Any] = {
        "serveConfigV2": yaml.safe_dump(config) if isinstance(config, dict) else config,
        "rayClusterConfig": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "ray-head",
                                "image": "rayproject/ray-llm:2.60.0-py311-cu128",
                                "env": [
                                    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                                    *head_env,
                                ],
                            }
                        ]
                    }
                },
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": 2,
                    "minReplicas": 2,
                    "maxReplicas": 2,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [worker or gpu_container()]}},
                }
            ],
        },
    }
    if serve_service is not None:
        spec["serveService"] = serve_service
    return Res(
        RAY_SERVICE,
        "llm",
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayService",
            "metadata": {"name": "llm", "namespace": "llm"},
            "spec": spec,
        },
    )
