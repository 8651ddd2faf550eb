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
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Mapping, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from .catalog import CLUSTER_AUTOSCALER_TAGS, GPU_INSTANCE_TYPES, chart_version_key, unsupported_type
from .metrics import ITL_BUCKETS, TTFT_BUCKETS
from .models import MODELS, NATIVE_CONTEXT
from .ray_resources import accelerator_resource_name, custom_resource_problem, role_resource

PROJECT = "llm-pd-eks"

_AZ_SUFFIX = re.compile(r"^[a-z]$")


# --- limits of the real services: absurd values are refused before anything registers ----

# EKS service quota L-BD136A63 "Nodes per managed node group", default 450 (adjustable: raise this
# with the quota). Without a bound, `maxSize: 1000000000` priced at millions of dollars an hour.
MAX_NODES_PER_NODE_GROUP = 450
# Largest gp3 volume: 16 TiB (Amazon EBS volume types, "Volume size").
EBS_GP3_MAX_GIB = 16_384
# The longest context of the models in llm_pd_eks/models.py (Llama 3.1/3.3: max_position_embeddings
# 131072 in their config.json); vLLM refuses a max_model_len beyond the model's.
MAX_MODEL_LEN = 131_072
# Kubernetes minor versions Amazon EKS has released (the EKS "Kubernetes versions" page; 1.28 was
# released on EKS in Sept 2023, 1.35 in Jan 2026, 1.36 is the page's newest example). `make
# preflight` asks EKS which of them the region still offers.
EKS_KUBERNETES_VERSIONS = tuple(f"1.{minor}" for minor in range(28, 37))
# EKS CreateCluster `name` (botocore eks model, shape ClusterName): 1-100 characters, this pattern.
EKS_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")
# AWS subnets are /16 to /28 ("Subnet CIDR blocks", Amazon VPC User Guide).
SMALLEST_SUBNET_PREFIX = 28
# Config namespaces the program reads: the AWS provider's and its own. Anything else in a stack
# file is a typo (`aws-native:`, `llm-pd-eks2:`) or belongs to another program.
KNOWN_NAMESPACES = ("aws", PROJECT)
# AWS provider keys that are credentials: accepted only as Pulumi secrets (`--secret`).
AWS_SECRET_ONLY_KEYS = ("aws:secretKey", "aws:token")
# How much of a user's value a message repeats (a 100 KB value must not come back whole).
ECHO_LIMIT = 100


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` on one line, at most `limit` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def shown(value: Any, limit: int = ECHO_LIMIT) -> str:
    """`value` as a message repeats it: repr'd, on one line, at most `limit` characters."""
    return clip(repr(value), limit)


def exact_chart_version(value: str, example: str) -> str:
    """A chart version pinned exactly (`1.2.3`, or `v1.2.3` where the chart is tagged so): no ranges."""
    if not re.fullmatch(r"v?\d+\.\d+\.\d+", value):
        raise ValueError(f"{shown(value)} is not an exact chart version such as {example!r}")
    return value


def stack_cluster_name(stack: str) -> str:
    """The EKS cluster's name for a stack: the one formula `__main__` and the checks share."""
    return f"{PROJECT}-{stack}"


def _ec2_instance_types() -> frozenset[str]:
    """Every EC2 instance type name (vendored from botocore's EC2 model: see llm_pd_eks/data/SOURCE)."""
    path = Path(__file__).resolve().parent / "data" / "ec2_instance_types.json"
    return frozenset(json.loads(path.read_text())["instanceTypes"])


EC2_INSTANCE_TYPES = _ec2_instance_types()


def _special_purpose(net: ipaddress.IPv4Network) -> Optional[str]:
    """Why a block can be neither a VPC nor a subnet nor an API allow-list entry, if it cannot."""
    for label, flag in (
        ("loopback", net.is_loopback),
        ("multicast", net.is_multicast),
        ("link-local", net.is_link_local),
        ("reserved (240.0.0.0/4)", net.is_reserved),
    ):
        if flag:
            return label
    if net.prefixlen and net.subnet_of(ipaddress.IPv4Network("0.0.0.0/8")):
        return "'this network' (0.0.0.0/8)"
    return None


class Strict(BaseModel):
    """Base for every config section: camelCase keys, unknown keys refused, immutable.

    Strict: `maxSize: true` or `maxSize: "3"` is refused rather than coerced to 1 or 3, and only the
    camelCase spelling is accepted (`max_size` is an unknown key), so one key has one spelling.
    """

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=False, frozen=True, strict=True
    )


class NodeScaling(Strict):
    """Managed node group sizes. EKS refuses desired outside [min, max]; so do we, earlier."""

    min_size: int = Field(ge=0, description="Fewest nodes the group scales in to.")
    desired_size: int = Field(ge=0, description="Nodes the group starts with; between minSize and maxSize.")
    max_size: int = Field(ge=1, le=MAX_NODES_PER_NODE_GROUP, description="Most nodes the group scales out to.")

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

    vpc_cidr: str = Field(
        default="10.0.0.0/16",
        description="The VPC's IPv4 block, /16 to /22 when subnets are carved from it.",
    )
    availability_zones: list[str] = Field(
        min_length=2,
        description="AZs of the region, at least 2, no duplicates; one public and one private subnet each.",
    )
    private_subnet_cidrs: Optional[list[str]] = Field(
        default=None,
        description="One private subnet per AZ; omitted: carved from vpcCidr (its first eighths, /19 of a /16).",
    )
    public_subnet_cidrs: Optional[list[str]] = Field(
        default=None,
        description="One public subnet per AZ; omitted: carved from the top eighth of vpcCidr (/22 of a /16).",
    )
    nat_gateways: Literal["single", "perAz"] = Field(
        default="single",
        description="`single` NAT gateway (cheap, dev) or one `perAz` (survives an AZ outage).",
    )

    @field_validator("availability_zones")
    @classmethod
    def _unique_azs(cls, azs: list[str]) -> list[str]:
        dupes = sorted({az for az in azs if azs.count(az) > 1})
        if dupes:
            raise ValueError(f"availability zones listed twice: {clip(', '.join(dupes))}")
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
        problems = self._carving_problems(vpc)
        if problems:
            raise ValueError("\n".join(problems))
        for label, cidrs in (
            ("privateSubnetCidrs", self.private_subnet_cidrs),
            ("publicSubnetCidrs", self.public_subnet_cidrs),
        ):
            if cidrs is not None and len(cidrs) != len(self.availability_zones):
                problems.append(
                    f"{label} has {len(cidrs)} entries for {len(self.availability_zones)} availability zones"
                )
        subnets = [("private", c) for c in self.private_cidrs()] + [("public", c) for c in self.public_cidrs()]
        for kind, cidr in subnets:
            if not ipaddress.IPv4Network(cidr).subnet_of(vpc):
                problems.append(f"{kind} subnet {cidr} does not fit in vpcCidr {self.vpc_cidr}")
        for i, (kind_a, a) in enumerate(subnets):
            for kind_b, b in subnets[i + 1 :]:
                if ipaddress.ip_network(a).overlaps(ipaddress.ip_network(b)):
                    problems.append(f"{kind_a} subnet {a} overlaps {kind_b} subnet {b}")
        if problems:
            raise ValueError("\n".join(problems))  # one problem a line: reported separately
        return self

    def _carving_problems(self, vpc: ipaddress.IPv4Network) -> list[str]:
        """Subnets AWS would refuse (smaller than /28) and AZs the carved layout has no room for."""
        problems = []
        azs = len(self.availability_zones)
        for label, given, extra_bits, room in (
            ("privateSubnetCidrs", self.private_subnet_cidrs, 3, 7),
            ("publicSubnetCidrs", self.public_subnet_cidrs, 6, 8),
        ):
            if given is not None:
                small = [c for c in given if ipaddress.IPv4Network(c).prefixlen > SMALLEST_SUBNET_PREFIX]
                if small:
                    problems.append(
                        f"{label}: {clip(', '.join(small))} smaller than /{SMALLEST_SUBNET_PREFIX}, "
                        "the smallest subnet AWS allows"
                    )
                continue
            if vpc.prefixlen + extra_bits > SMALLEST_SUBNET_PREFIX:
                problems.append(
                    f"{label}: vpcCidr {self.vpc_cidr} carves /{vpc.prefixlen + extra_bits} subnets, smaller than "
                    f"/{SMALLEST_SUBNET_PREFIX} (the smallest AWS allows); use a vpcCidr of "
                    f"/{SMALLEST_SUBNET_PREFIX - extra_bits} or larger, or set {label}"
                )
            elif azs > room:
                problems.append(
                    f"{label}: the layout carved from vpcCidr has room for {room} subnets, not one for "
                    f"each of {azs} availability zones; list at most {room} or set {label}"
                )
        return problems

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
# The retentions CloudWatch Logs accepts (PutRetentionPolicy, retentionInDays):
# https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutRetentionPolicy.html
LogRetentionDays = Literal[
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653
]


class ClusterConfig(Strict):
    """The EKS control plane."""

    kubernetes_version: str = Field(
        default="1.35",
        description='EKS Kubernetes minor version, quoted (`"1.35"`); 1.35 is in standard support until 2027-03-27.',
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list,
        description="CIDRs allowed to reach the public API endpoint; empty: private endpoint only.",
    )
    admin_principal_arns: list[str] = Field(
        default_factory=list,
        description="IAM principal ARNs given cluster-admin through EKS access entries (authentication mode API).",
    )
    log_types: list[LogType] = Field(
        default_factory=lambda: list[LogType](["api", "audit", "authenticator"]),
        description="Control-plane log types sent to CloudWatch Logs.",
    )
    log_retention_days: LogRetentionDays = Field(
        default=90,
        description="Retention of the control-plane log group `/aws/eks/<cluster>/cluster`, which the "
        "program creates and `destroy` deletes; a value CloudWatch Logs accepts.",
    )
    extended_support: bool = Field(
        default=False,
        description="EKS upgrade policy: false is STANDARD (the control plane is upgraded when standard "
        "support ends); true is EXTENDED (it stays on its version, billed the extended-support rate).",
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
            raise ValueError(f"{shown(value)} is not a Kubernetes minor version such as '1.33'")
        if value not in EKS_KUBERNETES_VERSIONS:
            raise ValueError(
                f"{value} is not a Kubernetes version Amazon EKS has released; choose one of "
                f"{', '.join(EKS_KUBERNETES_VERSIONS)}"
            )
        return value

    @field_validator("admin_principal_arns")
    @classmethod
    def _arns(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.fullmatch(r"arn:aws[\w-]*:(iam|sts)::\d{12}:\S+", value):
                raise ValueError(f"{shown(value)} is not an IAM principal ARN")
        return values


# --- real AWS, part 1: GPU capacity, root volumes, autoscaler, deploy runner ----------

# EC2 capacity reservation ids: `cr-` and 17 hex digits (8 for older ids).
_RESERVATION_ID = re.compile(r"^cr-(?:[0-9a-f]{8}|[0-9a-f]{17})$")


def _reservation_id(value: str) -> str:
    if not _RESERVATION_ID.fullmatch(value):
        raise ValueError(f"{value!r} is not an EC2 capacity reservation id such as 'cr-0123456789abcdef0'")
    return value


# EC2 placement group names: up to 255 ASCII characters (EC2 API CreatePlacementGroup `GroupName`).
_PLACEMENT_GROUP_NAME = re.compile(r"^[\x21-\x7e]{1,255}$")


class CapacityReservation(Strict):
    """An On-Demand Capacity Reservation (ODCR) the GPU launch template targets.

    A reservation created in a cluster placement group serves only instances launched into that
    group, and cannot be moved out of it (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html,
    "Limitations"); one created outside any placement group also serves instances launched into one
    (https://docs.amazonaws.cn/en_us/AWSEC2/latest/UserGuide/limitations-placement-groups.html). So the
    template launches into the reservation's own group when it has one, else into this program's.
    """

    reservation_id: str = Field(
        description="ODCR id (`cr-…`) targeted by the GPU launch template's capacity reservation specification"
    )
    placement_group: Optional[str] = Field(
        default=None,
        description="name of the cluster placement group the ODCR was created in (preflight compares it with "
        "the reservation's PlacementGroupArn); the nodes launch into it and the program creates none. "
        "Unset: the ODCR is in no placement group and the program creates its own cluster group",
    )

    @field_validator("reservation_id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _reservation_id(value)

    @field_validator("placement_group")
    @classmethod
    def _pg(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not _PLACEMENT_GROUP_NAME.fullmatch(value):
            raise ValueError(f"{shown(value)} is not an EC2 placement group name (1-255 printable ASCII, no spaces)")
        return value


class CapacityBlock(Strict):
    """An EC2 Capacity Block for ML: node group capacity type CAPACITY_BLOCK, market type capacity-block."""

    capacity_block_id: str = Field(
        description="the Capacity Block's reservation id (`cr-…`); the node group runs CAPACITY_BLOCK, "
        "the template market type `capacity-block`"
    )

    @field_validator("capacity_block_id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _reservation_id(value)


def _capacity_kind(value: Any) -> Optional[str]:
    """Which capacity shape `value` is (None: none of them, reported with the one message below)."""
    if isinstance(value, (CapacityReservation, CapacityBlock)):
        return type(value).__name__
    if value == "onDemand":
        return "onDemand"
    if isinstance(value, dict) and value:
        # The id key names the shape; any other key is then judged (and refused) by that model.
        ids = {"capacityBlockId", "reservationId"} & set(value)
        if ids == {"capacityBlockId"}:
            return "CapacityBlock"
        if ids == {"reservationId"}:
            return "CapacityReservation"
    return None


GpuCapacity = Annotated[
    Union[
        Annotated[Literal["onDemand"], Tag("onDemand")],
        Annotated[CapacityReservation, Tag("CapacityReservation")],
        Annotated[CapacityBlock, Tag("CapacityBlock")],
    ],
    Discriminator(
        _capacity_kind,
        custom_error_type="capacity_shape",
        custom_error_message=(
            "must be 'onDemand', {reservationId: cr-..., placementGroup: ...} or {capacityBlockId: cr-...}"
        ),
    ),
]

# gp3 limits (https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html#gp3-ebs-volume-type):
# 3,000 IOPS and 125 MiB/s baseline, up to 80,000 IOPS and 2,000 MiB/s (the EC2 API model's
# LaunchTemplateEbsBlockDeviceRequest docs, checked in tests); throughput at most 0.25 MiB/s per IOPS.
GP3_BASELINE_IOPS = 3000
GP3_BASELINE_MIBPS = 125
GP3_MIBPS_PER_IOPS = 0.25
# Same page: "The maximum ratio of provisioned IOPS to provisioned volume size is 500 IOPS per GiB."
GP3_IOPS_PER_GIB = 500


def gp3_problem(iops: int, throughput: int, size_gib: Optional[int] = None) -> Optional[str]:
    """Why an IOPS/throughput pair (on a volume of `size_gib`) is not a valid gp3 volume, or None."""
    if size_gib is not None and iops > size_gib * GP3_IOPS_PER_GIB:
        return (
            f"rootVolumeIops {iops} exceeds gp3's {GP3_IOPS_PER_GIB} IOPS per GiB on a {size_gib} GiB volume "
            f"(at most {size_gib * GP3_IOPS_PER_GIB}; raise diskSizeGib or lower rootVolumeIops)"
        )
    if throughput > iops * GP3_MIBPS_PER_IOPS:
        return (
            f"rootVolumeThroughputMibps {throughput} exceeds {GP3_MIBPS_PER_IOPS} MiB/s per IOPS at "
            f"rootVolumeIops {iops} (gp3 allows at most {int(iops * GP3_MIBPS_PER_IOPS)})"
        )
    return None


class NodeAutoscalerConfig(Strict):
    """Cluster Autoscaler (https://kubernetes.github.io/autoscaler), pinned chart, image per Kubernetes minor."""

    enabled: bool = Field(
        default=True, description="install Cluster Autoscaler so node groups scale between min and max"
    )
    chart_version: str = Field(default="9.59.0", description="`cluster-autoscaler` chart, exact version")
    image_tag: Optional[str] = Field(
        default=None,
        description="cluster-autoscaler image tag; default: the catalog's tag for `cluster.kubernetesVersion` "
        "(its minor must equal the cluster's)",
    )

    @field_validator("chart_version")
    @classmethod
    def _exact(cls, value: str) -> str:
        return exact_chart_version(value, "9.59.0")

    @field_validator("image_tag")
    @classmethod
    def _tag(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not re.fullmatch(r"v1\.\d+\.\d+", value):
            raise ValueError(f"{value!r} is not a cluster-autoscaler image tag such as 'v1.35.2'")
        return value


class DeployConfig(Strict):
    """How `pulumi up` reaches the stack (read by the deploy workflow and the placeholder check)."""

    runner_label: Optional[str] = Field(
        default=None,
        description="GitHub Actions runner label for `pulumi up` (e.g. a self-hosted runner inside the VPC); "
        "required in practice when the API endpoint is private-only",
    )
    api_source_cidrs: list[str] = Field(
        default_factory=list,
        description="Where `pulumi up` reaches the Kubernetes API from (required): the deploying machine's "
        "egress CIDRs, each inside cluster.publicAccessCidrs, or private CIDRs of a peered/VPN network "
        "outside network.vpcCidr (443 ingress on the cluster security group); checked before anything is created",
    )

    @field_validator("api_source_cidrs")
    @classmethod
    def _source_cidrs(cls, values: list[str]) -> list[str]:
        for value in values:
            _network(value)
        return values


class SystemNodesConfig(NodeScaling):
    """CPU nodes for system pods, the operators and the Ray head (label role=system)."""

    instance_type: str = Field(
        default="m7i.2xlarge",
        description="EC2 instance type of the CPU nodes (operators, Ray head).",
    )
    disk_size_gib: int = Field(default=100, ge=20, le=EBS_GP3_MAX_GIB, description="Encrypted gp3 root volume, GiB.")
    min_size: int = Field(default=2, ge=1, description="Fewest system nodes.")
    desired_size: int = Field(default=2, ge=1, description="System nodes to start with.")
    max_size: int = Field(default=4, ge=1, le=MAX_NODES_PER_NODE_GROUP, description="Most system nodes.")
    root_volume_iops: int = Field(
        default=GP3_BASELINE_IOPS, ge=3000, le=80000, description="provisioned IOPS of the gp3 root volume"
    )
    root_volume_throughput_mibps: int = Field(
        default=GP3_BASELINE_MIBPS, ge=125, le=2000, description="provisioned throughput (MiB/s) of the gp3 root volume"
    )

    @field_validator("instance_type")
    @classmethod
    def _ec2_type(cls, value: str) -> str:
        # A misspelt type would fail `up` 15 minutes in (and drops out of the preview's cost).
        if value not in EC2_INSTANCE_TYPES:
            hint = difflib.get_close_matches(value[:64], sorted(EC2_INSTANCE_TYPES), n=1)
            raise ValueError(
                f"{shown(value)} is not an EC2 instance type"
                + (f" (did you mean {hint[0]!r}?)" if hint else " such as 'm7i.2xlarge'")
            )
        return value

    @model_validator(mode="after")
    def _gp3(self) -> "SystemNodesConfig":
        problem = gp3_problem(self.root_volume_iops, self.root_volume_throughput_mibps, self.disk_size_gib)
        if problem:
            raise ValueError(problem)
        return self


class GpuNodesConfig(NodeScaling):
    """The EFA GPU node group: one AZ, placement as the capacity needs, prefill and decode nodes."""

    instance_type: str = Field(description="An EFA GPU instance type from llm_pd_eks/catalog.py.")
    availability_zone: str = Field(
        description="The one AZ of every GPU node (one cluster placement group); one of network.availabilityZones.",
    )
    min_size: int = Field(
        default=2,
        ge=0,
        description="Fewest GPU nodes; at least 2 (prefill and decode run on separate nodes); "
        "0 allowed (with desiredSize 0) on a Capacity Block, which launches nothing before it starts.",
    )
    desired_size: int = Field(default=2, ge=0, description="GPU nodes to start with.")
    max_size: int = Field(
        default=2,
        ge=1,
        le=MAX_NODES_PER_NODE_GROUP,
        description="Most GPU nodes; prefill plus decode nodes at maxReplicas must fit.",
    )
    # Every catalog GPU type has instance-store NVMe, which nodeadm RAID0s and bind-mounts over
    # /var/lib/kubelet, /var/lib/containerd, /var/lib/soci-snapshotter-grpc and /var/log/pods
    # (awslabs/amazon-eks-ami v20260724, templates/al2023/runtime/bin/setup-local-disks lines 95-110):
    # images, the weights cache (pod volumes) and pod logs live there. The root keeps the OS, whose AMI
    # volume is 20 GiB (same tag, templates/al2023/template.json `ami_block_device_mappings`), and
    # system logs; 100 GiB is that with ample headroom, not the 500 GiB images and weights would need.
    disk_size_gib: int = Field(
        default=100,
        ge=100,
        le=EBS_GP3_MAX_GIB,
        description="Root volume, GiB: the OS and system logs; images, weights and pod logs live on the "
        "instance-store NVMe RAID0.",
    )
    capacity: GpuCapacity = Field(
        default="onDemand",
        description="`onDemand` (the program's own cluster placement group), `{reservationId: cr-…}` (targeted "
        "ODCR; add `placementGroup: <name>` when it was created in a cluster placement group, which the nodes "
        "then launch into) or `{capacityBlockId: cr-…}` (Capacity Block for ML: no placement group)",
    )
    template_change: Optional[Literal["blueGreen", "recreate"]] = Field(
        default=None,
        description="How a change of the GPU launch template reaches the nodes (never as EKS's in-place roll, "
        "which the one-pod disruption budgets fail). `blueGreen`: a new node group is created next to the "
        "old, which is deleted at the end of `up` (extra GPU nodes while both run). `recreate`: the old "
        "group is deleted first (no extra nodes, serving stops until the new nodes are up). "
        "Default: blueGreen on demand, recreate on an ODCR or Capacity Block (a fully used reservation "
        "has no room for a second group)",
    )
    # The image and weights land on the instance-store RAID0 where the type has one; the root volume
    # still holds the OS and anything else, so its throughput is raised over gp3's 125 MiB/s baseline.
    root_volume_iops: int = Field(
        default=6000, ge=3000, le=80000, description="provisioned IOPS of the gp3 root volume"
    )
    root_volume_throughput_mibps: int = Field(
        default=500, ge=125, le=2000, description="provisioned throughput (MiB/s) of the gp3 root volume"
    )

    @model_validator(mode="after")
    def _gp3(self) -> "GpuNodesConfig":
        problem = gp3_problem(self.root_volume_iops, self.root_volume_throughput_mibps, self.disk_size_gib)
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("min_size")
    @classmethod
    def _two_nodes(cls, value: int) -> int:
        # Prefill and decode run on separate nodes, so the group can never be smaller than two; 0
        # (nothing at all) is for a Capacity Block only, checked with the capacity in _zero_nodes.
        if value == 1:
            raise ValueError(f"minSize is {value}: prefill and decode need separate GPU nodes, so at least 2")
        return value

    @model_validator(mode="after")
    def _zero_nodes(self) -> "GpuNodesConfig":
        # EKS asks for node groups on a Capacity Block to scale to 0 around its window
        # (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html, "Considerations").
        if self.min_size == 0 and not isinstance(self.capacity, CapacityBlock):
            raise ValueError(
                "minSize is 0: prefill and decode need separate GPU nodes, so at least 2 "
                "(only a Capacity Block may scale to 0)"
            )
        return self

    def roll(self) -> Literal["blueGreen", "recreate"]:
        """How a launch-template change replaces the GPU node group (templateChange or its default)."""
        if self.template_change is not None:
            return self.template_change
        return "blueGreen" if self.capacity == "onDemand" else "recreate"

    def roll_surge(self) -> int:
        """GPU nodes a launch-template change needs on top of the running group: blue/green starts the
        new group at desiredSize next to the old one (up to maxSize); recreate needs none."""
        return self.desired_size if self.roll() == "blueGreen" else 0

    @field_validator("instance_type")
    @classmethod
    def _efa_type(cls, value: str) -> str:
        if value not in GPU_INSTANCE_TYPES:
            raise ValueError(unsupported_type(clip(value)))
        return value


# --- serving layer: device plugins, KubeRay, the prefill/decode RayService -------------

# vLLM's default gpu_memory_utilization: the engine budgets 90% of each GPU, and the weights must
# fit inside that budget with room left for the KV cache.
GPU_MEMORY_BUDGET = 0.9

# ECR image URI: <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>:<tag>
_ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z]{2}(-gov)?-[a-z]+-\d)\.amazonaws\.com(\.cn)?"
    r"/(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?$"
)
# ECR Public (where the AWS Ray LLM DLC is published, llm_pd_eks/serving_image.py):
# public.ecr.aws/<registry alias>/<repository>:<tag>
_ECR_PUBLIC_IMAGE = re.compile(
    r"^public\.ecr\.aws/(?P<alias>[a-z0-9][a-z0-9_-]{1,254})"
    r"/(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?$"
)


class ReplicaGroupConfig(Strict):
    """One side of the prefill/decode split: vLLM tensor parallelism and Serve autoscaling bounds."""

    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        description="GPUs per vLLM replica (a power of two dividing the node's GPUs).",
    )
    min_replicas: int = Field(default=1, ge=1, description="Fewest Serve replicas.")
    max_replicas: int = Field(default=1, ge=1, description="Most Serve replicas (autoscaling bound).")
    # Ray Serve's autoscaling (ray.serve.config.AutoscalingConfig): without these, Ray Serve LLM fills in
    # target_ongoing_requests = 1e9 (ray.llm ... core/server/builder.py DEFAULT_DEPLOYMENT_OPTIONS) and
    # desired replicas never exceed the current count. `make size WRITE=1` writes them from the sizing
    # model's per-replica concurrency (llm_pd_eks/serve_autoscaling.py).
    target_ongoing_requests: float = Field(
        default=16,
        gt=0,
        le=4096,
        description="Serve autoscaling target: ongoing (running + queued) requests per replica; replicas are "
        "added while the average is above it. The per-replica concurrency the sizing model sustains.",
    )
    max_ongoing_requests: int = Field(
        default=32,
        ge=1,
        le=65536,
        description="Most requests one replica takes at a time (Serve back-pressure: the rest wait in the "
        "proxy/handle queue); at least targetOngoingRequests.",
    )
    upscale_delay_s: float = Field(
        default=30,
        ge=0,
        le=3600,
        description="Seconds the load must stay above target before Serve adds replicas (Serve's default: 30).",
    )
    downscale_delay_s: float = Field(
        default=600,
        ge=0,
        le=86400,
        description="Seconds the load must stay below target before Serve removes replicas (Serve's default: 600).",
    )

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
        if self.max_ongoing_requests < self.target_ongoing_requests:
            raise ValueError(
                f"maxOngoingRequests ({self.max_ongoing_requests}) is below targetOngoingRequests "
                f"({self.target_ongoing_requests:g}): a replica could never reach the load Serve scales at; "
                "raise maxOngoingRequests"
            )
        return self

    def replicas_per_node(self, node_gpus: int) -> int:
        """Serve replicas one GPU node holds (a replica's TP group never spans nodes)."""
        return node_gpus // self.tensor_parallel_size

    def nodes(self, replicas: int, node_gpus: int) -> int:
        """GPU nodes (= Ray worker pods: each takes a whole node) that `replicas` replicas need."""
        return math.ceil(replicas / self.replicas_per_node(node_gpus))


class ServingConfig(Strict):
    """The model served by the RayService and how prefill and decode are laid out."""

    model_id: str = Field(description="Hugging Face id of a model in llm_pd_eks/models.py.")
    image: str = Field(
        description="The Ray LLM image (with EFA/libfabric) in ECR or ECR Public (the AWS Ray LLM DLC, "
        "llm_pd_eks/serving_image.py), pinned by a tag other than `latest`.",
    )
    max_model_len: int = Field(
        default=8192,
        ge=256,
        le=MAX_MODEL_LEN,
        description="vLLM max_model_len: longest prompt plus output, tokens.",
    )
    kv_cache_dtype: Literal["auto", "fp8"] = Field(
        default="auto",
        description="KV-cache element type; `auto` is the model dtype (bf16, 2 bytes).",
    )
    prefill: ReplicaGroupConfig = Field(
        default=ReplicaGroupConfig(),
        description="The prefill side: tensorParallelSize, the replica bounds and their Serve autoscaling settings.",
    )
    decode: ReplicaGroupConfig = Field(
        default=ReplicaGroupConfig(),
        description="The decode side: tensorParallelSize, the replica bounds and their Serve autoscaling settings.",
    )
    public_endpoint: bool = Field(
        default=False,
        description="true: an internet-facing NLB open only to endpointSourceRanges; false: a ClusterIP Service only.",
    )
    endpoint_source_ranges: list[str] = Field(
        default_factory=list,
        description="Client CIDRs the public NLB admits (the Service's loadBalancerSourceRanges); required with "
        "publicEndpoint (the endpoint has no authentication; without them the NLB admits 0.0.0.0/0).",
    )
    ready_timeout_minutes: int = Field(
        default=60,
        ge=5,
        le=360,
        description="How long `up` waits for the RayService: image pull, weights download, warm-up.",
    )
    upgrade_strategy: Literal["Recreate", "NewCluster"] = Field(
        default="Recreate",
        description=(
            "How a change to the Ray cluster (image, pods, worker groups) rolls out. `Recreate`: KubeRay's "
            "`None` strategy, and Pulumi replaces the RayService: downtime while the new cluster loads the "
            "model, no extra GPU nodes. `NewCluster`: KubeRay builds a second full cluster and switches "
            "traffic when it is ready: no downtime, but gpuNodes.maxSize must hold both clusters. "
            "Serve-only changes (serveConfigV2) are applied in place either way."
        ),
    )
    endpoint_name: str = Field(
        default="llm-openai",
        description="Name of the Service KubeRay creates for the endpoint (spec.serveService), a DNS-1035 label",
    )
    endpoint_annotations: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Extra annotations on the endpoint Service (e.g. AWS load-balancer settings); "
            "added to the NLB annotations when publicEndpoint is true"
        ),
    )

    @field_validator("endpoint_source_ranges")
    @classmethod
    def _source_ranges(cls, values: list[str]) -> list[str]:
        for value in values:
            if _network(value).prefixlen == 0:
                raise ValueError(
                    f"{value} admits every address; the endpoint has no authentication, so list the clients' CIDRs"
                )
        return values

    @model_validator(mode="after")
    def _public_needs_ranges(self) -> "ServingConfig":
        # The cloud provider opens an NLB to 0.0.0.0/0 when a Service names no source ranges
        # (kubernetes/cloud-provider service/helpers GetLoadBalancerSourceRanges).
        if self.public_endpoint and not self.endpoint_source_ranges:
            raise ValueError(
                "endpointSourceRanges: publicEndpoint is true but no source ranges are set; the "
                "OpenAI endpoint has no authentication, and an NLB without ranges admits 0.0.0.0/0; "
                "list the clients' CIDRs or set publicEndpoint: false"
            )
        if self.endpoint_source_ranges and not self.public_endpoint:
            raise ValueError(
                "endpointSourceRanges: set, but publicEndpoint is false (a ClusterIP Service has no "
                "load balancer to restrict); remove them or set publicEndpoint: true"
            )
        return self

    @field_validator("endpoint_name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        # Service names are DNS-1035 labels (Kubernetes refuses anything else at apply time).
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", value):
            raise ValueError(f"{value!r} is not a DNS-1035 label (lower case letters, digits, '-'; at most 63)")
        return value

    @field_validator("model_id")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in MODELS:
            raise ValueError(
                f"{shown(value)} is not a model this project knows; choose one of {', '.join(sorted(MODELS))}"
            )
        return value

    @model_validator(mode="after")
    def _within_native_context(self) -> "ServingConfig":
        native = NATIVE_CONTEXT.get(self.model_id)
        if native is not None and self.max_model_len > native:
            raise ValueError(
                f"maxModelLen {self.max_model_len} is above {self.model_id}'s native context of {native} tokens "
                "(max_position_embeddings in its config.json, no rope scaling added); vLLM refuses it"
            )
        return self

    @field_validator("image")
    @classmethod
    def _pinned_ecr_image(cls, value: str) -> str:
        match = _ECR_IMAGE.match(value) or _ECR_PUBLIC_IMAGE.match(value)
        if not match:
            raise ValueError(
                f"{shown(value)} is not an ECR image URI such as "
                "'123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.0-py311-cu128' or "
                "'public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0'"
            )
        if not match["tag"]:
            raise ValueError(f"{shown(value)} has no tag; pin the image with an explicit tag")
        if match["tag"] == "latest":
            raise ValueError(f"{shown(value)} uses the 'latest' tag; pin a version tag so up and preview agree")
        return value

    @property
    def kv_cache_dtype_bytes(self) -> int:
        return 1 if self.kv_cache_dtype == "fp8" else 2

    def groups(self) -> dict[str, ReplicaGroupConfig]:
        """The two sides by role name, the name the serve config and the Ray worker groups use."""
        return {"prefill": self.prefill, "decode": self.decode}


class KubeRayConfig(Strict):
    """The KubeRay operator chart (https://ray-project.github.io/kuberay-helm/)."""

    chart_version: str = Field(default="1.7.0", description="kuberay-operator Helm chart version, a 1.7.x release.")

    @field_validator("chart_version")
    @classmethod
    def _v1_7(cls, value: str) -> str:
        # the RayService fields used here (and the CRDs vendored in tests/data/kuberay) are those of KubeRay 1.7
        if not re.fullmatch(r"1\.7\.\d+", value):
            raise ValueError(f"{shown(value)} is not a 1.7.x release of the kuberay-operator chart")
        return value


class DevicePluginsConfig(Strict):
    """Chart versions of the NVIDIA and the AWS EFA device plugins."""

    nvidia_chart_version: str = Field(
        default="0.20.0",
        description="nvidia-device-plugin chart version (https://nvidia.github.io/k8s-device-plugin).",
    )
    efa_chart_version: str = Field(
        default="v0.5.30",
        description="aws-efa-k8s-device-plugin chart version (https://aws.github.io/eks-charts; "
        "v0.5.30 ships app v0.5.20).",
    )

    @field_validator("nvidia_chart_version", "efa_chart_version")
    @classmethod
    def _pinned(cls, value: str) -> str:
        return exact_chart_version(value, "0.20.0")


# --- observability: Prometheus, Grafana, DCGM exporter, alert thresholds -------------------


class SnsSubscriptionConfig(Strict):
    """One subscription of the alert topic (SNS Subscribe: Protocol and Endpoint)."""

    protocol: Literal["email", "email-json", "https", "http", "sms", "sqs", "lambda"] = Field(
        description="SNS protocol of the subscription (email needs the recipient to confirm)."
    )
    endpoint: str = Field(min_length=1, description="Address, URL, phone number or ARN the topic delivers to.")


class AlertingConfig(Strict):
    """Where alerts go: routing by severity, grouping, inhibition (llm_pd_eks/alerts.py)."""

    receiver: Literal["sns", "webhook"] = Field(
        default="sns",
        description="sns: an SNS topic this program creates, with snsSubscriptions; webhook: the URL in the "
        "Pulumi secret alertWebhookUrl (Slack, PagerDuty Events, any HTTP receiver).",
    )
    sns_subscriptions: list[SnsSubscriptionConfig] = Field(
        default_factory=list, description="Subscriptions of the alert topic (receiver sns)."
    )
    runbook_base_url: str = Field(
        default="README.md",
        min_length=1,
        description="Where the README can be read (e.g. https://github.com/<org>/<repo>/blob/main/README.md); "
        "every alert's runbook_url is this plus its runbook anchor.",
    )
    group_wait: str = Field(
        default="30s",
        pattern=r"^\d+[smh]$",
        description="How long a new alert group waits for more alerts before notifying.",
    )
    group_interval: str = Field(
        default="5m",
        pattern=r"^\d+[smh]$",
        description="How long before notifying about new alerts in a notified group.",
    )
    critical_repeat_interval: str = Field(
        default="1h", pattern=r"^\d+[smh]$", description="How often a still-firing critical alert is sent again."
    )
    warning_repeat_interval: str = Field(
        default="12h", pattern=r"^\d+[smh]$", description="How often a still-firing warning is sent again."
    )


class ObservabilityConfig(Strict):
    """What watches the serving layer: kube-prometheus-stack, the DCGM exporter and the alert thresholds."""

    enabled: bool = Field(
        default=True,
        description="Deploy Prometheus, Grafana, the DCGM exporter, scrape configs, dashboards and alerts.",
    )
    kube_prometheus_stack_chart_version: str = Field(
        default="88.5.3",
        description="kube-prometheus-stack chart version (https://prometheus-community.github.io/helm-charts).",
    )
    dcgm_exporter_chart_version: str = Field(
        default="4.8.2", description="dcgm-exporter chart version (https://nvidia.github.io/dcgm-exporter/helm-charts)."
    )
    retention: str = Field(
        default="15d", pattern=r"^\d+[hdw]$", description="How long Prometheus keeps samples (e.g. 15d)."
    )
    ttft_slo_seconds: float = Field(
        default=2.5, description="Time-to-first-token SLO per phase; must be a bucket bound of vLLM's TTFT histogram."
    )
    itl_slo_seconds: float = Field(
        default=0.1, description="Inter-token latency SLO per phase; must be a bucket bound of vLLM's ITL histogram."
    )
    slo_objective: float = Field(
        default=0.99, gt=0.5, lt=1.0, description="Fraction of requests that must meet each latency SLO."
    )
    kv_cache_full_ratio: float = Field(
        default=0.9, gt=0.0, le=1.0, description="Decode KV-cache usage (0..1) above which the cache counts as full."
    )
    kv_throughput_floor_fraction: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="KV throughput floor as a fraction of the GPU type's reference NIXL-over-EFA throughput.",
    )
    pending_minutes: int = Field(
        default=15, ge=1, le=240, description="Minutes a Ray pod may stay Pending before the replicas-pending alert."
    )
    alerting: AlertingConfig = Field(
        default_factory=AlertingConfig, description="Alert delivery: receiver, subscriptions, grouping intervals."
    )
    prometheus_active_series: int = Field(
        default=300_000,
        ge=10_000,
        le=20_000_000,
        description="Expected active series (check `prometheus_tsdb_head_series`); sizes Prometheus's volume "
        "with the retention and the scrape interval.",
    )
    grafana_volume_gib: int = Field(default=10, ge=1, le=1000, description="Grafana's gp3 volume, GiB.")

    @field_validator("kube_prometheus_stack_chart_version", "dcgm_exporter_chart_version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return exact_chart_version(value, "88.5.3")

    @field_validator("ttft_slo_seconds")
    @classmethod
    def _ttft_bucket(cls, value: float) -> float:
        return _bucket_bound(value, TTFT_BUCKETS, "TTFT")

    @field_validator("itl_slo_seconds")
    @classmethod
    def _itl_bucket(cls, value: float) -> float:
        return _bucket_bound(value, ITL_BUCKETS, "inter-token latency")


def _bucket_bound(value: float, buckets: tuple[float, ...], what: str) -> float:
    # `le="<slo>"` must name a real bucket, or the SLO series is empty and the alert can never fire.
    if float(value) not in buckets:
        raise ValueError(
            f"{value} is not a bucket bound of vLLM's {what} histogram; choose one of "
            + ", ".join(f"{b:g}" for b in buckets)
        )
    return float(value)


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
        if not re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d", value):
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
            if instance.gpus % tp:
                problems.append(f"{key}: {tp} does not divide the {instance.gpus} GPU(s) of a {instance.name} node")
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
        # without it the transfer cannot start (see the catalog's efa_rdma_read).
        if not instance.efa_rdma_read:
            capable = sorted(t.name for t in GPU_INSTANCE_TYPES.values() if t.efa_rdma_read)
            problems.append(
                f"gpuNodes.instanceType: {instance.name} has no GPUDirect RDMA over EFA (no RDMA read), and the "
                f"serving layer moves the KV cache with NIXL over LIBFABRIC, which requires it; choose one of "
                f"{', '.join(capable)}"
            )
        # KubeRay's NewCluster upgrade starts a second RayCluster (its worker groups at `replicas`,
        # i.e. at their minimum) while the old one still serves, possibly at its maximum.
        groups = self.serving.groups().values()
        divisible = all(instance.gpus % g.tensor_parallel_size == 0 for g in groups)  # else reported above
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
        if region and not (az.startswith(region) and _AZ_SUFFIX.match(az[len(region) :]))
    ]
    gpu_az = gpu.get("availabilityZone") if isinstance(gpu, dict) else None
    if isinstance(gpu_az, str) and gpu_az not in azs:
        problems.append(
            f"{PROJECT}:gpuNodes.availabilityZone: {shown(gpu_az)} is not one of the network's availability zones "
            f"({clip(', '.join(azs))})"
        )
    return problems


def _network(value: str) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{shown(value)} is not a valid CIDR block ({shown(str(exc))})") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise ValueError(f"{shown(value)} is not an IPv4 CIDR block")
    special = _special_purpose(net)
    if special:
        raise ValueError(
            f"{value} is a {special} block, which AWS does not route; use a private block such as 10.0.0.0/16"
        )
    return net


class ConfigError(Exception):
    """Every problem of a stack's config, each naming its key."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in the stack config:\n" + "\n".join(f"  - {p}" for p in problems))


def _known_keys() -> list[str]:
    return [field.alias or name for name, field in StackConfig.model_fields.items() if name != "region"]


def _location(error: Mapping[str, Any]) -> str:
    parts = [
        shown(p, 60) if not isinstance(p, (str, int)) else str(p)[:60]
        for p in error["loc"]
        if not str(p).startswith("function-after")
    ]
    if not parts:
        return PROJECT
    if parts == ["region"]:  # the model's `region` is the AWS provider's key
        return "aws:region"
    return f"{PROJECT}:{parts[0]}" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts[1:])


def _describe(error: Mapping[str, Any]) -> str:
    where = _location(error)
    if error["type"] == "extra_forbidden":
        key = str(error["loc"][-1])
        siblings = _known_keys() if len(error["loc"]) == 1 else []
        hint = difflib.get_close_matches(key[:64], siblings, n=1)
        suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
        return f"{where}: unknown key{suffix}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] not in ("value_error", "missing", "assertion_error") and "input" in error:
        message += f" (got {shown(error['input'], 60)})"  # e.g. `maxSize: true` -> a valid integer (got True)
    # A model-level check reports several problems, one a line; at the top level each names its key.
    return "\n".join(_at(where, part) for part in message.split("\n"))


def _at(where: str, part: str) -> str:
    """One problem of a model-level check at `where`; a leading `key: ` names a field below it."""
    if where == PROJECT:
        return f"{PROJECT}:{part}"
    field = re.match(r"([a-z][A-Za-z]*): ", part)
    return f"{where}.{field[1]}: {part[field.end() :]}" if field else f"{where}: {part}"


def _parse_value(raw: Any) -> Any:
    """Config values arrive as strings; objects, lists, numbers and booleans as JSON text."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


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


def validate_stack_config(
    project_values: dict[str, Any], region: Optional[str], secret_keys: Iterable[str] = ()
) -> StackConfig:
    """Validate raw project-namespace values (keys without the `project:` prefix).

    `secret_keys` are the full keys the engine marks secret (`project:key`); a secret-only key set
    in plain text is refused, so it never reaches state or a manifest unencrypted.
    """
    data = {k: _parse_value(v) for k, v in project_values.items()}
    has_hf_token = HF_TOKEN_KEY in data
    has_webhook_url = ALERT_WEBHOOK_KEY in data
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
    if "region" in data:  # would be silently replaced by aws:region below
        data.pop("region")
        problems.append(
            f"{PROJECT}:region: unknown key; the region is the AWS provider's (pulumi config set aws:region us-west-2)"
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
    if config is not None:
        problems.extend(gated_model_problems(config, has_hf_token))
        if config.observability.alerting.receiver == "webhook" and not has_webhook_url:
            problems.append(
                f"{PROJECT}:{ALERT_WEBHOOK_KEY}: not set, but observability.alerting.receiver is "
                f"webhook; set it with `pulumi config set --secret {ALERT_WEBHOOK_KEY} https://...`"
            )
    if problems or config is None:
        raise ConfigError(problems)
    return config


