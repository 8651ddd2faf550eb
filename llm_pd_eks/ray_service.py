"""The prefill/decode RayService: Ray Serve LLM's `build_pd_openai_app` on KubeRay, KV cache over EFA.

Every number comes from the stack config and the GPU catalog. The pieces live beside this module:
the head group (llm_pd_eks/ray_head_pod.py), the prefill and decode worker groups
(llm_pd_eks/ray_worker_pod.py), the Serve application (llm_pd_eks/serve_app.py) and the endpoint
Service (llm_pd_eks/serve_endpoint.py); this module assembles the RayService and its Pulumi resource.
- Roll-outs: `serving.upgradeStrategy` (see `UPGRADE_STRATEGIES`); PodDisruptionBudgets keep a
  node-group update from draining the last prefill or decode pod.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from .catalog import GpuInstanceType
from .config.serving import ServingConfig
from .gcs_store import GcsConnection, gcs_fault_tolerance_options
from .gpu_cutover import RayNodeGroupNames
from .ray_head_pod import head_group
from .ray_head_protection import head_disruption_budget, protect_head
from .ray_worker_pod import worker_group
from .rollout_rule import replace_on_change_paths
from .serve_app import serve_config_yaml
from .serve_endpoint import endpoint_url, serve_service
from .serve_routing import runtime_configmap_data, runtime_configmap_name, runtime_needed, with_runtime_module
from .serving_names import (
    APP_LABEL,
    HF_SECRET_KEY,
    HF_SECRET_NAME,
    NAMESPACE,
    RAY_SERVICE_NAME,
    RAY_VERSION,
    ROLE_LABEL,
)
from .weights_access import worker_service_account

# serving.upgradeStrategy -> KubeRay 1.7 spec.upgradeStrategy.type (rayservice_types.go:
# NewCluster | NewClusterWithIncrementalUpgrade | None). `Recreate` is KubeRay's `None` plus a Pulumi
# replacement of the RayService whenever its Ray cluster changes (see LlmRayService).
UPGRADE_STRATEGIES = {"Recreate": "None", "NewCluster": "NewCluster"}


def ray_service_spec(
    serving: ServingConfig,
    instance: GpuInstanceType,
    hf_secret_name: Optional[pulumi.Input[str]] = None,
    node_groups: Optional[RayNodeGroupNames] = None,
    region: Optional[str] = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "upgradeStrategy": {"type": UPGRADE_STRATEGIES[serving.upgrade_strategy]},
        "serveService": serve_service(serving),
        "serveConfigV2": serve_config_yaml(serving, instance),
        "rayClusterConfig": {
            "rayVersion": RAY_VERSION,
            "enableInTreeAutoscaling": True,  # worker pods follow Serve's replica autoscaling
            "headGroupSpec": head_group(serving.image, node_groups.head if node_groups else None),
            "workerGroupSpecs": [
                worker_group(
                    serving,
                    role,
                    instance,
                    hf_secret_name,
                    node_group=node_groups.workers if node_groups else None,
                    region=region,
                )
                for role in serving.groups()
            ],
        },
    }
    if runtime_needed(serving):  # the decode-only server class and the router, on every Ray pod (serve_routing.py)
        cluster = spec["rayClusterConfig"]
        for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
            with_runtime_module(group)
    return spec


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
    every change KubeRay would not apply to the running cluster; with either, `spec.serveService`,
    whose changes KubeRay does not carry to the live Service)."""
    return replace_on_change_paths(spec)


def disruption_budget_spec(role: str) -> k8s.policy.v1.PodDisruptionBudgetSpecArgs:
    """A node drain (managed node-group update, which honours PDBs) may evict a `role` pod only while
    another one keeps serving: the last prefill or decode pod stays until a human forces it."""
    return k8s.policy.v1.PodDisruptionBudgetSpecArgs(
        min_available=1,
        selector=k8s.meta.v1.LabelSelectorArgs(match_labels={APP_LABEL: RAY_SERVICE_NAME, ROLE_LABEL: role}),
    )


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
    region: Optional[str] = None
    """The stack's AWS region; required with serving.weightsS3Uri (the workers' S3 region, the role's partition)."""
    oidc_provider_arn: Optional[pulumi.Input[str]] = None
    """The cluster's IAM OIDC provider; required with serving.weightsS3Uri (the workers' IRSA role trusts it)."""
    oidc_issuer: Optional[pulumi.Input[str]] = None
    """The OIDC issuer without `https://`; required with serving.weightsS3Uri."""
    tags: Optional[dict[str, str]] = None
    """Tags for the AWS resources made here (the workers' IAM role)."""


