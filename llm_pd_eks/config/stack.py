"""`StackConfig`: every section together, and the checks that span sections (the GPU type against the
model and the charts, the AZs against the region, a gated model against its token)."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from ..catalog import CLUSTER_AUTOSCALER_TAGS, GPU_INSTANCE_TYPES, chart_version_key
from ..models import MODELS
from ..ray_resources import accelerator_resource_name, custom_resource_problem, role_resource
from .autoscaler import NodeAutoscalerConfig
from .base import PROJECT, REGION_NAME, Strict, clip, in_region, shown
from .cluster import ClusterConfig
from .deploy import DeployConfig
from .gpu_nodes import GpuNodesConfig
from .network import NetworkConfig
from .observability import ObservabilityConfig
from .serving import GPU_MEMORY_BUDGET, DevicePluginsConfig, KubeRayConfig, ServingConfig
from .system_nodes import SystemNodesConfig


class StackConfig(Strict):
    """Everything a stack may set. Defaults here; per-stack overrides in Pulumi.<stack>.yaml."""

    region: str = Field(description="The AWS region (set as `aws:region`); every AZ must belong to it.")
    network: NetworkConfig = Field(description="The VPC: CIDR, availability zones, subnets, NAT gateways.")
    cluster: ClusterConfig = Field(default=ClusterConfig(), description="The EKS control plane.")
    system_nodes: SystemNodesConfig = Field(
        default=SystemNodesConfig(),
        description="CPU nodes (label role=system) for system pods, the operators and the Ray head.",
    )
    gpu_nodes: GpuNodesConfig = Field(
        description="The EFA GPU node group: one AZ; placement as its capacity needs (gpuNodes.capacity)."
    )
    protect: bool = Field(
        default=False,
        description="protect=True on the VPC and the cluster, so `pulumi destroy` must be a deliberate act.",
    )
    serving_layer: bool = Field(
        default=True,
        description="false: network, cluster, system nodes and add-ons only (CPU; a review stack): no GPU node "
        "group, device plugins, KubeRay, RayService or observability; `serving` must then be omitted.",
    )
    device_plugins: DevicePluginsConfig = Field(
        default=DevicePluginsConfig(),
        description="Chart versions of the NVIDIA and EFA device plugins.",
    )
    kuberay: KubeRayConfig = Field(default=KubeRayConfig(), description="The KubeRay operator chart.")
    serving: Optional[ServingConfig] = Field(
        default=None,
        description="The model and its prefill/decode layout; omitted: no RayService is deployed.",
    )
    node_autoscaler: NodeAutoscalerConfig = Field(
        default_factory=NodeAutoscalerConfig, description="Cluster Autoscaler for both node groups"
    )
    deploy: DeployConfig = Field(default_factory=DeployConfig, description="how `pulumi up` reaches this stack")
    observability: ObservabilityConfig = Field(
        default_factory=ObservabilityConfig, description="Prometheus, Grafana, DCGM exporter, dashboards and alerts."
    )

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not REGION_NAME.fullmatch(value):
            raise ValueError(f"{shown(value)} is not an AWS region name such as 'us-west-2'")
        return value

    @model_validator(mode="after")
    def _cross_section(self) -> "StackConfig":
        """Checks that span sections, all run so every problem is reported together (one a line)."""
        problems = [*self._serving_fit_problems(), *self._version_problems(), *self._rollout_problems()]
        if problems:
            raise ValueError("\n".join(problems))  # one problem a line: reported separately
        return self

    @model_validator(mode="after")
    def _serving_layer_off(self) -> "StackConfig":
        """No serving without the serving layer (a review stack has no GPU nodes to serve on)."""
        if not self.serving_layer and self.serving is not None:
            raise ValueError("servingLayer: false, but `serving` is set; omit `serving` (no GPU nodes to serve on)")
        return self

    def _serving_fit_problems(self) -> list[str]:
        """Tensor parallelism against the GPU node and its memory; node counts against gpuNodes.maxSize."""
        if self.serving is None:
            return []
        serving, instance = self.serving, GPU_INSTANCE_TYPES[self.gpu_nodes.instance_type]
        model = MODELS[serving.model_id]
        problems = []
        groups = serving.groups()
        # The custom Ray resources the worker groups advertise must reach the raylet through KubeRay.
        for role in groups:
            for name in (role_resource(role), accelerator_resource_name(instance.ray_accelerator_type)):
                problem = custom_resource_problem(name)
                if problem:
                    problems.append(f"serving.{role}: {problem}")
        for role, group in groups.items():
            key = f"serving.{role}.tensorParallelSize"
            tp = group.tensor_parallel_size
            tp_problem = group.tensor_parallel_problem(instance.gpus, instance.name)
            if tp_problem:
                problems.append(f"{key}: {tp_problem}")
                continue
            per_gpu = model.weights_gib_bf16 / tp
            budget = instance.gpu_memory_gib * GPU_MEMORY_BUDGET
            if per_gpu > budget:
                problems.append(
                    f"{key}: {serving.model_id} needs {model.weights_gib_bf16:g} GiB of bf16 weights, "
                    f"{per_gpu:.1f} GiB per GPU at TP {tp}, more than the {budget:.1f} GiB vLLM budgets on a "
                    f"{instance.gpu_memory_gib} GiB {instance.gpu_model}; raise tensorParallelSize or pick a larger GPU"
                )
        if not problems:
            # Each Ray worker pod takes a whole node (all its EFA devices), and prefill and decode
            # never share a node, so their node counts add up.
            needed = {role: g.nodes(g.max_replicas, instance.gpus) for role, g in groups.items()}
            if sum(needed.values()) > self.gpu_nodes.max_size:
                keys = "/".join(f"serving.{role}.maxReplicas" for role in needed)
                counts = " + ".join(f"{n} {role}" for role, n in needed.items())
                problems.append(
                    f"{keys}: {counts} node(s) of {instance.name} exceed gpuNodes.maxSize "
                    f"({self.gpu_nodes.max_size}); each role's replicas need nodes of their own"
                )
        return problems

    def _version_problems(self) -> list[str]:
        """Chart and image versions the GPU type and the Kubernetes minor need (facts in the catalog)."""
        problems = []
        instance = GPU_INSTANCE_TYPES[self.gpu_nodes.instance_type]
        efa = self.device_plugins.efa_chart_version
        if chart_version_key(efa) < chart_version_key(instance.min_efa_chart_version):
            problems.append(
                f"devicePlugins.efaChartVersion: {efa} does not list {instance.name} in its node affinity "
                f"(first chart that does: {instance.min_efa_chart_version}); the EFA device plugin would never "
                f"run on the GPU nodes"
            )
        autoscaler, minor = self.node_autoscaler, self.cluster.kubernetes_version
        if autoscaler.enabled:
            if autoscaler.image_tag is None and minor not in CLUSTER_AUTOSCALER_TAGS:
                problems.append(
                    f"nodeAutoscaler.imageTag: no Cluster Autoscaler image known for Kubernetes {minor} "
                    f"(known: {', '.join(CLUSTER_AUTOSCALER_TAGS)}); set imageTag to a v{minor}.x release"
                )
            elif autoscaler.image_tag is not None and not autoscaler.image_tag.startswith(f"v{minor}."):
                problems.append(
                    f"nodeAutoscaler.imageTag: {autoscaler.image_tag} is not a {minor} release; Cluster Autoscaler "
                    f"supports only the Kubernetes minor it was built for"
                )
        return problems

    def _rollout_problems(self) -> list[str]:
        """The fabric the serving layer needs, and room for the upgrade strategy's second cluster."""
        if self.serving is None:
            return []
        instance = GPU_INSTANCE_TYPES[self.gpu_nodes.instance_type]
        problems = []
        # The RayService moves the KV cache with NIXL over LIBFABRIC, which requires GPUDirect RDMA;
        # without it the transfer cannot start (see the catalog's efa_rdma_read). Aggregated serving
        # moves no KV cache between nodes.
        if not instance.efa_rdma_read and not self.serving.aggregated_mode:
            capable = sorted(t.name for t in GPU_INSTANCE_TYPES.values() if t.efa_rdma_read)
            problems.append(
                f"gpuNodes.instanceType: {instance.name} has no GPUDirect RDMA over EFA (no RDMA read), and the "
                f"serving layer moves the KV cache with NIXL over LIBFABRIC, which requires it; choose one of "
                f"{', '.join(capable)}"
            )
        # KubeRay's NewCluster upgrade starts a second RayCluster (its worker groups at `replicas`,
        # i.e. at their minimum) while the old one still serves, possibly at its maximum.
        groups = self.serving.groups().values()
        # (a TP size that does not divide the node is reported above)
        divisible = all(g.tensor_parallel_problem(instance.gpus, instance.name) is None for g in groups)
        if self.serving.upgrade_strategy == "NewCluster" and divisible:
            old = sum(g.nodes(g.max_replicas, instance.gpus) for g in groups)
            new = sum(g.nodes(g.min_replicas, instance.gpus) for g in groups)
            if old + new > self.gpu_nodes.max_size:
                problems.append(
                    f"serving.upgradeStrategy: NewCluster needs {old} GPU node(s) for the serving cluster at its "
                    f"maximum plus {new} for the new cluster, {old + new} in all, more than gpuNodes.maxSize "
                    f"({self.gpu_nodes.max_size}); raise maxSize or use Recreate"
                )
        return problems

    def autoscaler_image_tag(self) -> str:
        """The Cluster Autoscaler image tag for this stack (validated above)."""
        return self.node_autoscaler.image_tag or CLUSTER_AUTOSCALER_TAGS[self.cluster.kubernetes_version]

    @property
    def name(self) -> str:
        return PROJECT


