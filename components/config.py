"""The stack configuration as one strict pydantic model.

Pulumi ignores config keys nobody reads, so `pulumi config set gpuNode ...` (typo) would deploy
the defaults without a word. `load_stack_config` instead reads *every* key of the project
namespace, refuses unknown ones by name and reports all problems at once, before the program
registers a single resource.

Structured values are set with `pulumi config set --path` or as YAML objects in
`Pulumi.<stack>.yaml`; the engine hands them to the program as JSON strings.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
from typing import Any, Iterable, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .catalog import GPU_INSTANCE_TYPES, unsupported_type
from .models import MODELS

PROJECT = "llm-pd-eks"

_AZ_SUFFIX = re.compile(r"^[a-z]$")


class Strict(BaseModel):
    """Base for every config section: camelCase keys, unknown keys refused, immutable."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class NodeScaling(Strict):
    """Managed node group sizes. EKS refuses desired outside [min, max]; so do we, earlier."""

    min_size: int = Field(ge=0)
    desired_size: int = Field(ge=0)
    max_size: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> "NodeScaling":
        if self.min_size > self.max_size:
            raise ValueError(f"minSize ({self.min_size}) is greater than maxSize ({self.max_size})")
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"desiredSize ({self.desired_size}) must lie between minSize ({self.min_size}) "
                f"and maxSize ({self.max_size})"
            )
        return self


class NetworkConfig(Strict):
    """VPC layout: one public and one private subnet per AZ."""

    vpc_cidr: str = "10.0.0.0/16"
    availability_zones: list[str] = Field(min_length=2)
    # Omitted: carved from vpcCidr (private /19-sized blocks first, public /22-sized at the top).
    private_subnet_cidrs: Optional[list[str]] = None
    public_subnet_cidrs: Optional[list[str]] = None
    nat_gateways: Literal["single", "perAz"] = "single"

    @field_validator("availability_zones")
    @classmethod
    def _unique_azs(cls, azs: list[str]) -> list[str]:
        dupes = sorted({az for az in azs if azs.count(az) > 1})
        if dupes:
            raise ValueError(f"availability zones listed twice: {', '.join(dupes)}")
        return azs

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr(cls, value: str) -> str:
        net = _network(value)
        if not 16 <= net.prefixlen <= 24:
            raise ValueError(f"{value} must be between /16 and /24 (an AWS VPC limit)")
        return value

    @field_validator("private_subnet_cidrs", "public_subnet_cidrs")
    @classmethod
    def _subnet_cidrs(cls, values: Optional[list[str]]) -> Optional[list[str]]:
        for value in values or []:
            _network(value)
        return values

    @model_validator(mode="after")
    def _layout(self) -> "NetworkConfig":
        vpc = ipaddress.IPv4Network(self.vpc_cidr)  # validated above: an IPv4 block
        problems = []
        for label, cidrs in (("privateSubnetCidrs", self.private_subnet_cidrs),
                             ("publicSubnetCidrs", self.public_subnet_cidrs)):
            if cidrs is not None and len(cidrs) != len(self.availability_zones):
                problems.append(
                    f"{label} has {len(cidrs)} entries for {len(self.availability_zones)} availability zones"
                )
        subnets = [("private", c) for c in self.private_cidrs()] + [("public", c) for c in self.public_cidrs()]
        for kind, cidr in subnets:
            if not ipaddress.IPv4Network(cidr).subnet_of(vpc):
                problems.append(f"{kind} subnet {cidr} does not fit in vpcCidr {self.vpc_cidr}")
        for i, (kind_a, a) in enumerate(subnets):
            for kind_b, b in subnets[i + 1:]:
                if ipaddress.ip_network(a).overlaps(ipaddress.ip_network(b)):
                    problems.append(f"{kind_a} subnet {a} overlaps {kind_b} subnet {b}")
        if problems:
            raise ValueError("\n".join(problems))  # one problem a line: reported separately
        return self

    def private_cidrs(self) -> list[str]:
        if self.private_subnet_cidrs is not None:
            return list(self.private_subnet_cidrs)
        vpc = ipaddress.IPv4Network(self.vpc_cidr)
        blocks = list(vpc.subnets(prefixlen_diff=3))[:-1]  # the last eighth is for public subnets
        return [str(b) for b in blocks[: len(self.availability_zones)]]

    def public_cidrs(self) -> list[str]:
        if self.public_subnet_cidrs is not None:
            return list(self.public_subnet_cidrs)
        vpc = ipaddress.IPv4Network(self.vpc_cidr)
        top = list(vpc.subnets(prefixlen_diff=3))[-1]
        return [str(b) for b in list(top.subnets(prefixlen_diff=3))[: len(self.availability_zones)]]


LogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]


class ClusterConfig(Strict):
    """The EKS control plane."""

    kubernetes_version: str = "1.33"
    # The public endpoint is reachable only from these CIDRs; empty list = private endpoint only.
    public_access_cidrs: list[str] = Field(default_factory=list)
    # IAM principals given cluster-admin through EKS access entries (authentication mode API).
    admin_principal_arns: list[str] = Field(default_factory=list)
    log_types: list[LogType] = Field(default_factory=lambda: list[LogType](["api", "audit", "authenticator"]))

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, values: list[str]) -> list[str]:
        for value in values:
            _network(value)
        return values

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not re.fullmatch(r"1\.\d{2}", value):
            raise ValueError(f"{value!r} is not a Kubernetes minor version such as '1.33'")
        return value

    @field_validator("admin_principal_arns")
    @classmethod
    def _arns(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.fullmatch(r"arn:aws[\w-]*:(iam|sts)::\d{12}:\S+", value):
                raise ValueError(f"{value!r} is not an IAM principal ARN")
        return values


class SystemNodesConfig(NodeScaling):
    """CPU nodes for system pods, the operators and the Ray head (label role=system)."""

    instance_type: str = "m7i.2xlarge"
    disk_size_gib: int = Field(default=100, ge=20)
    min_size: int = Field(default=2, ge=1)
    desired_size: int = Field(default=2, ge=1)
    max_size: int = Field(default=4, ge=1)


class GpuNodesConfig(NodeScaling):
    """The EFA GPU node group: one AZ, one cluster placement group, prefill and decode nodes."""

    instance_type: str
    availability_zone: str
    min_size: int = Field(default=2, ge=0)
    desired_size: int = Field(default=2, ge=0)
    max_size: int = Field(default=2, ge=1)
    disk_size_gib: int = Field(default=500, ge=100)  # Ray LLM images and model weights are large

    @field_validator("min_size")
    @classmethod
    def _two_nodes(cls, value: int) -> int:
        # Prefill and decode run on separate nodes, so the group can never be smaller than two.
        if value < 2:
            raise ValueError(f"minSize is {value}: prefill and decode need separate GPU nodes, so at least 2")
        return value

    @field_validator("instance_type")
    @classmethod
    def _efa_type(cls, value: str) -> str:
        if value not in GPU_INSTANCE_TYPES:
            raise ValueError(unsupported_type(value))
        return value


# --- serving layer (issue 3): device plugins, KubeRay, the prefill/decode RayService -------------

# vLLM's default gpu_memory_utilization: the engine budgets 90% of each GPU, and the weights must
# fit inside that budget with room left for the KV cache.
GPU_MEMORY_BUDGET = 0.9

# ECR image URI: <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>:<tag>
_ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z]{2}(-gov)?-[a-z]+-\d)\.amazonaws\.com(\.cn)?"
    r"/(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?$"
)


class ReplicaGroupConfig(Strict):
    """One side of the prefill/decode split: vLLM tensor parallelism and Serve autoscaling bounds."""

    tensor_parallel_size: int = Field(default=1, ge=1)
    min_replicas: int = Field(default=1, ge=1)
    max_replicas: int = Field(default=1, ge=1)

    @field_validator("tensor_parallel_size")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        # attention heads and NCCL rings split evenly only over powers of two
        if value & (value - 1):
            raise ValueError(f"{value} is not a power of two (1, 2, 4, 8)")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> "ReplicaGroupConfig":
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"minReplicas ({self.min_replicas}) is greater than maxReplicas ({self.max_replicas})")
        return self

    def replicas_per_node(self, node_gpus: int) -> int:
        """Serve replicas one GPU node holds (a replica's TP group never spans nodes)."""
        return node_gpus // self.tensor_parallel_size

    def nodes(self, replicas: int, node_gpus: int) -> int:
        """GPU nodes (= Ray worker pods: each takes a whole node) that `replicas` replicas need."""
        return math.ceil(replicas / self.replicas_per_node(node_gpus))


