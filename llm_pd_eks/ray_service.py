"""The prefill/decode RayService: Ray Serve LLM's `build_pd_openai_app` on KubeRay, KV cache over EFA.

Layout (every number comes from the stack config and the GPU catalog):
- The head runs on the system nodes with `num-cpus: "0"` and `num-gpus: "0"`: Ray schedules nothing
  there that asks for a CPU, so it hosts only the GCS and the Serve controller (a zero-CPU actor Serve
  pins to the head). Serve's HTTP proxies (zero-CPU, one per node: proxy_location EveryNode) run on
  every node; the OpenAI ingress replica (one CPU) lands on a GPU worker's spare CPUs.
- Two worker groups, `prefill` and `decode`. A worker pod takes a whole GPU node: all its GPUs
  and all its EFA devices (a replica's KV transfer needs every EFA interface of the node, and
  the devices cannot be shared between pods), holding `gpus / tensorParallelSize` Serve replicas.
  Pod counts follow the Serve autoscaling bounds, so the Ray autoscaler adds nodes' worth of
  pods as Serve adds replicas.
- Prefill and decode never share a node: each group advertises its own custom Ray resource
  (`prefill_slot` / `decode_slot`, one per GPU) that only that role's LLM config asks for in its
  placement bundles, and the pods carry a required anti-affinity against the other role. The name
  must survive KubeRay's operator, which turns any group resource ending in `gpu` (any case) into
  `--num-gpus` and drops it from `--resources` (llm_pd_eks/ray_resources.py).
- Each worker group also advertises `accelerator_type:<T>` in its `resources`. Ray Serve LLM adds
  `accelerator_type:<T>: 0.001` to every placement bundle; a raylet detects that resource itself, but
  the KubeRay autoscaler builds its view of a group only from the group spec
  (`_get_ray_resources_from_group_spec`: CPU, GPU, memory, `resources`), so without it no bundle
  ever looks placeable and no pod is ever requested. `<T>` is Ray's own name for the GPU (catalog).
- EFA inside the pod: 2 MiB huge pages and a memory request/limit (libfabric's EFA provider
  allocates its buffers from huge pages; the EKS EFA guide requests both), `IPC_LOCK` to pin the
  memory it registers, and `FI_EFA_USE_DEVICE_RDMA=1` only on types whose EFA has RDMA read.
  Unprivileged: the AWS Ray LLM DLC's own EKS multi-node test (aws/deep-learning-containers
  test/ray-llm/eks-multi-node/rayservice.yml) runs its EFA workers with no securityContext at all,
  with `FI_EFA_FORK_SAFE=1` and `VLLM_HOST_IP` from the pod IP, which are set here too.
- Weights: the Hugging Face cache (`HF_HOME`) is a hostPath under /var/lib/kubelet, which nodeadm
  puts on the instance-store RAID0 (llm_pd_eks/node_common.py), so a restarted or rescheduled pod on
  the node reads the weights locally instead of over NAT; downloads use hf-xet's high-performance
  mode (huggingface_hub 1.x `HF_XET_HIGH_PERFORMANCE`), and Ray Serve LLM's engine start timeout
  (`RAYLLM_ENGINE_START_TIMEOUT_S`) follows from the model's size (`engine_start_timeout_s`).
- Roll-outs: `serving.upgradeStrategy` (see `UPGRADE_STRATEGIES`); PodDisruptionBudgets keep a
  node-group update from draining the last prefill or decode pod.
- NIXL moves the KV cache over LIBFABRIC (libfabric's `efa` provider with device RDMA). Left on
  its default backend (UCX) it falls back to TCP over the VPC and everything still "works",
  only many times slower.

`serveConfigV2` is `yaml.safe_dump` of a dict built here; the shape of `args` is that of Ray
2.60's `PDServingArgs` (prefill_config / decode_config, each an `LLMConfig`).
- Autoscaling: each role's `target_ongoing_requests`, `max_ongoing_requests` and up/downscale
  delays come from the stack config (`make size WRITE=1` derives them: llm_pd_eks_tools/size.py `autoscaling_values`).
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
import yaml

from .catalog import GpuInstanceType
from .config.serving import ServingConfig
from .efa_gpu_nodes import GPU_LABELS, GPU_TOLERATION
from .gcs_store import GcsConnection, gcs_fault_tolerance_options
from .gpu_cutover import RayNodeGroupNames, node_group_selector
from .models import MODELS
from .ray_head_protection import head_disruption_budget, protect_head
from .ray_resources import accelerator_resource_name, custom_resource_problem, role_resource
from .rollout_rule import replace_on_change_paths
from .system_nodes import SYSTEM_LABELS
from .versions import DLC_RAY_VERSION

# The Ray of the stacks' image (the AWS Ray LLM DLC, llm_pd_eks/versions.py); requirements-dev.txt
# pins the same for the schema tests (tests/test_ray_service.py checks the two agree).
RAY_VERSION = DLC_RAY_VERSION
NAMESPACE = "llm-serving"
RAY_SERVICE_NAME = "llm-pd"
HF_SECRET_NAME = "hf-token"
HF_SECRET_KEY = "HF_TOKEN"
SERVE_PORT = 8000
IMPORT_PATH = "ray.serve.llm:build_pd_openai_app"
ROLES = ("prefill", "decode")

ROLE_LABEL = "llm-pd-eks/role"  # prefill | decode, on worker pods (anti-affinity)
APP_LABEL = "llm-pd-eks/ray-service"  # every Ray pod of this RayService (PodDisruptionBudget selector)

# libfabric's EFA provider: what NIXL's LIBFABRIC backend runs on. FI_EFA_USE_DEVICE_RDMA=1 is
# added only where the device has RDMA read (libfabric aborts when it is forced on a device without).
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1"}
EFA_RDMA_ENV = {"FI_EFA_USE_DEVICE_RDMA": "1"}
# The weights cache: a node directory on the instance-store RAID0 (nodeadm mounts /var/lib/kubelet there).
WEIGHTS_CACHE_HOST_PATH = "/var/lib/kubelet/llm-pd-eks/hf-cache"
WEIGHTS_CACHE_MOUNT = "/mnt/hf-cache"
HF_ENV = {"HF_HOME": WEIGHTS_CACHE_MOUNT, "HF_XET_HIGH_PERFORMANCE": "1"}
# Engine start budget: the weights at the slowest first download we plan for (Hugging Face over the
# NAT gateway) plus vLLM's load, compile and CUDA-graph capture. Ray Serve LLM's default is 3600 s
# (ray.llm._internal.serve.constants ENGINE_START_TIMEOUT_S, env RAYLLM_ENGINE_START_TIMEOUT_S).
WEIGHTS_DOWNLOAD_GIB_PER_S = 0.1
ENGINE_WARMUP_S = 600
ENGINE_START_TIMEOUT_ENV = "RAYLLM_ENGINE_START_TIMEOUT_S"
KV_TRANSFER_CONFIG = {
    "kv_connector": "NixlConnector",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
}
# CPUs left to the kubelet and the node's DaemonSets (CNI, kube-proxy, device plugins).
NODE_CPU_RESERVE = 2
HEAD_RESOURCES = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}}
# Share of the instance's RAM a worker pod requests (and is limited to): the rest holds the kernel,
# the kubelet's reservations, the node's pre-allocated huge pages and the DaemonSets.
WORKER_MEMORY_SHARE = 0.85
# serving.upgradeStrategy -> KubeRay 1.7 spec.upgradeStrategy.type (rayservice_types.go:
# NewCluster | NewClusterWithIncrementalUpgrade | None). `Recreate` is KubeRay's `None` plus a Pulumi
# replacement of the RayService whenever its Ray cluster changes (see LlmRayService).
UPGRADE_STRATEGIES = {"Recreate": "None", "NewCluster": "NewCluster"}


def other_role(role: str) -> str:
    return ROLES[1 - ROLES.index(role)]


def accelerator_resource(instance: GpuInstanceType) -> str:
    """`accelerator_type:<T>`: what a raylet on this GPU reports and Ray Serve LLM's bundles ask for."""
    return accelerator_resource_name(instance.ray_accelerator_type)