def check_ray_service_args(args: RayServiceArgs) -> None:
    """`pulumi.InputPropertyError` naming the input the `serving` section alone cannot rule out."""
    for role, group in args.config.groups().items():
        problem = group.tensor_parallel_problem(args.instance.gpus, args.instance.name)
        if problem:
            raise pulumi.InputPropertyError(f"config.{role}.tensor_parallel_size", problem)
    if not args.device_plugins:
        raise pulumi.InputPropertyError("device_plugins", "empty; the worker pods request GPUs and EFA devices")
    if args.config.weights_s3_uri is not None:
        for key in ("region", "oidc_provider_arn", "oidc_issuer"):
            if getattr(args, key) is None:
                raise pulumi.InputPropertyError(key, "required with serving.weightsS3Uri (the workers' IRSA role)")


class LlmRayService(pulumi.ComponentResource):
    """Namespace, optional HF token Secret, the workers' S3 weights access (serving.weightsS3Uri), the
    RayService (whose serveService is the OpenAI-compatible endpoint) and a PodDisruptionBudget per
    worker group."""

    namespace: k8s.core.v1.Namespace
    hf_secret: Optional[k8s.core.v1.Secret]
    worker_service_account: Optional[k8s.core.v1.ServiceAccount]
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

        # The runtime modules: a ConfigMap named by their hash and immutable (serve_routing.py). A new
        # module changes the name, which pulumi-kubernetes applies as a replacement, create before
        # delete (Pulumi's default): the new ConfigMap is made first, the RayService that depends on
        # it is updated next (and `up` waits there for KubeRay's switch, `wait_annotations`), and the
        # old ConfigMap is deleted last, after that update succeeded. A failed or timed-out update
        # keeps the old one (Pulumi retries the pending delete on the next successful `up`).
        self.runtime_module = None
        if runtime_needed(serving):
            self.runtime_module = k8s.core.v1.ConfigMap(
                f"{name}-runtime",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=runtime_configmap_name(), namespace=namespace),
                data=runtime_configmap_data(),
                immutable=True,
                opts=k8s_opts,
            )

        self.worker_service_account = None
        if serving.weights_s3_uri is not None:
            assert args.region and args.oidc_provider_arn is not None and args.oidc_issuer is not None
            self.worker_service_account = worker_service_account(
                name,
                serving,
                args.region,
                args.oidc_provider_arn,
                args.oidc_issuer,
                namespace,
                args.tags,
                self,
                args.provider,
            )

        timeout = f"{serving.ready_timeout_minutes}m"
        gcs = gcs_fault_tolerance_options(name, args.gcs_store, namespace, k8s_opts) if args.gcs_store else None
        spec = protect_head(
            ray_service_spec(serving, args.instance, hf_secret_name, args.node_group_names, args.region), gcs
        )
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
                depends_on=[
                    args.operator,
                    *args.device_plugins,
                    *args.node_groups,
                    *([self.runtime_module] if self.runtime_module else []),
                    *([self.worker_service_account] if self.worker_service_account else []),
                ],
                custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout),
                replace_on_changes=recreate or None,
                # The names (RayService, endpoint Service) are fixed, and the old cluster must free its
                # GPU nodes for the new one.
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
            for role in serving.groups()
        }

        # and one for the head (llm_pd_eks/ray_head_protection.py)
        self.head_budget = head_disruption_budget(
            name, f"{RAY_SERVICE_NAME}-head", namespace, {APP_LABEL: RAY_SERVICE_NAME}, k8s_opts
        )
        self.endpoint = endpoint_url(name, serving, namespace, self.ray_service, k8s_opts)
        self.register_outputs({"endpoint": self.endpoint, "modelId": serving.model_id})
