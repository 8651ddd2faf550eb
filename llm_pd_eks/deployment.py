"""The whole deployment as one component, `LlmPdEks`: network -> cluster -> node groups -> core
add-ons -> device plugins and KubeRay -> the prefill/decode RayService -> observability.

Every decision lives in the other modules of `llm_pd_eks/`; this one says what feeds what. The
program (`__main__.py`) makes one `LlmPdEks` from the stack's config; `provider/` serves the same
class through Pulumi's Python component provider host, so another Pulumi program (TypeScript, Go,
YAML) can `pulumi package add` it. The host infers the package schema from the annotations and
docstrings below (pulumi/provider/experimental/analyzer.py in the pulumi SDK), which is why the
inputs are a `TypedDict` with a docstring after each field and this module does not use
`from __future__ import annotations` (the analyzer reads evaluated annotations).

The config sections are plain (known when the component is constructed): they decide which resources
exist. Each is validated by the stack file's strict model (`llm_pd_eks/config/`), every problem reported
together before anything registers; the host's schema types each from that model (component_schema.py).
"""

import json
from typing import Any, NotRequired, Optional, TypedDict

import pulumi
import pulumi_aws as aws

from llm_pd_eks.addons import CoreAddons, CoreAddonsArgs
from llm_pd_eks.admission_policy import GpuPodAdmission, admission_args
from llm_pd_eks.api_access import ApiAccess, ApiAccessArgs
from llm_pd_eks.autoscaler import (
    AutoscaledGroup,
    NodeAutoscaler,
    NodeAutoscalerArgs,
    autoscaler_tags,
    node_template_tags,
)
from llm_pd_eks.catalog import gpu_instance_type
from llm_pd_eks.cluster import Cluster, ClusterArgs
from llm_pd_eks.component_schema import whole_numbers
from llm_pd_eks.config import (
    ALERT_WEBHOOK_KEY,
    HF_TOKEN_KEY,
    PROJECT,
    ConfigError,
    StackConfig,
    stack_cluster_name,
    validate_stack_config,
)
from llm_pd_eks.device_plugins import DevicePlugins, DevicePluginsArgs
from llm_pd_eks.efa_gpu_nodes import EfaGpuNodeGroup, EfaGpuNodeGroupArgs, gpu_autoscaler_template
from llm_pd_eks.gcs_store import GcsStore, GcsStoreArgs
from llm_pd_eks.gpu_cutover import ray_node_group_names
from llm_pd_eks.kuberay import KubeRayOperator, KubeRayOperatorArgs
from llm_pd_eks.network import Network, NetworkArgs
from llm_pd_eks.observability import Observability, ObservabilityArgs
from llm_pd_eks.prices import load_prices
from llm_pd_eks.ray_service import LlmRayService, RayServiceArgs
from llm_pd_eks.storage import EBS_CSI_ADDON, EbsStorage, EbsStorageArgs
from llm_pd_eks.system_nodes import SystemNodeGroup, SystemNodeGroupArgs, system_autoscaler_template
from llm_pd_eks.versions import eks_addon_version

# The component's type token: `<package>:index:<class>`, as the provider host names it.
TYPE = f"{PROJECT}:index:LlmPdEks"
# The component package's version (provider/__main__.py serves it; `pulumi package add` records it).
PACKAGE_VERSION = "0.4.1"  # the release (pyproject.toml, policies/PulumiPolicy.yaml: one version, CHANGELOG.md)
# What the program names its one instance (the stack's top-level resource).
INSTANCE_NAME = PROJECT


