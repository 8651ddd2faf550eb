"""The prefill/decode RayService: Ray Serve LLM's `build_pd_openai_app` on KubeRay, KV cache over EFA.

Layout (every number comes from the stack config and the GPU catalog):
- The head runs on the system nodes with `num-gpus: "0"`: it hosts the Serve controller and the
  OpenAI ingress, never an engine.
- Two worker groups, `prefill` and `decode`. A worker pod takes a whole GPU node: all its GPUs
  and all its EFA devices (a replica's KV transfer needs every EFA interface of the node, and
  the devices cannot be shared between pods), holding `gpus / tensorParallelSize` Serve replicas.
  Pod counts follow the Serve autoscaling bounds, so the Ray autoscaler adds nodes' worth of
  pods as Serve adds replicas.
- Prefill and decode never share a node: each group advertises its own custom Ray resource
  (`prefill_gpu` / `decode_gpu`, one per GPU) that only that role's LLM config asks for in its
  placement bundles, and the pods carry a required anti-affinity against the other role.
- NIXL moves the KV cache over LIBFABRIC (libfabric's `efa` provider with device RDMA). Left on
  its default backend (UCX) it falls back to TCP over the VPC and everything still "works",
  only many times slower.

`serveConfigV2` is `yaml.safe_dump` of a dict built here; the shape of `args` is that of Ray
2.60's `PDServingArgs` (prefill_config / decode_config, each an `LLMConfig`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
import yaml

from .catalog import GpuInstanceType
from .config import ServingConfig
from .efa_gpu_nodes import GPU_LABELS, GPU_TOLERATION
from .system_nodes import SYSTEM_LABELS

RAY_VERSION = "2.60.0"  # the Ray in the serving image; requirements.txt pins the same for the schema tests
NAMESPACE = "llm-serving"
RAY_SERVICE_NAME = "llm-pd"
ENDPOINT_SERVICE_NAME = "llm-openai"
HF_SECRET_NAME = "hf-token"
HF_SECRET_KEY = "HF_TOKEN"
SERVE_PORT = 8000
IMPORT_PATH = "ray.serve.llm:build_pd_openai_app"
ROLES = ("prefill", "decode")

ROLE_LABEL = "llm-pd-eks/role"  # prefill | decode, on worker pods (anti-affinity)
APP_LABEL = "llm-pd-eks/ray-service"  # every Ray pod of this RayService (endpoint selector)
SERVE_READY_LABEL = "ray.io/serve"  # KubeRay sets "true" on pods whose Serve proxy is healthy

# libfabric's EFA provider with GPUDirect RDMA: what NIXL's LIBFABRIC backend runs on.
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}
KV_TRANSFER_CONFIG = {
    "kv_connector": "NixlConnector",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
}
# CPUs left to the kubelet and the node's DaemonSets (CNI, kube-proxy, device plugins).
NODE_CPU_RESERVE = 2
HEAD_RESOURCES = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}}


def role_resource(role: str) -> str:
    """The custom Ray resource only `role`'s worker pods advertise (one unit per GPU)."""
    return f"{role}_gpu"


def other_role(role: str) -> str:
    return ROLES[1 - ROLES.index(role)]


def llm_config(serving: ServingConfig, role: str, instance: GpuInstanceType) -> dict[str, Any]:
    """One `LLMConfig` (as a dict) for the prefill or the decode side."""
    group = serving.groups()[role]
    return {
        "model_loading_config": {"model_id": serving.model_id, "model_source": serving.model_id},
        "accelerator_type": instance.ray_accelerator_type,
        "engine_kwargs": {
            "tensor_parallel_size": group.tensor_parallel_size,
            "max_model_len": serving.max_model_len,
            "kv_cache_dtype": serving.kv_cache_dtype,
            "kv_transfer_config": copy.deepcopy(KV_TRANSFER_CONFIG),  # no YAML anchors between the two
        },
        # One bundle per TP rank; STRICT_PACK keeps a TP group on one node (NVLink, not EFA).
        "placement_group_config": {
            "bundle_per_worker": {"GPU": 1, role_resource(role): 1},
            "strategy": "STRICT_PACK",
        },
        "deployment_config": {
            "autoscaling_config": {"min_replicas": group.min_replicas, "max_replicas": group.max_replicas}
        },
    }