def placement_problems(data: dict[str, Any]) -> list[str]:
    """Cross-section checks: AZs outside the region, a GPU AZ the network does not cover.

    Run on the raw values so they are reported even when another part of a section is invalid.
    """
    region, network, gpu = data.get("region"), data.get("network"), data.get("gpuNodes")
    azs = network.get("availabilityZones") if isinstance(network, dict) else None
    if not isinstance(azs, list) or not all(isinstance(a, str) for a in azs):
        return []
    problems = [
        f"{PROJECT}:network.availabilityZones: {shown(az)} is not an AZ of region {region}"
        for az in azs
        if region and not in_region(az, region)
    ]
    gpu_az = gpu.get("availabilityZone") if isinstance(gpu, dict) else None
    if isinstance(gpu_az, str) and gpu_az not in azs:
        problems.append(
            f"{PROJECT}:gpuNodes.availabilityZone: {shown(gpu_az)} is not one of the network's availability zones "
            f"({clip(', '.join(azs))})"
        )
    return problems


# Keys read only as Pulumi secrets (pulumi.Config().get_secret), never part of the model.
SECRET_ONLY_KEYS = ("hfToken", "grafanaAdminPassword", "alertWebhookUrl")
# What each secret-only key is for (the README's config table lists them with the model's keys).
SECRET_ONLY_KEY_DESCRIPTIONS = {
    "hfToken": "Hugging Face token for gated models, set only with `pulumi config set --secret hfToken`; "
    "plain text is refused.",
    "grafanaAdminPassword": "Grafana's admin password, set only with "
    "`pulumi config set --secret grafanaAdminPassword`; omitted: the Grafana chart generates one.",
    "alertWebhookUrl": "The alert webhook's URL (observability.alerting.receiver webhook), set only with "
    "`pulumi config set --secret alertWebhookUrl`.",
}
ALERT_WEBHOOK_KEY = "alertWebhookUrl"

HF_TOKEN_KEY = "hfToken"


def gated_model_problems(config: StackConfig, has_hf_token: bool) -> list[str]:
    """A gated model without a token would deploy, then fail every download with 401 until
    `pulumi up` times out (serving.readyTimeoutMinutes); refuse it before anything registers."""
    if config.serving is None or has_hf_token or not MODELS[config.serving.model_id].gated:
        return []
    return [
        f"{PROJECT}:{HF_TOKEN_KEY}: not set, but serving.modelId {config.serving.model_id} is gated on Hugging Face "
        f"(downloads without a token get 401); set it with `pulumi config set --secret {HF_TOKEN_KEY} hf_...`"
    ]