class LlmPdEksArgs(TypedDict):
    """Inputs of `LlmPdEks`: the sections of a stack's config, plus the two secrets."""

    region: str
    """The AWS region (a stack's `aws:region`); every availability zone must belong to it."""
    network: dict[str, Any]
    """The VPC: CIDR, availability zones, subnets, NAT gateways (config section `network`)."""
    gpu_nodes: dict[str, Any]
    """The EFA GPU node group: one AZ, one cluster placement group (config section `gpuNodes`)."""
    cluster: NotRequired[dict[str, Any]]
    """The EKS control plane: Kubernetes version, endpoint access, admins (config section `cluster`)."""
    system_nodes: NotRequired[dict[str, Any]]
    """CPU nodes for system pods, the operators and the Ray head (config section `systemNodes`)."""
    protect: NotRequired[bool]
    """protect=True on the VPC and the cluster, so `pulumi destroy` must be a deliberate act."""
    serving_layer: NotRequired[bool]
    """false: network, cluster, system nodes and add-ons only (CPU, a review stack); no GPU nodes or serving."""
    device_plugins: NotRequired[dict[str, Any]]
    """Chart versions of the NVIDIA and EFA device plugins (config section `devicePlugins`)."""
    kuberay: NotRequired[dict[str, Any]]
    """The KubeRay operator chart (config section `kuberay`)."""
    serving: NotRequired[dict[str, Any]]
    """The model and its prefill/decode layout (config section `serving`); omitted: no RayService."""
    node_autoscaler: NotRequired[dict[str, Any]]
    """Cluster Autoscaler for both node groups (config section `nodeAutoscaler`)."""
    deploy: NotRequired[dict[str, Any]]
    """How `pulumi up` reaches the stack: the runner label (config section `deploy`)."""
    observability: NotRequired[dict[str, Any]]
    """Prometheus, Grafana, DCGM exporter, dashboards and alerts (config section `observability`)."""
    admission_policy: NotRequired[dict[str, Any]]
    """The in-cluster policy judging every GPU pod: audit, warn or deny (config section `admissionPolicy`)."""
    hf_token: NotRequired[pulumi.Input[str]]
    """Hugging Face token for gated models; pass it as a secret."""
    grafana_admin_password: NotRequired[pulumi.Input[str]]
    """Grafana's admin password, as a secret; omitted: the Grafana chart generates one."""
    alert_webhook_url: NotRequired[pulumi.Input[str]]
    """The alert webhook's URL (observability.alerting.receiver `webhook`), as a secret."""


# Args keys that are not config sections: the secrets.
SECRET_ARGS = ("hf_token", "grafana_admin_password", "alert_webhook_url")


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def config_from_args(args: "LlmPdEksArgs | dict[str, Any]") -> StackConfig:
    """`args` validated by the stack config model (raises ConfigError listing every problem).

    Keys are accepted in the Python spelling (`gpu_nodes`) and, as another language's program may
    still hold them, the schema's (`gpuNodes`). A whole-number double (`2.0`: every number on the
    provider protocol's wire is one) counts as the int where the model wants an int.
    """
    values: dict[str, Any] = {}
    secret_keys: list[str] = []
    region: Optional[str] = None
    for key, value in dict(args).items():
        if key == "region":
            region = value
        elif key in SECRET_ARGS or key in ("hfToken", "grafanaAdminPassword", "alertWebhookUrl"):
            continue
        else:
            values[_camel(key)] = value
    if args.get("hf_token") is not None or args.get("hfToken") is not None:
        values[HF_TOKEN_KEY] = "[secret]"  # its presence is what the gated-model check needs
        secret_keys.append(f"{PROJECT}:{HF_TOKEN_KEY}")
    if args.get("alert_webhook_url") is not None or args.get("alertWebhookUrl") is not None:
        values[ALERT_WEBHOOK_KEY] = "[secret]"  # its presence is what the webhook-receiver check needs
        secret_keys.append(f"{PROJECT}:{ALERT_WEBHOOK_KEY}")
    return validate_stack_config(whole_numbers(values), region, secret_keys)


def engine_values() -> dict[str, Any]:
    """The running stack's config in the engine's form (`project:key` -> text), as the program sees it."""
    from llm_pd_eks.pulumi_sdk import runtime_config

    merged: dict[str, Any] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    return merged


def stack_args(
    config_values: dict[str, Any],
    hf_token: Optional[pulumi.Input[str]] = None,
    grafana_admin_password: Optional[pulumi.Input[str]] = None,
    alert_webhook_url: Optional[pulumi.Input[str]] = None,
) -> LlmPdEksArgs:
    """A stack's config in the engine's form (`project:key` -> JSON text) as `LlmPdEks` inputs."""
    prefix = f"{PROJECT}:"
    by_camel = {_camel(k): k for k in LlmPdEksArgs.__annotations__}
    args: dict[str, Any] = {"region": config_values.get("aws:region")}
    for key, raw in config_values.items():
        if not key.startswith(prefix) or key[len(prefix) :] not in by_camel:
            continue
        name = by_camel[key[len(prefix) :]]
        if name in SECRET_ARGS:
            continue
        try:
            args[name] = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            args[name] = raw
    given = zip(SECRET_ARGS, (hf_token, grafana_admin_password, alert_webhook_url))
    args.update({key: value for key, value in given if value is not None})
    return args  # type: ignore[return-value]