def validate_engine_config(
    config: Mapping[str, Any], secret_keys: Iterable[str] = (), stack: Optional[str] = None
) -> StackConfig:
    """Validate config in the engine's form: `project:key` -> value (objects as JSON text), `aws:region`.

    The one entry point for the program (from the runtime) and the tools (from a stack file).
    Beyond the project's keys it refuses what the engine would pass on silently: keys of other
    namespaces, AWS credentials in plain text, and (given `stack`) a stack name that makes an
    invalid EKS cluster name. Every problem is reported at once.
    """
    problems = engine_problems(config, secret_keys, stack)
    prefix = f"{PROJECT}:"
    values = {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}
    region = config.get("aws:region")
    try:
        validated = validate_stack_config(values, str(region) if region else None, secret_keys)
    except ConfigError as error:
        raise ConfigError(problems + error.problems) from None
    if problems:
        raise ConfigError(problems)
    return validated


def aws_provider_keys() -> frozenset[str]:
    """The `aws:` config keys the AWS provider reads, from pulumi_aws's own config module.

    `pulumi_aws.config.vars` has one property per provider setting (`access_key` reads
    `aws:accessKey`); their camelCase names are the keys. A key outside them (`aws:regoin`) would be
    ignored by the provider without a word.
    """
    from pulumi_aws.config import vars as aws_vars

    return frozenset(
        to_camel(name) for name, member in vars(aws_vars._ExportableConfig).items() if isinstance(member, property)
    )


