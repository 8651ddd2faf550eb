"""The RayService's worker groups, `prefill` and `decode`: one Ray worker pod per GPU node.

- A worker pod takes a whole GPU node: all its GPUs and all its EFA devices (a replica's KV transfer
  needs every EFA interface of the node, and the devices cannot be shared between pods), holding
  `gpus / tensorParallelSize` Serve replicas. Pod counts follow the Serve autoscaling bounds, so the
  Ray autoscaler adds nodes' worth of pods as Serve adds replicas.
- Prefill and decode never share a node: each group advertises its own custom Ray resource
  (`prefill_slot` / `decode_slot`, one per GPU) that only that role's LLM config asks for in its
  placement bundles (llm_pd_eks/serve_app.py), and the pods carry a required anti-affinity against
  the other role. The name must survive KubeRay's operator, which turns any group resource ending in
  `gpu` (any case) into `--num-gpus` and drops it from `--resources` (llm_pd_eks/ray_resources.py).
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
  (`RAYLLM_ENGINE_START_TIMEOUT_S`) is never below Ray Serve LLM's default (llm_pd_eks/engine_start.py).
- Where a pod holds more than one replica, a small container beside the Ray container holds the ports
  vLLM's engines would otherwise race for when several start together (llm_pd_eks/engine_ports.py).
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi

from . import engine_ports
from .catalog import GpuInstanceType
from .config.serving import ServingConfig
from .efa_gpu_nodes import GPU_LABELS, GPU_TOLERATION
from .engine_start import ENGINE_START_TIMEOUT_ENV, engine_start_timeout_s
from .gpu_cutover import node_group_selector
from .ray_resources import accelerator_resource_name, custom_resource_problem, role_resource
from .serve_limits import ROUTER_TIMEOUT_ENV, pre_stop_command, request_timeout_s, worker_grace_s
from .serving_names import (
    APP_LABEL,
    HF_SECRET_KEY,
    RAY_SERVICE_NAME,
    ROLE_LABEL,
    ROLES,
    WORKER_SERVICE_ACCOUNT,
    other_role,
)

# libfabric's EFA provider: what NIXL's LIBFABRIC backend runs on. FI_EFA_USE_DEVICE_RDMA=1 is
# added only where the device has RDMA read (libfabric aborts when it is forced on a device without).
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1"}
EFA_RDMA_ENV = {"FI_EFA_USE_DEVICE_RDMA": "1"}
# The weights cache: a node directory on the instance-store RAID0 (nodeadm mounts /var/lib/kubelet there).
WEIGHTS_CACHE_HOST_PATH = "/var/lib/kubelet/llm-pd-eks/hf-cache"
WEIGHTS_CACHE_MOUNT = "/mnt/hf-cache"
HF_ENV = {"HF_HOME": WEIGHTS_CACHE_MOUNT, "HF_XET_HIGH_PERFORMANCE": "1"}
# CPUs left to the kubelet and the node's DaemonSets (CNI, kube-proxy, device plugins).
NODE_CPU_RESERVE = 2
# Stopping a worker: the kubelet runs the preStop hook, then SIGTERMs the container, and SIGKILLs it
# once terminationGracePeriodSeconds (counted from the start of the hook) are up. The hook drains the
# node through the GCS before `ray stop` (llm_pd_eks/serve_limits.py says how, and how long); the AWS
# Ray LLM DLC's own KubeRay test (aws/deep-learning-containers test/ray-llm/eks-multi-node/rayservice.yml)
# runs `ray stop` alone, which SIGTERMs the raylet with the replicas and cuts their streams.
# Share of the instance's RAM a worker pod requests (and is limited to): the rest holds the kernel,
# the kubelet's reservations, the node's pre-allocated huge pages and the DaemonSets.
WORKER_MEMORY_SHARE = 0.85


def accelerator_resource(instance: GpuInstanceType) -> str:
    """`accelerator_type:<T>`: what a raylet on this GPU reports and Ray Serve LLM's bundles ask for."""
    return accelerator_resource_name(instance.ray_accelerator_type)


def worker_memory_gib(instance: GpuInstanceType) -> int:
    return int(instance.memory_gib * WORKER_MEMORY_SHARE)