def _names_aws(providers: Any) -> bool:
    """Whether `ResourceOptions.providers` (a list of providers or a package -> provider mapping) holds an aws one."""
    if isinstance(providers, dict):
        return "aws" in providers
    return any(getattr(p, "package", None) == "aws" for p in providers or [])


def _secret(value: Optional[pulumi.Input[str]]) -> Optional[pulumi.Output[str]]:
    """A secret input kept secret whatever the caller passed (a plain string from another language)."""
    return None if value is None else pulumi.Output.secret(value)


class LlmPdEks(pulumi.ComponentResource):
    """Prefill/decode-disaggregated LLM serving on Amazon EKS with EFA: VPC, EKS cluster, system and
    EFA GPU node groups, core add-ons, device plugins, KubeRay, the Ray Serve LLM RayService and
    observability."""

    vpc_id: pulumi.Output[str]
    """The VPC's id."""
    private_subnet_ids: pulumi.Output[list[str]]
    """The private subnets' ids, one per availability zone."""
    cluster_name: pulumi.Output[str]
    """The EKS cluster's name."""
    kubeconfig: pulumi.Output[Any]
    """A kubeconfig for the cluster (authenticates through `aws eks get-token`)."""
    kubeconfig_json: pulumi.Output[str]
    """The same kubeconfig as JSON text, a secret (what `kubectl --kubeconfig` and the Kubernetes provider read)."""
    gpu_availability_zone: pulumi.Output[str]
    """The availability zone of every GPU node."""
    gpu_instance_type: pulumi.Output[str]
    """The GPU nodes' EC2 instance type."""
    node_group_names: pulumi.Output[dict[str, str]]
    """The managed node groups' names: `system` and `gpu`."""
    endpoint: pulumi.Output[Optional[str]]
    """The OpenAI-compatible endpoint of the RayService; unset without `serving`."""
    model_id: pulumi.Output[Optional[str]]
    """The served model's Hugging Face id; unset without `serving`."""

    def __init__(self, name: str, args: LlmPdEksArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(TYPE, name, None, opts)
        try:
            config = config_from_args(args)
        except ConfigError as error:  # every problem at once, before any child registers
            raise ValueError(str(error)) from None
        # The sections were top-level resources before this component wrapped them: the alias keeps
        # each stack's existing resources (no replacement); children inherit it.
        child = pulumi.ResourceOptions(parent=self, aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)])
        regional = self._region_provider(config.region, opts)
        if regional is not None:
            child = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(providers=[regional]))
        self._build(config, args, child)

    def _region_provider(self, region: str, opts: Optional[pulumi.ResourceOptions]) -> Optional[aws.Provider]:
        """The AWS provider for `region` the children use, where the default one is not it.

        An `aws` provider passed in (`opts.provider` or `opts.providers`) reaches the children through
        the parent chain (Pulumi: a component's providers are inherited by its children), so none is
        made. Where the engine's `aws:region` is `region` (the program: `__main__.py` passes the stack's
        `aws:region`), the default provider is that region's, and existing stacks keep it. Otherwise
        (another program that only says `region`) a provider for `region`, a child of this component.
        """
        if opts is not None and (opts.provider is not None or _names_aws(opts.providers)):
            return None
        if pulumi.Config("aws").get("region") == region:
            return None
        return aws.Provider("aws", region=region, opts=pulumi.ResourceOptions(parent=self))

    def _build(self, config: StackConfig, args: LlmPdEksArgs, child: pulumi.ResourceOptions) -> None:
        stack = pulumi.get_stack()
        cluster_name = stack_cluster_name(stack)
        gpu_instance = gpu_instance_type(config.gpu_nodes.instance_type)
        tags = {"project": config.name, "stack": stack, "managed-by": "pulumi"}

        network = Network(
            "network",
            NetworkArgs(
                config=config.network,
                cluster_name=cluster_name,
                region=config.region,
                protect=config.protect,
                tags=tags,
            ),
            opts=child,
        )

        cluster = Cluster(
            "cluster",
            ClusterArgs(
                config=config.cluster,
                cluster_name=cluster_name,
                vpc_id=network.vpc.id,
                private_subnet_ids=network.private_subnet_ids,
                network_egress=network.egress,
                protect=config.protect,
                tags=tags,
            ),
            opts=child,
        )
        # Node groups take the cluster by name (known up front), so they wait for it explicitly, and for the
        # VPC CNI and the routes out (nodes pull images through them; destroy removes the nodes first).
        nodes_after = [cluster.eks, *cluster.node_policies, cluster.cni_policy, cluster.vpc_cni, *network.egress]
        # The first Kubernetes object proves `up` reaches the API before any GPU instance launches.
        api_access = ApiAccess(
            "api-access",
            ApiAccessArgs(
                config=config,
                cluster_security_group_id=cluster.security_group_id,
                provider=cluster.provider,
                depends_on=[cluster.eks],
                tags=tags,
            ),
            opts=child,
        )
        # What the node autoscaler must know of each group's future nodes (empty when it is not installed).
        system_template = system_autoscaler_template()
        gpu_template = gpu_autoscaler_template(config.gpu_nodes, gpu_instance)
        autoscaled = config.node_autoscaler.enabled

        system_nodes = SystemNodeGroup(
            "system-nodes",
            SystemNodeGroupArgs(
                config=config.system_nodes,
                cluster_name=cluster_name,
                kubernetes_version=config.cluster.kubernetes_version,
                node_role_arn=cluster.node_role.arn,
                subnet_ids=network.private_subnet_ids,
                depends_on=nodes_after,
                tags=tags,
                autoscaler_tags=autoscaler_tags(cluster_name, system_template) if autoscaled else {},
            ),
            opts=child,
        )

        addons = CoreAddons(
            "core-addons",
            CoreAddonsArgs(
                cluster_name=cluster_name,
                cluster=cluster.eks,
                system_nodes=system_nodes.node_group,
                vpc_cni=cluster.vpc_cni,
                kubernetes_version=config.cluster.kubernetes_version,
                tags=tags,
            ),
            opts=child,
        )
        if not config.serving_layer:  # a review stack: the CPU layers only
            self._outputs(
                config, network, cluster, cluster_name, {"system": system_nodes.node_group.node_group_name}, None
            )
            return

        gpu_nodes = EfaGpuNodeGroup(
            "gpu-nodes",
            EfaGpuNodeGroupArgs(
                config=config.gpu_nodes,
                instance=gpu_instance,
                cluster_name=cluster_name,
                kubernetes_version=config.cluster.kubernetes_version,
                node_role_arn=cluster.node_role.arn,
                vpc_id=network.vpc.id,
                private_subnet_ids={az: subnet.id for az, subnet in network.private_subnets.items()},
                cluster_security_group_id=cluster.security_group_id,
                depends_on=[*nodes_after, api_access.probe],
                tags=tags,
                autoscaler_tags=autoscaler_tags(cluster_name, gpu_template) if autoscaled else {},
            ),
            opts=child,
        )

        # Every GPU pod is judged by the API server from here on, long before a GPU node can run one.
        GpuPodAdmission("gpu-pod-admission", admission_args(config, cluster.provider, api_access.probe), opts=child)

        # Serving layer: device plugins on the GPU nodes, the KubeRay operator on the system nodes, then
        # the prefill/decode RayService once all of them (and both node groups) are ready.
        device_plugins = DevicePlugins(
            "device-plugins",
            DevicePluginsArgs(
                config=config.device_plugins,
                provider=cluster.provider,
                gpu_node_group=gpu_nodes.node_group,
                depends_on=[addons.addons["vpc-cni"]],
            ),
            opts=child,
        )

        kuberay = KubeRayOperator(
            "kuberay",
            KubeRayOperatorArgs(
                config=config.kuberay,
                provider=cluster.provider,
                depends_on=[system_nodes.node_group, *addons.addons.values()],
            ),
            opts=child,
        )

        if autoscaled:
            NodeAutoscaler(
                "node-autoscaler",
                NodeAutoscalerArgs(
                    config=config.node_autoscaler,
                    cluster_name=cluster_name,
                    region=config.region,
                    image_tag=config.autoscaler_image_tag(),
                    oidc_provider_arn=cluster.oidc_provider_arn,
                    oidc_issuer=cluster.oidc_issuer,
                    provider=cluster.provider,
                    groups=[
                        AutoscaledGroup("system", system_nodes.node_group, node_template_tags(system_template)),
                        AutoscaledGroup("gpu", gpu_nodes.node_group, node_template_tags(gpu_template)),
                    ],
                    depends_on=[system_nodes.node_group, addons.addons["vpc-cni"]],
                    tags=tags,
                ),
                opts=child,
            )

        endpoint: Optional[pulumi.Output[Any]] = None
        gcs_store = None  # the Ray head's GCS state outside the head (serving.gcsFaultTolerance)
        if config.serving is not None and config.serving.gcs_fault_tolerance:
            store = GcsStoreArgs(cluster_name, network.vpc.id, network.private_subnet_ids, cluster.security_group_id)
            gcs_store = GcsStore("ray-gcs-store", store, config.serving.gcs_store_node_type, tags, opts=child)
        if config.serving is not None:
            llm = LlmRayService(
                "llm",
                RayServiceArgs(
                    config=config.serving,
                    instance=gpu_instance,
                    provider=cluster.provider,
                    operator=kuberay.release,
                    device_plugins=[device_plugins.nvidia, device_plugins.efa],
                    node_groups=[system_nodes.node_group, gpu_nodes.node_group],
                    node_group_names=ray_node_group_names(gpu_nodes.node_group),
                    hf_token=_secret(args.get("hf_token")),
                    gcs_store=gcs_store.connection if gcs_store else None,
                    region=config.region,
                    oidc_provider_arn=cluster.oidc_provider_arn,
                    oidc_issuer=cluster.oidc_issuer,
                    tags=tags,
                ),
                opts=child,
            )
            endpoint = llm.endpoint

        # Volumes that survive a reschedule: the EBS CSI driver (own IRSA role) and the gp3 class, in the
        # system nodes' AZs (they span every private subnet).
        storage = EbsStorage(
            "storage",
            EbsStorageArgs(
                cluster_name=cluster_name,
                cluster=cluster.eks,
                oidc_provider_arn=cluster.oidc_provider_arn,
                oidc_issuer=cluster.oidc_issuer,
                provider=cluster.provider,
                zones=list(config.network.availability_zones),
                system_nodes=system_nodes.node_group,
                addon_version=eks_addon_version(config.cluster.kubernetes_version, EBS_CSI_ADDON),
                tags=tags,
            ),
            opts=child,
        )

        # Observability: Prometheus, Grafana, the DCGM exporter, the Ray scrape config, alerts and dashboards.
        if config.observability.enabled:
            listed = load_prices().regions.get(config.region, {}).get("instances", {})
            node_types = (config.system_nodes.instance_type, config.gpu_nodes.instance_type)
            Observability(
                "observability",
                ObservabilityArgs(
                    config=config.observability,
                    instance=gpu_instance,
                    provider=cluster.provider,
                    hourly_prices={t: listed[t] for t in node_types if t in listed},
                    gpu_node_group=gpu_nodes.node_group,
                    depends_on=[system_nodes.node_group, *addons.addons.values()],
                    grafana_admin_password=_secret(args.get("grafana_admin_password")),
                    region=config.region,
                    oidc_provider_arn=cluster.oidc_provider_arn,
                    oidc_issuer=cluster.oidc_issuer,
                    alert_webhook_url=_secret(args.get("alert_webhook_url")),
                    storage_class=storage.storage_class,
                    tags=tags,
                    **({"phases": tuple(config.serving.groups())} if config.serving else {}),
                ),
                opts=child,
            )

        self._outputs(
            config,
            network,
            cluster,
            cluster_name,
            {"system": system_nodes.node_group.node_group_name, "gpu": gpu_nodes.node_group.node_group_name},
            endpoint,
        )

    def _outputs(
        self,
        config: StackConfig,
        network: Network,
        cluster: Cluster,
        cluster_name: str,
        node_group_names: dict[str, pulumi.Output[str]],
        endpoint: Optional[pulumi.Output[Any]],
    ) -> None:
        self.vpc_id = network.vpc.id
        self.private_subnet_ids = pulumi.Output.all(*network.private_subnet_ids)
        self.cluster_name = pulumi.Output.from_input(cluster_name)
        self.kubeconfig = cluster.kubeconfig
        self.kubeconfig_json = cluster.kubeconfig  # already a secret
        self.gpu_availability_zone = pulumi.Output.from_input(config.gpu_nodes.availability_zone)
        self.gpu_instance_type = pulumi.Output.from_input(config.gpu_nodes.instance_type)
        self.node_group_names = pulumi.Output.all(**node_group_names)
        self.endpoint = endpoint  # type: ignore[assignment]
        self.model_id = pulumi.Output.from_input(config.serving.model_id) if config.serving else None  # type: ignore[assignment]
        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "privateSubnetIds": self.private_subnet_ids,
                "clusterName": self.cluster_name,
                "kubeconfig": self.kubeconfig,
                "kubeconfigJson": self.kubeconfig_json,
                "gpuAvailabilityZone": self.gpu_availability_zone,
                "gpuInstanceType": self.gpu_instance_type,
                "nodeGroupNames": self.node_group_names,
                **({"endpoint": self.endpoint, "modelId": self.model_id} if config.serving else {}),
            }
        )