def worker_memory_gib(instance: GpuInstanceType) -> int:
    return int(instance.memory_gib * WORKER_MEMORY_SHARE)


def engine_start_timeout_s(serving: ServingConfig) -> int:
    """Seconds Ray Serve LLM gives one engine to start: download the weights once, load, warm up."""
    return math.ceil(MODELS[serving.model_id].weights_gib_bf16 / WEIGHTS_DOWNLOAD_GIB_PER_S) + ENGINE_WARMUP_S


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
            "max_ongoing_requests": group.max_ongoing_requests,
            "autoscaling_config": {
                "min_replicas": group.min_replicas,
                "max_replicas": group.max_replicas,
                "target_ongoing_requests": group.target_ongoing_requests,
                "upscale_delay_s": group.upscale_delay_s,
                "downscale_delay_s": group.downscale_delay_s,
            },
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


def head_group(image: str, node_group: Optional[pulumi.Input[str]] = None) -> dict[str, Any]:
    return {
        # No CPUs for Ray: nothing that asks for a CPU (ingress, engines) is scheduled on the head.
        "rayStartParams": {"num-cpus": "0", "num-gpus": "0", "dashboard-host": "0.0.0.0"},
        "template": {
            "metadata": {"labels": {APP_LABEL: RAY_SERVICE_NAME}},
            "spec": {
                "nodeSelector": {**SYSTEM_LABELS, **node_group_selector(node_group)},  # gpu_cutover.py
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
    node_group: Optional[pulumi.Input[str]] = None,
) -> dict[str, Any]:
    """A worker group whose every pod fills one GPU node (all GPUs, all EFA devices)."""
    group = serving.groups()[role]
    min_pods = group.nodes(group.min_replicas, instance.gpus)
    max_pods = group.nodes(group.max_replicas, instance.gpus)
    plain_env = {
        **EFA_ENV,
        **(EFA_RDMA_ENV if instance.efa_rdma_read else {}),
        **HF_ENV,
        ENGINE_START_TIMEOUT_ENV: str(engine_start_timeout_s(serving)),
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plain_env.items()]
    # vLLM binds its side channel (NIXL handshake) to this address: the pod's, not a guess.
    env.append({"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    memory = f"{worker_memory_gib(instance)}Gi"
    hugepages = f"{instance.efa_hugepages_2mi_mib}Mi"
    if hf_secret_name is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": hf_secret_name, "key": HF_SECRET_KEY}}})
    resources = {role_resource(role): str(instance.gpus), accelerator_resource(instance): "1"}
    problems = [p for p in map(custom_resource_problem, resources) if p]
    if problems:
        raise ValueError(f"worker group {role}: " + "; ".join(problems))
    return {
        "groupName": role,
        "replicas": min_pods,
        "minReplicas": min_pods,
        "maxReplicas": max_pods,
        "rayStartParams": {},
        # What the autoscaler sees of a node of this group: its role resource and Ray's accelerator type.
        "resources": resources,
        "template": {
            "metadata": {"labels": {APP_LABEL: RAY_SERVICE_NAME, ROLE_LABEL: role}},
            "spec": {
                "nodeSelector": {**GPU_LABELS, **node_group_selector(node_group)},  # gpu_cutover.py
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
                        # Extended resources: limits only (requests default to them). Huge pages
                        # must be requested equal to their limit; memory likewise (Guaranteed).
                        "resources": {
                            "requests": {
                                "cpu": str(instance.vcpus - NODE_CPU_RESERVE),
                                "memory": memory,
                                "hugepages-2Mi": hugepages,
                            },
                            "limits": {
                                "nvidia.com/gpu": str(instance.gpus),
                                "vpc.amazonaws.com/efa": str(instance.efa_interfaces),
                                "memory": memory,
                                "hugepages-2Mi": hugepages,
                            },
                        },
                        # libfabric pins (mlocks) the memory it registers with the EFA device.
                        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                        "env": env,
                        "volumeMounts": [
                            {"name": "dshm", "mountPath": "/dev/shm"},
                            {"name": "hf-cache", "mountPath": WEIGHTS_CACHE_MOUNT},
                        ],
                    }
                ],
                "volumes": [
                    # NCCL and the Ray object store need more shared memory than the runtime's 64 MiB.
                    {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                    {"name": "hf-cache", "hostPath": {"path": WEIGHTS_CACHE_HOST_PATH, "type": "DirectoryOrCreate"}},
                ],
            },
        },
    }


def serve_service(serving: ServingConfig) -> dict[str, Any]:
    """`spec.serveService`: KubeRay creates this Service and pins its selector to the cluster that
    serves (`ray.io/cluster: <active>`, `ray.io/serve: "true"`), switching it only once a new cluster
    is ready; name, type and annotations are ours, the `serve` port is merged in by KubeRay."""
    public = serving.public_endpoint
    spec: dict[str, Any] = {
        "type": "LoadBalancer" if public else "ClusterIP",
        "ports": [{"name": "serve", "port": SERVE_PORT, "targetPort": SERVE_PORT, "protocol": "TCP"}],
    }
    if public:
        # The AWS cloud provider admits only these CIDRs to the NLB's targets; with none it admits
        # 0.0.0.0/0 (k8s.io/cloud-provider service/helpers.GetLoadBalancerSourceRanges, read by
        # cloud-provider-aws's EnsureLoadBalancer). The config requires them with publicEndpoint.
        spec["loadBalancerSourceRanges"] = list(serving.endpoint_source_ranges)
    return {
        "metadata": {
            "name": serving.endpoint_name,
            "annotations": {**endpoint_annotations(public), **serving.endpoint_annotations},
        },
        "spec": spec,
    }


def ray_service_spec(
    serving: ServingConfig,
    instance: GpuInstanceType,
    hf_secret_name: Optional[pulumi.Input[str]] = None,
    node_groups: Optional[RayNodeGroupNames] = None,
) -> dict[str, Any]:
    return {
        "upgradeStrategy": {"type": UPGRADE_STRATEGIES[serving.upgrade_strategy]},
        "serveService": serve_service(serving),
        "serveConfigV2": serve_config_yaml(serving, instance),
        "rayClusterConfig": {
            "rayVersion": RAY_VERSION,
            "enableInTreeAutoscaling": True,  # worker pods follow Serve's replica autoscaling
            "headGroupSpec": head_group(serving.image, node_groups.head if node_groups else None),
            "workerGroupSpecs": [
                worker_group(serving, role, instance, hf_secret_name, node_groups.workers if node_groups else None)
                for role in ROLES
            ],
        },
    }


def wait_annotations(serving: ServingConfig) -> dict[str, str]:
    """pulumi-kubernetes waits for KubeRay's `Ready` condition (serve app healthy, endpoints up).

    With NewCluster, `Ready` stays true from the old cluster during an upgrade, so `up` also waits
    for KubeRay's `UpgradeInProgress` to be False (the new cluster serves); a JSON list means all.
    """
    wait_for = ["condition=Ready"]
    if serving.upgrade_strategy == "NewCluster":
        wait_for.append("condition=UpgradeInProgress=False")
    return {
        "pulumi.com/waitFor": wait_for[0] if len(wait_for) == 1 else json.dumps(wait_for),
        "pulumi.com/timeoutSeconds": str(serving.ready_timeout_minutes * 60),
    }


# `pulumi destroy` (and Recreate's delete-before-replace) waits until the RayService is gone together
# with what KubeRay made it the controlling owner of (v1.7.0 rayservice_controller.go: the RayClusters
# and the serve Service, `ctrl.SetControllerReference`, which blocks owner deletion). A LoadBalancer
# Service keeps the cloud provider's `service.kubernetes.io/load-balancer-cleanup` finalizer until its
# NLB is deleted (kubernetes/cloud-provider v0.35.6 controllers/service), so foreground deletion means
# no NLB is left in the public subnets when the nodes, the cluster and the VPC go after it.
# The annotation is pulumi-kubernetes's (v4.18.0, https://www.pulumi.com/blog/improved-kubernetes-await-logic/).
DELETE_ANNOTATIONS = {"pulumi.com/deletionPropagationPolicy": "foreground"}


def replace_on_changes(spec: dict[str, Any]) -> list[str]:
    """The RayService's Pulumi replaceOnChanges: llm_pd_eks/rollout_rule.py decides (with `Recreate`,
    every change KubeRay would not apply to the running cluster; with `NewCluster`, none)."""
    return replace_on_change_paths(spec)


def disruption_budget_spec(role: str) -> k8s.policy.v1.PodDisruptionBudgetSpecArgs:
    """A node drain (managed node-group update, which honours PDBs) may evict a `role` pod only while
    another one keeps serving: the last prefill or decode pod stays until a human forces it."""
    return k8s.policy.v1.PodDisruptionBudgetSpecArgs(
        min_available=1,
        selector=k8s.meta.v1.LabelSelectorArgs(match_labels={APP_LABEL: RAY_SERVICE_NAME, ROLE_LABEL: role}),
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
    """Inputs of `LlmRayService`; the provider, operator, plugins and node groups come from the other components."""

    config: ServingConfig
    """The `serving` section: the model, the image, prefill and decode layout and autoscaling."""
    instance: GpuInstanceType
    """The GPU node type (gpuNodes.instanceType); every tensor-parallel size must divide its GPUs."""
    provider: k8s.Provider
    """The cluster's Kubernetes provider."""
    operator: pulumi.Resource
    """The KubeRay release: it installs the RayService CRD."""
    device_plugins: Sequence[pulumi.Resource]
    """The NVIDIA and EFA device plugins: pods cannot request GPUs or EFA devices before these."""
    node_groups: Sequence[pulumi.Resource]
    """The system (head) and GPU (workers) node groups."""
    node_group_names: Optional[RayNodeGroupNames] = None
    """Their EKS names: the head and workers select their own group by name (llm_pd_eks/gpu_cutover.py)."""
    gcs_store: Optional[GcsConnection] = None
    """The GCS store when serving.gcsFaultTolerance is on (llm_pd_eks/gcs_store.py)."""
    hf_token: Optional[pulumi.Input[str]] = None
    """Hugging Face token for gated models, kept a Pulumi secret (pulumi config set --secret hfToken)."""


def check_ray_service_args(args: RayServiceArgs) -> None:
    """`pulumi.InputPropertyError` naming the input the `serving` section alone cannot rule out."""
    for role, group in args.config.groups().items():
        problem = group.tensor_parallel_problem(args.instance.gpus, args.instance.name)
        if problem:
            raise pulumi.InputPropertyError(f"config.{role}.tensor_parallel_size", problem)
    if not args.device_plugins:
        raise pulumi.InputPropertyError("device_plugins", "empty; the worker pods request GPUs and EFA devices")


class LlmRayService(pulumi.ComponentResource):
    """Namespace, optional HF token Secret, the RayService (whose serveService is the OpenAI-compatible
    endpoint) and a PodDisruptionBudget per worker group."""

    namespace: k8s.core.v1.Namespace
    hf_secret: Optional[k8s.core.v1.Secret]
    ray_service: k8s.apiextensions.CustomResource
    disruption_budgets: dict[str, k8s.policy.v1.PodDisruptionBudget]
    head_budget: k8s.policy.v1.PodDisruptionBudget
    endpoint: pulumi.Output[Optional[str]]

    def __init__(self, name: str, args: RayServiceArgs, opts: pulumi.ResourceOptions | None = None):
        check_ray_service_args(args)
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
        gcs = gcs_fault_tolerance_options(name, args.gcs_store, namespace, k8s_opts) if args.gcs_store else None
        spec = protect_head(ray_service_spec(serving, args.instance, hf_secret_name, args.node_group_names), gcs)
        recreate = replace_on_changes(spec)
        self.ray_service = k8s.apiextensions.CustomResource(
            f"{name}-rayservice",
            api_version="ray.io/v1",
            kind="RayService",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=RAY_SERVICE_NAME,
                namespace=namespace,
                annotations={**wait_annotations(serving), **DELETE_ANNOTATIONS},
            ),
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                # No data flows from these, yet the CRD, the device plugins and the nodes must exist first.
                depends_on=[args.operator, *args.device_plugins, *args.node_groups],
                custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout),
                replace_on_changes=recreate or None,
                # The name is fixed, and the old cluster must free its GPU nodes for the new one.
                delete_before_replace=bool(recreate),
            ),
        )

        # One PodDisruptionBudget per worker group: a managed node-group update drains nodes through
        # the eviction API, which honours them (EKS fails the update rather than break one).
        self.disruption_budgets = {
            role: k8s.policy.v1.PodDisruptionBudget(
                f"{name}-{role}-pdb",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{RAY_SERVICE_NAME}-{role}", namespace=namespace),
                spec=disruption_budget_spec(role),
                opts=k8s_opts,
            )
            for role in ROLES
        }

        # and one for the head (llm_pd_eks/ray_head_protection.py)
        self.head_budget = head_disruption_budget(
            name, f"{RAY_SERVICE_NAME}-head", namespace, {APP_LABEL: RAY_SERVICE_NAME}, k8s_opts
        )
        self.endpoint = self._endpoint_url(name, serving, namespace, k8s_opts)
        self.register_outputs({"endpoint": self.endpoint, "modelId": serving.model_id})

    def _endpoint_url(
        self, name: str, serving: ServingConfig, namespace: pulumi.Output[str], opts: pulumi.ResourceOptions
    ) -> pulumi.Output[Optional[str]]:
        """The OpenAI base URL: the NLB's hostname when public, the in-cluster DNS name otherwise."""
        service_name = serving.endpoint_name
        if not serving.public_endpoint:
            return pulumi.Output.from_input(f"http://{service_name}.{NAMESPACE}.svc.cluster.local:{SERVE_PORT}/v1")

        # KubeRay creates the Service once a cluster is ready, i.e. by the time the RayService is
        # (its metadata flows into the id, so the read waits for it and is skipped while unknown).
        metadata: pulumi.Output[Any] = self.ray_service.metadata  # type: ignore[attr-defined]  # set dynamically
        service_id = pulumi.Output.all(namespace, metadata).apply(lambda parts: f"{parts[0]}/{service_name}")
        service = k8s.core.v1.Service.get(f"{name}-endpoint", service_id, opts=opts)

        def from_status(status: Any) -> Optional[str]:
            ingress = _field(_field(status, "load_balancer"), "ingress") or []
            host = (_field(ingress[0], "hostname") or _field(ingress[0], "ip")) if ingress else None
            return f"http://{host}:{SERVE_PORT}/v1" if host else None

        return service.status.apply(from_status)


def _field(obj: Any, key: str) -> Any:
    """A field of a typed output object or of a plain dict (mocks hand back either)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)