def serve_config(serving: ServingConfig, instance: GpuInstanceType) -> dict[str, Any]:
    """The Serve deploy config: one application, the P/D OpenAI app."""
    return {
        "applications": [
            {
                "name": "llm",
                "route_prefix": "/",
                "import_path": IMPORT_PATH,
                "args": {
                    "prefill_config": llm_config(serving, "prefill", instance),
                    "decode_config": llm_config(serving, "decode", instance),
                },
            }
        ]
    }


def serve_config_yaml(serving: ServingConfig, instance: GpuInstanceType) -> str:
    return yaml.safe_dump(serve_config(serving, instance), sort_keys=False)


def head_group(image: str) -> dict[str, Any]:
    return {
        "rayStartParams": {"num-gpus": "0", "dashboard-host": "0.0.0.0"},
        "template": {
            "metadata": {"labels": {APP_LABEL: RAY_SERVICE_NAME}},
            "spec": {
                "nodeSelector": dict(SYSTEM_LABELS),
                "containers": [
                    {
                        "name": "ray-head",
                        "image": image,
                        "resources": HEAD_RESOURCES,
                        "ports": [
                            {"name": "gcs-server", "containerPort": 6379},
                            {"name": "dashboard", "containerPort": 8265},
                            {"name": "client", "containerPort": 10001},
                            {"name": "serve", "containerPort": SERVE_PORT},
                        ],
                    }
                ],
            },
        },
    }


def worker_group(
    serving: ServingConfig,
    role: str,
    instance: GpuInstanceType,
    hf_secret_name: Optional[pulumi.Input[str]] = None,
) -> dict[str, Any]:
    """A worker group whose every pod fills one GPU node (all GPUs, all EFA devices)."""
    group = serving.groups()[role]
    min_pods = group.nodes(group.min_replicas, instance.gpus)
    max_pods = group.nodes(group.max_replicas, instance.gpus)
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in EFA_ENV.items()]
    if hf_secret_name is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": hf_secret_name, "key": HF_SECRET_KEY}}})
    return {
        "groupName": role,
        "replicas": min_pods,
        "minReplicas": min_pods,
        "maxReplicas": max_pods,
        "rayStartParams": {},
        "resources": {role_resource(role): str(instance.gpus)},
        "template": {
            "metadata": {"labels": {APP_LABEL: RAY_SERVICE_NAME, ROLE_LABEL: role}},
            "spec": {
                "nodeSelector": dict(GPU_LABELS),
                "tolerations": [GPU_TOLERATION],
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {
                                    "matchExpressions": [
                                        {"key": ROLE_LABEL, "operator": "In", "values": [other_role(role)]}
                                    ]
                                },
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                },
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": serving.image,
                        # Extended resources: limits only (requests default to them).
                        "resources": {
                            "requests": {"cpu": str(instance.vcpus - NODE_CPU_RESERVE)},
                            "limits": {
                                "nvidia.com/gpu": str(instance.gpus),
                                "vpc.amazonaws.com/efa": str(instance.efa_interfaces),
                            },
                        },
                        "env": env,
                        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                    }
                ],
                # NCCL and the Ray object store need more shared memory than the runtime's 64 MiB.
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
            },
        },
    }


def ray_service_spec(
    serving: ServingConfig, instance: GpuInstanceType, hf_secret_name: Optional[pulumi.Input[str]] = None
) -> dict[str, Any]:
    return {
        "serveConfigV2": serve_config_yaml(serving, instance),
        "rayClusterConfig": {
            "rayVersion": RAY_VERSION,
            "enableInTreeAutoscaling": True,  # worker pods follow Serve's replica autoscaling
            "headGroupSpec": head_group(serving.image),
            "workerGroupSpecs": [worker_group(serving, role, instance, hf_secret_name) for role in ROLES],
        },
    }


def wait_annotations(serving: ServingConfig) -> dict[str, str]:
    """pulumi-kubernetes waits for KubeRay's `Ready` condition (serve app healthy, endpoints up)."""
    return {
        "pulumi.com/waitFor": "condition=Ready",
        "pulumi.com/timeoutSeconds": str(serving.ready_timeout_minutes * 60),
    }


def endpoint_service_spec(public: bool, ray_service_name: pulumi.Input[str]) -> k8s.core.v1.ServiceSpecArgs:
    return k8s.core.v1.ServiceSpecArgs(
        type="LoadBalancer" if public else "ClusterIP",
        selector={APP_LABEL: ray_service_name, SERVE_READY_LABEL: "true"},
        ports=[k8s.core.v1.ServicePortArgs(name="serve", port=SERVE_PORT, target_port=SERVE_PORT, protocol="TCP")],
    )