class ServingConfig(Strict):
    """The model served by the RayService and how prefill and decode are laid out."""

    model_id: str
    image: str  # the Ray LLM image (with EFA/libfabric) in ECR, pinned by tag
    max_model_len: int = Field(default=8192, ge=256)
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"  # auto = the model dtype (bf16, 2 bytes)
    prefill: ReplicaGroupConfig = ReplicaGroupConfig()
    decode: ReplicaGroupConfig = ReplicaGroupConfig()
    public_endpoint: bool = False  # true: an internet-facing NLB; false: a ClusterIP Service
    ready_timeout_minutes: int = Field(default=60, ge=5, le=360)  # image pull + weights download + warm-up

    @field_validator("model_id")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in MODELS:
            raise ValueError(f"{value!r} is not a model this project knows; choose one of {', '.join(sorted(MODELS))}")
        return value

    @field_validator("image")
    @classmethod
    def _pinned_ecr_image(cls, value: str) -> str:
        match = _ECR_IMAGE.match(value)
        if not match:
            raise ValueError(
                f"{value!r} is not an ECR image URI such as "
                "'123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.0-py311-cu128'"
            )
        if not match["tag"]:
            raise ValueError(f"{value!r} has no tag; pin the image with an explicit tag")
        if match["tag"] == "latest":
            raise ValueError(f"{value!r} uses the 'latest' tag; pin a version tag so up and preview agree")
        return value

    @property
    def kv_cache_dtype_bytes(self) -> int:
        return 1 if self.kv_cache_dtype == "fp8" else 2

    def groups(self) -> dict[str, ReplicaGroupConfig]:
        """The two sides by role name, the name the serve config and the Ray worker groups use."""
        return {"prefill": self.prefill, "decode": self.decode}


class KubeRayConfig(Strict):
    """The KubeRay operator chart (https://ray-project.github.io/kuberay-helm/)."""

    chart_version: str = "1.7.0"

    @field_validator("chart_version")
    @classmethod
    def _v1_7(cls, value: str) -> str:
        # the RayService fields used here (and the CRDs vendored in tests/data/kuberay) are those of KubeRay 1.7
        if not re.fullmatch(r"1\.7\.\d+", value):
            raise ValueError(f"{value!r} is not a 1.7.x release of the kuberay-operator chart")
        return value


class DevicePluginsConfig(Strict):
    """Chart versions of the NVIDIA and the AWS EFA device plugins."""

    nvidia_chart_version: str = "0.18.0"  # https://nvidia.github.io/k8s-device-plugin
    efa_chart_version: str = "v0.5.7"  # https://aws.github.io/eks-charts

    @field_validator("nvidia_chart_version", "efa_chart_version")
    @classmethod
    def _pinned(cls, value: str) -> str:
        if not re.fullmatch(r"v?\d+\.\d+\.\d+", value):
            raise ValueError(f"{value!r} is not an exact chart version such as '0.18.0'")
        return value


class StackConfig(Strict):
    """Everything a stack may set. Defaults here; per-stack overrides in Pulumi.<stack>.yaml."""

    region: str  # from aws:region
    network: NetworkConfig
    cluster: ClusterConfig = ClusterConfig()
    system_nodes: SystemNodesConfig = SystemNodesConfig()
    gpu_nodes: GpuNodesConfig
    # protect=True on the VPC and the cluster: `pulumi destroy` must be a deliberate act.
    protect: bool = False
    device_plugins: DevicePluginsConfig = DevicePluginsConfig()
    kuberay: KubeRayConfig = KubeRayConfig()
    # Omitted: the cluster, device plugins and operator come up without a RayService.
    serving: Optional[ServingConfig] = None

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d", value):
            raise ValueError(f"{value!r} is not an AWS region name such as 'us-west-2'")
        return value

    @model_validator(mode="after")
    def _serving_fits_the_gpu_nodes(self) -> "StackConfig":
        if self.serving is None:
            return self
        serving, instance = self.serving, GPU_INSTANCE_TYPES[self.gpu_nodes.instance_type]
        model = MODELS[serving.model_id]
        problems = []
        groups = serving.groups()
        for role, group in groups.items():
            key = f"serving.{role}.tensorParallelSize"
            tp = group.tensor_parallel_size
            if instance.gpus % tp:
                problems.append(
                    f"{key}: {tp} does not divide the {instance.gpus} GPU(s) of a {instance.name} node"
                )
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
                problems.append(
                    f"serving.prefill.maxReplicas/serving.decode.maxReplicas: {needed['prefill']} prefill + "
                    f"{needed['decode']} decode node(s) of {instance.name} exceed gpuNodes.maxSize "
                    f"({self.gpu_nodes.max_size}); prefill and decode replicas need separate nodes"
                )
        if problems:
            raise ValueError("\n".join(problems))  # one problem a line: reported separately
        return self

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
        f"{PROJECT}:network.availabilityZones: {az!r} is not an AZ of region {region}"
        for az in azs
        if region and not (az.startswith(region) and _AZ_SUFFIX.match(az[len(region):]))
    ]
    gpu_az = gpu.get("availabilityZone") if isinstance(gpu, dict) else None
    if isinstance(gpu_az, str) and gpu_az not in azs:
        problems.append(
            f"{PROJECT}:gpuNodes.availabilityZone: {gpu_az!r} is not one of the network's availability zones "
            f"({', '.join(azs)})"
        )
    return problems