def engine_problems(
    config: Mapping[str, Any], secret_keys: Iterable[str] = (), stack: Optional[str] = None
) -> list[str]:
    """What is wrong outside the project's own keys (namespaces, AWS credentials, the stack name)."""
    problems = []
    secret = set(secret_keys)
    for key in config:
        namespace = str(key).split(":", 1)[0]
        if namespace not in KNOWN_NAMESPACES:
            hint = difflib.get_close_matches(namespace[:64], KNOWN_NAMESPACES, n=1)
            problems.append(
                f"{clip(str(key), 60)}: unknown namespace {shown(namespace, 40)}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; this program reads only {' and '.join(n + ':' for n in KNOWN_NAMESPACES)} keys"
            )
    aws_keys = [str(k)[len("aws:") :] for k in config if str(k).startswith("aws:") and k != "aws:region"]
    if aws_keys:
        known = aws_provider_keys()
        for key in aws_keys:
            if key not in known:
                hint = difflib.get_close_matches(key[:64], sorted(known), n=1)
                problems.append(
                    f"aws:{clip(key, 60)}: not a setting of the AWS provider"
                    + (f" (did you mean 'aws:{hint[0]}'?)" if hint else "")
                    + "; it would be ignored"
                )
    for key in AWS_SECRET_ONLY_KEYS:
        if key in config and key not in secret:
            problems.append(
                f"{key}: a credential set in plain text; store it encrypted with "
                f"`pulumi config set --secret {key} <value>` (or use an AWS profile)"
            )
    if stack is not None and not EKS_CLUSTER_NAME.match(stack_cluster_name(stack)):
        problems.append(
            f"stack name {shown(stack, 60)} makes the EKS cluster name {shown(stack_cluster_name(stack), 60)}, "
            "which EKS refuses (letters, digits, '-' and '_', at most 100 characters); rename the stack "
            "(`pulumi stack rename`)"
        )
    return problems


def load_stack_config() -> StackConfig:
    """Read and validate the running stack's config (raises ConfigError listing every problem)."""
    from llm_pd_eks.pulumi_sdk import runtime_config

    merged: dict[str, Any] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    secret_keys = set(runtime_config.get_config_secret_keys_env())
    secret_keys.update(k for k in merged if runtime_config.is_config_secret(k))
    import pulumi

    return validate_engine_config(merged, secret_keys, stack=pulumi.get_stack())
