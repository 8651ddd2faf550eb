"""The stack configuration as one strict pydantic model, split along the components' seams.

Pulumi ignores config keys nobody reads, so `pulumi config set gpuNode ...` (typo) would deploy
the defaults without a word. `load_stack_config` instead reads *every* key of the project
namespace, refuses unknown ones by name and reports all problems at once, before the program
registers a single resource.

Structured values are set with `pulumi config set --path` or as YAML objects in
`Pulumi.<stack>.yaml`; the engine hands them to the program as JSON strings.

Each component owns its section, in the module of its name:

- `base`: the `Strict` base model, the project's name, message helpers, the CIDR check;
- `nodes`: what both node groups share (sizes, gp3 root volume limits, EC2 instance types);
- `network`, `cluster`, `system_nodes`, `gpu_nodes` (with its capacity), `autoscaler`,
  `serving` (with KubeRay and the device plugins), `observability` (with alerting), `deploy`,
  `admission` (the in-cluster GPU-pod admission policy);
- `stack`: `StackConfig`, every section together, and the checks that span sections;
- `errors`: `ConfigError` and how a validation error names its key;
- `engine`: the config as the Pulumi engine hands it over (`load_stack_config`, `validate_engine_config`).

Every public name is importable from here (`from llm_pd_eks.config import StackConfig`).
"""

from __future__ import annotations

from .admission import AdmissionMode, AdmissionPolicyConfig
from .autoscaler import NodeAutoscalerConfig
from .base import (
    ECHO_LIMIT,
    PROJECT,
    REGION_NAME,
    Strict,
    clip,
    exact_chart_version,
    in_region,
    ipv4_network,
    shown,
    stack_cluster_name,
)
from .cluster import EKS_CLUSTER_NAME, EKS_KUBERNETES_VERSIONS, ClusterConfig, LogRetentionDays, LogType
from .deploy import DeployConfig
from .engine import (
    AWS_SECRET_ONLY_KEYS,
    KNOWN_NAMESPACES,
    aws_provider_keys,
    engine_problems,
    load_stack_config,
    validate_engine_config,
    validate_stack_config,
)
from .errors import ConfigError
from .gpu_nodes import CapacityBlock, CapacityReservation, GpuCapacity, GpuNodesConfig
from .network import SMALLEST_SUBNET_PREFIX, NetworkConfig
from .nodes import (
    EBS_GP3_MAX_GIB,
    EC2_INSTANCE_TYPES,
    GP3_BASELINE_IOPS,
    GP3_BASELINE_MIBPS,
    GP3_IOPS_PER_GIB,
    GP3_MIBPS_PER_IOPS,
    MAX_NODES_PER_NODE_GROUP,
    NodeScaling,
    gp3_problem,
)
from .observability import AlertingConfig, ObservabilityConfig, SnsSubscriptionConfig
from .serving import (
    GPU_MEMORY_BUDGET,
    MAX_MODEL_LEN,
    DevicePluginsConfig,
    KubeRayConfig,
    ReplicaGroupConfig,
    ServingConfig,
)
from .stack import (
    ALERT_WEBHOOK_KEY,
    HF_TOKEN_KEY,
    SECRET_ONLY_KEY_DESCRIPTIONS,
    SECRET_ONLY_KEYS,
    StackConfig,
    gated_model_problems,
    placement_problems,
)
from .system_nodes import SystemNodesConfig

__all__ = [
    "ALERT_WEBHOOK_KEY",
    "AWS_SECRET_ONLY_KEYS",
    "EBS_GP3_MAX_GIB",
    "EC2_INSTANCE_TYPES",
    "ECHO_LIMIT",
    "EKS_CLUSTER_NAME",
    "EKS_KUBERNETES_VERSIONS",
    "GP3_BASELINE_IOPS",
    "GP3_BASELINE_MIBPS",
    "GP3_IOPS_PER_GIB",
    "GP3_MIBPS_PER_IOPS",
    "GPU_MEMORY_BUDGET",
    "HF_TOKEN_KEY",
    "KNOWN_NAMESPACES",
    "MAX_MODEL_LEN",
    "MAX_NODES_PER_NODE_GROUP",
    "PROJECT",
    "REGION_NAME",
    "SECRET_ONLY_KEYS",
    "SECRET_ONLY_KEY_DESCRIPTIONS",
    "SMALLEST_SUBNET_PREFIX",
    "AdmissionMode",
    "AdmissionPolicyConfig",
    "AlertingConfig",
    "CapacityBlock",
    "CapacityReservation",
    "ClusterConfig",
    "ConfigError",
    "DeployConfig",
    "DevicePluginsConfig",
    "GpuCapacity",
    "GpuNodesConfig",
    "KubeRayConfig",
    "LogRetentionDays",
    "LogType",
    "NetworkConfig",
    "NodeAutoscalerConfig",
    "NodeScaling",
    "ObservabilityConfig",
    "ReplicaGroupConfig",
    "ServingConfig",
    "SnsSubscriptionConfig",
    "StackConfig",
    "Strict",
    "SystemNodesConfig",
    "aws_provider_keys",
    "clip",
    "engine_problems",
    "exact_chart_version",
    "gated_model_problems",
    "gp3_problem",
    "in_region",
    "ipv4_network",
    "load_stack_config",
    "placement_problems",
    "shown",
    "stack_cluster_name",
    "validate_engine_config",
    "validate_stack_config",
]