def worker_group(
    serving: ServingConfig,
    role: str,
    instance: GpuInstanceType,
    hf_secret_name: Optional[pulumi.Input[str]] = None,
    node_group: Optional[pulumi.Input[str]] = None,
    region: Optional[str] = None,
) -> dict[str, Any]:
    """A worker group whose every pod fills one GPU node (all GPUs, all EFA devices).

    With `serving.weightsS3Uri` the pods run as the service account whose IRSA role reads it
    (llm_pd_eks/weights_access.py), and boto3 is told the stack's region (`AWS_REGION`), so it
    asks the regional S3 endpoint, the one the VPC's S3 gateway endpoint serves."""
    group = serving.groups()[role]
    min_pods = group.nodes(group.min_replicas, instance.gpus)
    max_pods = group.nodes(group.max_replicas, instance.gpus)
    plain_env = {
        **EFA_ENV,
        **(EFA_RDMA_ENV if instance.efa_rdma_read else {}),
        **HF_ENV,
        ENGINE_START_TIMEOUT_ENV: str(engine_start_timeout_s(serving.model_id, serving.engine_start_timeout_s)),
        ROUTER_TIMEOUT_ENV: str(request_timeout_s(serving)),  # the ingress's own limit, as Serve's (serve_limits.py)
    }
    pod_extra: dict[str, Any] = {}
    if serving.weights_s3_uri is not None:
        if not region:
            raise ValueError(f"worker group {role}: weightsS3Uri is set but no region was given")
        plain_env["AWS_REGION"] = region
        pod_extra["serviceAccountName"] = WORKER_SERVICE_ACCOUNT
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plain_env.items()]
    # vLLM binds its side channel (NIXL handshake) to this address: the pod's, not a guess.
    env.append({"name": "VLLM_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    cpu = str(instance.vcpus - NODE_CPU_RESERVE)
    memory = f"{worker_memory_gib(instance)}Gi"
    hugepages = f"{instance.efa_hugepages_2mi_mib}Mi"
    if hf_secret_name is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": hf_secret_name, "key": HF_SECRET_KEY}}})
    resources = {role_resource(role): str(instance.gpus), accelerator_resource(instance): "1"}
    problems = [p for p in map(custom_resource_problem, resources) if p]
    if problems:
        raise ValueError(f"worker group {role}: " + "; ".join(problems))
    beside = (
        [engine_ports.container(serving.image)] if engine_ports.needed(group.replicas_per_node(instance.gpus)) else []
    )
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
                "terminationGracePeriodSeconds": worker_grace_s(serving),
                **pod_extra,
                **_apart_from_the_other_role(role),
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": serving.image,
                        # Extended resources: limits only (requests default to them). Huge pages
                        # must be requested equal to their limit. CPU and memory requests equal
                        # their limits, as do those of the init container KubeRay adds
                        # (`wait-gcs-ready`, v1.7.0 pod.go): the pod is Guaranteed, the last the
                        # kubelet evicts under node pressure (Kubernetes docs, Pod Quality of Service
                        # Classes), and it has the whole node anyway.
                        "resources": {
                            "requests": {
                                "cpu": cpu,
                                "memory": memory,
                                "hugepages-2Mi": hugepages,
                            },
                            "limits": {
                                "nvidia.com/gpu": str(instance.gpus),
                                "vpc.amazonaws.com/efa": str(instance.efa_interfaces),
                                "cpu": cpu,
                                "memory": memory,
                                "hugepages-2Mi": hugepages,
                            },
                        },
                        # libfabric pins (mlocks) the memory it registers with the EFA device.
                        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                        "lifecycle": {"preStop": {"exec": {"command": pre_stop_command(serving)}}},
                        "env": env,
                        "volumeMounts": [
                            {"name": "dshm", "mountPath": "/dev/shm"},
                            {"name": "hf-cache", "mountPath": WEIGHTS_CACHE_MOUNT},
                        ],
                    },
                    *beside,
                ],
                "volumes": [
                    # NCCL and the Ray object store need more shared memory than the runtime's 64 MiB.
                    {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                    {"name": "hf-cache", "hostPath": {"path": WEIGHTS_CACHE_HOST_PATH, "type": "DirectoryOrCreate"}},
                ],
            },
        },
    }


def _apart_from_the_other_role(role: str) -> dict[str, Any]:
    """Prefill and decode pods never share a node (a required anti-affinity against the other role);
    the aggregated group has no other role."""
    if role not in ROLES:
        return {}
    return {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": [other_role(role)]}]
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    }