def _network(value: str) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a valid CIDR block ({exc})") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise ValueError(f"{value!r} is not an IPv4 CIDR block")
    return net


class ConfigError(Exception):
    """Every problem of a stack's config, each naming its key."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(
            f"{len(problems)} problem(s) in the stack config:\n" + "\n".join(f"  - {p}" for p in problems)
        )


def _known_keys() -> list[str]:
    return [field.alias or name for name, field in StackConfig.model_fields.items() if name != "region"]


def _location(error: Mapping[str, Any]) -> str:
    parts = [str(p) for p in error["loc"] if not str(p).startswith("function-after")]
    if not parts:
        return PROJECT
    return f"{PROJECT}:{parts[0]}" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts[1:])


def _describe(error: Mapping[str, Any]) -> str:
    where = _location(error)
    if error["type"] == "extra_forbidden":
        key = str(error["loc"][-1])
        siblings = _known_keys() if len(error["loc"]) == 1 else []
        hint = difflib.get_close_matches(key, siblings, n=1)
        suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
        return f"{where}: unknown key{suffix}"
    message = error["msg"].removeprefix("Value error, ")
    # A model-level check reports several problems, one a line; at the top level each names its key.
    return "\n".join(f"{PROJECT}:{part}" if where == PROJECT else f"{where}: {part}" for part in message.split("\n"))


def _parse_value(raw: Any) -> Any:
    """Config values arrive as strings; objects, lists, numbers and booleans as JSON text."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


# Keys read only as Pulumi secrets (pulumi.Config().get_secret), never part of the model.
SECRET_ONLY_KEYS = ("hfToken",)


def validate_stack_config(
    project_values: dict[str, Any], region: Optional[str], secret_keys: Iterable[str] = ()
) -> StackConfig:
    """Validate raw project-namespace values (keys without the `project:` prefix).

    `secret_keys` are the full keys the engine marks secret (`project:key`); a secret-only key set
    in plain text is refused, so it never reaches state or a manifest unencrypted.
    """
    data = {k: _parse_value(v) for k, v in project_values.items()}
    problems: list[str] = []
    secret = set(secret_keys)
    for key in SECRET_ONLY_KEYS:
        if key in data:
            data.pop(key)
            if f"{PROJECT}:{key}" not in secret:
                problems.append(
                    f"{PROJECT}:{key}: set in plain text; store it encrypted with "
                    f"`pulumi config set --secret {key} <value>`"
                )
    if not region:
        problems.append("aws:region: not set (pulumi config set aws:region us-west-2)")
    data["region"] = region or "us-east-1"  # stand-in so the rest still validates
    config: Optional[StackConfig] = None
    try:
        config = StackConfig.model_validate(data)
    except ValidationError as exc:
        problems.extend(line for e in exc.errors() for line in _describe(e).split("\n"))
    problems.extend(placement_problems({**data, "region": region}))
    if problems or config is None:
        raise ConfigError(problems)
    return config


def validate_engine_config(config: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> StackConfig:
    """Validate config in the engine's form: `project:key` -> value (objects as JSON text), `aws:region`.

    The one entry point for the program (from the runtime) and the tools (from a stack file).
    """
    prefix = f"{PROJECT}:"
    values = {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}
    region = config.get("aws:region")
    return validate_stack_config(values, str(region) if region else None, secret_keys)


def load_stack_config() -> StackConfig:
    """Read and validate the running stack's config (raises ConfigError listing every problem)."""
    from pulumi.runtime import config as runtime_config

    merged: dict[str, Any] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    secret_keys = set(runtime_config.get_config_secret_keys_env())
    secret_keys.update(k for k in merged if runtime_config.is_config_secret(k))
    return validate_engine_config(merged, secret_keys)