def endpoint_annotations(public: bool) -> dict[str, str]:
    if not public:
        return {}
    # EKS's built-in service controller makes an NLB; the scheme is spelled out for the AWS Load
    # Balancer Controller too, should the cluster get one.
    return {
        "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
        "service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing",
    }


@dataclass(frozen=True)
class RayServiceArgs:
    config: ServingConfig
    instance: GpuInstanceType  # the GPU node type (gpuNodes.instanceType)
    provider: k8s.Provider
    operator: pulumi.Resource  # the KubeRay release: it installs the RayService CRD
    device_plugins: Sequence[pulumi.Resource]  # pods cannot request GPUs or EFA devices before these
    node_groups: Sequence[pulumi.Resource]  # system (head) and GPU (workers)
    hf_token: Optional[pulumi.Output[str]] = None  # a Pulumi secret (pulumi config set --secret hfToken)


class LlmRayService(pulumi.ComponentResource):
    """Namespace, optional HF token Secret, the RayService and its OpenAI-compatible Service."""

    namespace: k8s.core.v1.Namespace
    hf_secret: Optional[k8s.core.v1.Secret]
    ray_service: k8s.apiextensions.CustomResource
    endpoint_service: k8s.core.v1.Service
    endpoint: pulumi.Output[Optional[str]]

    def __init__(self, name: str, args: RayServiceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-pd-eks:index:LlmRayService", name, None, opts)
        serving = args.config
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)

        self.namespace = k8s.core.v1.Namespace(
            f"{name}-ns", metadata=k8s.meta.v1.ObjectMetaArgs(name=NAMESPACE), opts=k8s_opts
        )
        namespace = self.namespace.metadata.name

        self.hf_secret = None
        hf_secret_name: Optional[pulumi.Output[str]] = None
        if args.hf_token is not None:
            token: pulumi.Output[str] = pulumi.Output.secret(args.hf_token)
            self.hf_secret = k8s.core.v1.Secret(
                f"{name}-hf-token",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=HF_SECRET_NAME, namespace=namespace),
                type="Opaque",
                string_data={HF_SECRET_KEY: token},
                opts=k8s_opts,
            )
            hf_secret_name = self.hf_secret.metadata.name

        timeout = f"{serving.ready_timeout_minutes}m"
        self.ray_service = k8s.apiextensions.CustomResource(
            f"{name}-rayservice",
            api_version="ray.io/v1",
            kind="RayService",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=RAY_SERVICE_NAME, namespace=namespace, annotations=wait_annotations(serving)
            ),
            spec=ray_service_spec(serving, args.instance, hf_secret_name),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                # No data flows from these, yet the CRD, the device plugins and the nodes must exist first.
                depends_on=[args.operator, *args.device_plugins, *args.node_groups],
                custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout),
            ),
        )

        public = serving.public_endpoint
        # Selects the ready Serve proxies of this RayService; created once the RayService is Ready
        # (its name flows in), so Pulumi's wait for endpoints does not race the first pods.
        metadata: pulumi.Output[Any] = self.ray_service.metadata  # type: ignore[attr-defined]  # set dynamically
        ray_service_name = metadata.apply(lambda m: _field(m, "name") or RAY_SERVICE_NAME)
        self.endpoint_service = k8s.core.v1.Service(
            f"{name}-endpoint",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=ENDPOINT_SERVICE_NAME, namespace=namespace, annotations=endpoint_annotations(public)
            ),
            spec=endpoint_service_spec(public, ray_service_name),
            opts=k8s_opts,
        )
        self.endpoint = self._endpoint_url(public)
        self.register_outputs({"endpoint": self.endpoint, "modelId": serving.model_id})

    def _endpoint_url(self, public: bool) -> pulumi.Output[Optional[str]]:
        """The OpenAI base URL: the NLB's hostname when public, the in-cluster DNS name otherwise."""
        if not public:
            return pulumi.Output.from_input(
                f"http://{ENDPOINT_SERVICE_NAME}.{NAMESPACE}.svc.cluster.local:{SERVE_PORT}/v1"
            )

        def from_status(status: Any) -> Optional[str]:
            ingress = _field(_field(status, "load_balancer"), "ingress") or []
            host = (_field(ingress[0], "hostname") or _field(ingress[0], "ip")) if ingress else None
            return f"http://{host}:{SERVE_PORT}/v1" if host else None

        return self.endpoint_service.status.apply(from_status)


def _field(obj: Any, key: str) -> Any:
    """A field of a typed output object or of a plain dict (mocks hand back either)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)
