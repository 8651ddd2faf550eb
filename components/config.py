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
import re
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .catalog import GPU_INSTANCE_TYPES

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
        vpc = ipaddress.ip_network(self.vpc_cidr)
        problems = []
        for label, cidrs in (("privateSubnetCidrs", self.private_subnet_cidrs),
                             ("publicSubnetCidrs", self.public_subnet_cidrs)):
            if cidrs is not None and len(cidrs) != len(self.availability_zones):
                problems.append(
                    f"{label} has {len(cidrs)} entries for {len(self.availability_zones)} availability zones"
                )
        subnets = [("private", c) for c in self.private_cidrs()] + [("public", c) for c in self.public_cidrs()]
        for kind, cidr in subnets:
            if not ipaddress.ip_network(cidr).subnet_of(vpc):
                problems.append(f"{kind} subnet {cidr} does not fit in vpcCidr {self.vpc_cidr}")
        for i, (kind_a, a) in enumerate(subnets):
            for kind_b, b in subnets[i + 1:]:
                if ipaddress.ip_network(a).overlaps(ipaddress.ip_network(b)):
                    problems.append(f"{kind_a} subnet {a} overlaps {kind_b} subnet {b}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def private_cidrs(self) -> list[str]:
        if self.private_subnet_cidrs is not None:
            return list(self.private_subnet_cidrs)
        vpc = ipaddress.ip_network(self.vpc_cidr)
        blocks = list(vpc.subnets(prefixlen_diff=3))[:-1]  # the last eighth is for public subnets
        return [str(b) for b in blocks[: len(self.availability_zones)]]

    def public_cidrs(self) -> list[str]:
        if self.public_subnet_cidrs is not None:
            return list(self.public_subnet_cidrs)
        vpc = ipaddress.ip_network(self.vpc_cidr)
        top = list(vpc.subnets(prefixlen_diff=3))[-1]
        return [str(b) for b in list(top.subnets(prefixlen_diff=3))[: len(self.availability_zones)]]


class ClusterConfig(Strict):
    """The EKS control plane."""

    kubernetes_version: str = "1.33"
    # The public endpoint is reachable only from these CIDRs; empty list = private endpoint only.
    public_access_cidrs: list[str] = Field(default_factory=list)
    # IAM principals given cluster-admin through EKS access entries (authentication mode API).
    admin_principal_arns: list[str] = Field(default_factory=list)
    log_types: list[Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]] = Field(
        default_factory=lambda: ["api", "audit", "authenticator"]
    )

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
            raise ValueError(
                f"{value!r} is not an EFA-capable GPU instance type this project supports; "
                f"choose one of {', '.join(sorted(GPU_INSTANCE_TYPES))}"
            )
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

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d", value):
            raise ValueError(f"{value!r} is not an AWS region name such as 'us-west-2'")
        return value

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


def _location(error: dict[str, Any]) -> str:
    parts = [str(p) for p in error["loc"] if not str(p).startswith("function-after")]
    if not parts:
        return PROJECT
    return f"{PROJECT}:{parts[0]}" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts[1:])


def _describe(error: dict[str, Any]) -> str:
    where = _location(error)
    if error["type"] == "extra_forbidden":
        key = str(error["loc"][-1])
        siblings = _known_keys() if len(error["loc"]) == 1 else []
        hint = difflib.get_close_matches(key, siblings, n=1)
        suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
        return f"{where}: unknown key{suffix}"
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}"


def _parse_value(raw: Any) -> Any:
    """Config values arrive as strings; objects, lists, numbers and booleans as JSON text."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def validate_stack_config(project_values: dict[str, Any], region: Optional[str]) -> StackConfig:
    """Validate raw project-namespace values (keys without the `project:` prefix)."""
    data = {k: _parse_value(v) for k, v in project_values.items()}
    problems: list[str] = []
    if not region:
        problems.append("aws:region: not set (pulumi config set aws:region us-west-2)")
    data["region"] = region or "us-east-1"  # stand-in so the rest still validates
    config: Optional[StackConfig] = None
    try:
        config = StackConfig.model_validate(data)
    except ValidationError as exc:
        problems.extend(_describe(e) for e in exc.errors())
    problems.extend(placement_problems({**data, "region": region}))
    if problems or config is None:
        raise ConfigError(problems)
    return config


def read_project_values() -> tuple[dict[str, Any], Optional[str]]:
    """All keys of the project namespace, as the engine passed them, and aws:region."""
    from pulumi.runtime import config as runtime_config

    merged: dict[str, Any] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    prefix = f"{PROJECT}:"
    values = {k[len(prefix):]: v for k, v in merged.items() if k.startswith(prefix)}
    return values, merged.get("aws:region")


def load_stack_config() -> StackConfig:
    """Read and validate the running stack's config (raises ConfigError listing every problem)."""
    values, region = read_project_values()
    return validate_stack_config(values, region)
