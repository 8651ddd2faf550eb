"""Wiring only: stack config -> network -> cluster -> node groups -> core add-ons -> device plugins
and KubeRay -> the prefill/decode RayService.

Every decision lives in `components/`; this file says what feeds what.
"""

import pulumi

from components.addons import CoreAddons, CoreAddonsArgs
from components.autoscaler import (
    AutoscaledGroup,
    NodeAutoscaler,
    NodeAutoscalerArgs,
    autoscaler_tags,
    node_template_tags,
)
from components.catalog import gpu_instance_type
from components.cluster import Cluster, ClusterArgs
from components.config import ConfigError, load_stack_config, stack_cluster_name
from components.device_plugins import DevicePlugins, DevicePluginsArgs
from components.efa_gpu_nodes import EfaGpuNodeGroup, EfaGpuNodeGroupArgs, gpu_autoscaler_template
from components.kuberay import KubeRayOperator, KubeRayOperatorArgs
from components.network import Network, NetworkArgs
from components.observability import Observability, ObservabilityArgs
from components.prices import load_prices
from components.ray_service import LlmRayService, RayServiceArgs
from components.storage import EbsStorage, EbsStorageArgs
from components.system_nodes import SystemNodeGroup, SystemNodeGroupArgs, system_autoscaler_template

try:
    config = load_stack_config()
except ConfigError as error:  # every problem at once, before any resource registers
    raise pulumi.RunError(str(error)) from None

stack = pulumi.get_stack()
cluster_name = stack_cluster_name(stack)
gpu_instance = gpu_instance_type(config.gpu_nodes.instance_type)
tags = {"project": config.name, "stack": stack, "managed-by": "pulumi"}

network = Network(
    "network",
    NetworkArgs(config=config.network, cluster_name=cluster_name, protect=config.protect, tags=tags),
)

cluster = Cluster(
    "cluster",
    ClusterArgs(
        config=config.cluster,
        cluster_name=cluster_name,
        vpc_id=network.vpc.id,
        private_subnet_ids=network.private_subnet_ids,
        public_subnet_ids=network.public_subnet_ids,
        protect=config.protect,
        tags=tags,
    ),
)
# Node groups take the cluster by name (known up front), so they wait for it explicitly.
nodes_after = [cluster.eks, *cluster.node_policies]
# What the node autoscaler must know of each group's future nodes (empty when it is not installed).
system_template = system_autoscaler_template()
gpu_template = gpu_autoscaler_template(config.gpu_nodes, gpu_instance)
autoscaled = config.node_autoscaler.enabled

system_nodes = SystemNodeGroup(
    "system-nodes",
    SystemNodeGroupArgs(
        config=config.system_nodes,
        cluster_name=cluster_name,
        node_role_arn=cluster.node_role.arn,
        subnet_ids=network.private_subnet_ids,
        depends_on=nodes_after,
        tags=tags,
        autoscaler_tags=autoscaler_tags(cluster_name, system_template) if autoscaled else {},
    ),
)

gpu_nodes = EfaGpuNodeGroup(
    "gpu-nodes",
    EfaGpuNodeGroupArgs(
        config=config.gpu_nodes,
        instance=gpu_instance,
        cluster_name=cluster_name,
        node_role_arn=cluster.node_role.arn,
        vpc_id=network.vpc.id,
        subnet=network.private_subnets[config.gpu_nodes.availability_zone],
        cluster_security_group_id=cluster.security_group_id,
        depends_on=nodes_after,
        tags=tags,
        autoscaler_tags=autoscaler_tags(cluster_name, gpu_template) if autoscaled else {},
    ),
)

addons = CoreAddons(
    "core-addons",
    CoreAddonsArgs(cluster_name=cluster_name, cluster=cluster.eks, system_nodes=system_nodes.node_group, tags=tags),
)

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
)

kuberay = KubeRayOperator(
    "kuberay",
    KubeRayOperatorArgs(
        config=config.kuberay,
        provider=cluster.provider,
        depends_on=[system_nodes.node_group, *addons.addons.values()],
    ),
)

if autoscaled:
    node_autoscaler = NodeAutoscaler(
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
    )

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
            hf_token=pulumi.Config().get_secret("hfToken"),
        ),
    )
    pulumi.export("endpoint", llm.endpoint)
    pulumi.export("modelId", config.serving.model_id)

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
        tags=tags,
    ),
)

# Observability: Prometheus, Grafana, the DCGM exporter, the Ray scrape config, alerts and dashboards.
if config.observability.enabled:
    listed = load_prices().regions.get(config.region, {}).get("instances", {})
    node_types = (config.system_nodes.instance_type, config.gpu_nodes.instance_type)
    observability = Observability(
        "observability",
        ObservabilityArgs(
            config=config.observability,
            instance=gpu_instance,
            provider=cluster.provider,
            hourly_prices={t: listed[t] for t in node_types if t in listed},
            gpu_node_group=gpu_nodes.node_group,
            depends_on=[system_nodes.node_group, *addons.addons.values()],
            grafana_admin_password=pulumi.Config().get_secret("grafanaAdminPassword"),
            region=config.region,
            oidc_provider_arn=cluster.oidc_provider_arn,
            oidc_issuer=cluster.oidc_issuer,
            alert_webhook_url=pulumi.Config().get_secret("alertWebhookUrl"),
            storage_class=storage.storage_class,
            tags=tags,
        ),
    )

pulumi.export("vpcId", network.vpc.id)
pulumi.export("privateSubnetIds", network.private_subnet_ids)
pulumi.export("clusterName", cluster_name)
pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("gpuAvailabilityZone", config.gpu_nodes.availability_zone)
pulumi.export("gpuInstanceType", config.gpu_nodes.instance_type)
pulumi.export(
    "nodeGroupNames",
    {"system": system_nodes.node_group.node_group_name, "gpu": gpu_nodes.node_group.node_group_name},
)
