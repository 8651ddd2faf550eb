"""The serving layer's sections: `serving` (the prefill/decode RayService, llm_pd_eks/ray_service.py),
`kuberay` (llm_pd_eks/kuberay.py) and `devicePlugins` (llm_pd_eks/device_plugins.py)."""

from __future__ import annotations

import math
import re
from typing import Literal, Optional

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from .. import versions
from ..engine_start import RAY_SERVE_LLM_ENGINE_START_TIMEOUT_S, engine_start_timeout_problem
from ..image_ref import parse_image
from ..models import MODELS, NATIVE_CONTEXT
from .base import Strict, exact_chart_version, ipv4_network, shown
from .routing import RoutingConfig

# The role name of the one LLM group in mode `aggregated` (its Ray worker group, Serve deployment resource
# and pod label); prefill and decode are the roles of mode `disaggregated`.
AGGREGATED_ROLE = "aggregated"

# The longest native context of the models (llm_pd_eks/data/models/: max_position_embeddings of their
# config.json); vLLM refuses a max_model_len beyond the model's.
MAX_MODEL_LEN = max(NATIVE_CONTEXT.values())


# vLLM's default gpu_memory_utilization: the engine budgets 90% of each GPU, and the weights must
# fit inside that budget with room left for the KV cache.
GPU_MEMORY_BUDGET = 0.9

# serving.weightsS3Uri: s3://<bucket>/<prefix>. Bucket names: 3-63 characters, lower-case letters,
# digits, dots and hyphens, starting and ending with a letter or digit (Amazon S3 User Guide, "General
# purpose bucket naming rules"). The prefix must be there (the workers' read access is scoped to it)
# and carries no IAM wildcard (`*`, `?`), which would widen that scope.
_S3_WEIGHTS_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<prefix>[^*?\s]+?)/?$")


def s3_bucket_and_prefix(uri: str) -> tuple[str, str]:
    """(bucket, prefix without a trailing slash) of a valid serving.weightsS3Uri."""
    match = _S3_WEIGHTS_URI.match(uri)
    if not match:
        raise ValueError(f"{shown(uri)} is not s3://<bucket>/<prefix>")
    return match["bucket"], match["prefix"]


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
    # model's per-replica concurrency (llm_pd_eks_tools/size.py `autoscaling_values`).
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

    def tensor_parallel_problem(self, node_gpus: int, node_type: str) -> Optional[str]:
        """Why this side's TP group cannot sit on one node of `node_type`, if it cannot: a replica's
        TP group never spans nodes, so its size must divide the node's GPUs."""
        tp = self.tensor_parallel_size
        return f"{tp} does not divide the {node_gpus} GPU(s) of a {node_type} node" if node_gpus % tp else None

    def replicas_per_node(self, node_gpus: int) -> int:
        """Serve replicas one GPU node holds (a replica's TP group never spans nodes)."""
        return node_gpus // self.tensor_parallel_size

    def nodes(self, replicas: int, node_gpus: int) -> int:
        """GPU nodes (= Ray worker pods: each takes a whole node) that `replicas` replicas need."""
        return math.ceil(replicas / self.replicas_per_node(node_gpus))


class ServingConfig(Strict):
    """The model served by the RayService and how prefill and decode are laid out."""

    model_id: str = Field(description="Hugging Face id of a model with a file in llm_pd_eks/data/models/.")
    image: str = Field(
        description="The Ray LLM image (with EFA/libfabric) in ECR or ECR Public (the AWS Ray LLM DLC, "
        "llm_pd_eks/versions.py): `repo:tag`, `repo:tag@sha256:<digest>` or `repo@sha256:<digest>`, a tag other "
        "than `latest`; the preview warns on a tag without digest, the deploy gate refuses one for a protected "
        "(prod) stack (`make resolve-image` pins it).",
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
    mode: Literal["disaggregated", "aggregated"] = Field(
        default="disaggregated",
        description="`disaggregated`: Ray Serve LLM's `build_pd_openai_app`, prefill and decode on their own "
        "worker groups, the KV cache moved over NIXL (`prefill` and `decode` below). `aggregated`: Ray Serve "
        "LLM's `build_openai_app`, one worker group whose vLLM engines prefill and decode their own requests, "
        "no KV transfer (`aggregated` below; `prefill`, `decode` and routing.decodeOnlyBelowTokens unused). "
        "`make size` says which pays for the stack's workload.",
    )
    aggregated: ReplicaGroupConfig = Field(
        default=ReplicaGroupConfig(),
        description="With mode `aggregated`: the one LLM group's tensorParallelSize, replica bounds and Serve "
        "autoscaling settings; it routes by prompt prefix where routing.prefixAware.decode is on (the role the "
        "ingress calls).",
    )
    prefill: ReplicaGroupConfig = Field(
        default=ReplicaGroupConfig(),
        description="The prefill side: tensorParallelSize, the replica bounds and their Serve autoscaling settings.",
    )
    decode: ReplicaGroupConfig = Field(
        default=ReplicaGroupConfig(),
        description="The decode side: tensorParallelSize, the replica bounds and their Serve autoscaling settings.",
    )
    routing: RoutingConfig = Field(
        default=RoutingConfig(),
        description="Request routing: prefix-cache-aware routing per role, and the prompt length below which "
        "a request skips the prefill hop (llm_pd_eks/config/routing.py).",
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
    weights_s3_uri: Optional[str] = Field(
        default=None,
        description=(
            "s3://<bucket>/<prefix> holding the model's Hugging Face snapshot (config.json, tokenizer, "
            "safetensors), in the stack's region. Set: Ray Serve LLM loads the weights from it (model_source) "
            "through the VPC's S3 gateway endpoint, not over the NAT gateway, and the workers get an IRSA role "
            "that may only list and read that prefix. Unset: each GPU node's first start downloads them from "
            "Hugging Face through NAT."
        ),
    )
    engine_start_timeout_s: Optional[int] = Field(
        default=None,
        ge=1,
        le=6 * 3600,
        description=(
            "Seconds Ray Serve LLM lets one vLLM engine start (download, load, warm-up) before it fails the "
            f"replica (RAYLLM_ENGINE_START_TIMEOUT_S). Unset: Ray Serve LLM's own default, "
            f"{RAY_SERVE_LLM_ENGINE_START_TIMEOUT_S} s, or the model's planned start where that is longer "
            "(llm_pd_eks/engine_start.py); never below either."
        ),
    )
    upgrade_strategy: Literal["Recreate", "NewCluster"] = Field(
        default="Recreate",
        description=(
            "How a change to the Ray cluster (image, pods, worker groups) rolls out. `Recreate`: KubeRay's "
            "`None` strategy, and Pulumi replaces the RayService: downtime while the new cluster loads the "
            "model, no extra GPU nodes. `NewCluster`: KubeRay builds a second full cluster and switches "
            "traffic when it is ready: no downtime, but gpuNodes.maxSize must hold both clusters. "
            "Serve-only changes (serveConfigV2) are applied in place either way; a change of the endpoint "
            "(publicEndpoint, endpointSourceRanges, endpointName, endpointAnnotations) replaces the RayService "
            "under either, with downtime (KubeRay does not update an existing endpoint Service)."
        ),
    )
    gcs_fault_tolerance: bool = Field(
        default=False,
        description="Keep the Ray head's GCS state in an external Valkey (ElastiCache, private subnets, TLS, an "
        "AUTH token kept a Pulumi secret; llm_pd_eks/gcs_store.py), so a restarted head keeps the Ray cluster "
        "and serving instead of starting an empty one. false: the state lives in the head's memory.",
    )
    gcs_store_node_type: str = Field(
        default="cache.t4g.small",
        pattern=r"^cache\.[a-z0-9]+\.[a-z0-9]+$",
        description="ElastiCache node type of the GCS store's primary and replica (with gcsFaultTolerance).",
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
            if ipv4_network(value).prefixlen == 0:
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

    @field_validator("weights_s3_uri")
    @classmethod
    def _s3_prefix(cls, value: Optional[str]) -> Optional[str]:
        if value is None:
            return value
        if not _S3_WEIGHTS_URI.match(value) or "//" in value[len("s3://") :]:
            raise ValueError(
                f"{shown(value)} is not s3://<bucket>/<prefix> (a valid bucket name and a prefix without "
                "'*' or '?'); the workers' read access is scoped to that prefix"
            )
        bucket, prefix = s3_bucket_and_prefix(value)
        return f"s3://{bucket}/{prefix}"

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
        native = NATIVE_CONTEXT[self.model_id]  # model_id is one of MODELS (checked first), each with a context
        if self.max_model_len > native:
            raise ValueError(
                f"maxModelLen {self.max_model_len} is above {self.model_id}'s native context of {native} tokens "
                "(max_position_embeddings in its config.json, no rope scaling added); vLLM refuses it"
            )
        return self

    @model_validator(mode="after")
    def _aggregated_has_no_prefill_hop(self) -> "ServingConfig":
        if self.aggregated_mode and self.routing.decode_only_below_tokens is not None:
            raise ValueError(
                "routing.decodeOnlyBelowTokens is set but mode is aggregated: every request is already "
                "prefilled where it is decoded; unset it or use mode disaggregated"
            )
        return self

    @model_validator(mode="after")
    def _decode_only_within_context(self) -> "ServingConfig":
        below = self.routing.decode_only_below_tokens
        if below is not None and below >= self.max_model_len:
            raise ValueError(
                f"routing.decodeOnlyBelowTokens {below} is not below maxModelLen {self.max_model_len}: every "
                "request would skip prefill, which is aggregated serving; lower it or unset it"
            )
        return self

    @model_validator(mode="after")
    def _engine_start_not_shortened(self) -> "ServingConfig":
        if self.engine_start_timeout_s is not None:
            problem = engine_start_timeout_problem(self.model_id, self.engine_start_timeout_s)
            if problem:
                raise ValueError(problem)
        return self

    @field_validator("image")
    @classmethod
    def _pinned_ecr_image(cls, value: str) -> str:
        ref = parse_image(value)
        if ref is None:
            raise ValueError(
                f"{shown(value)} is not an ECR image URI such as "
                "'123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.0-py311-cu128' or "
                f"'{versions.DLC_IMAGE_TAG}' (optionally with '@sha256:<64 hex>', or that digest alone)"
            )
        if not ref.tag and not ref.digest:
            raise ValueError(f"{shown(value)} has no tag or digest; pin the image with a tag and its digest")
        if ref.tag == "latest":
            raise ValueError(f"{shown(value)} uses the 'latest' tag; pin a version tag so up and preview agree")
        return value

    @property
    def kv_cache_dtype_bytes(self) -> int:
        return 1 if self.kv_cache_dtype == "fp8" else 2

    @property
    def aggregated_mode(self) -> bool:
        return self.mode == "aggregated"

    def groups(self) -> dict[str, ReplicaGroupConfig]:
        """The LLM groups by role name, the name the serve config and the Ray worker groups use: prefill
        and decode, or (mode `aggregated`) the one `aggregated` group."""
        if self.aggregated_mode:
            return {AGGREGATED_ROLE: self.aggregated}
        return {"prefill": self.prefill, "decode": self.decode}

    def ingress_facing_groups(self) -> list[ReplicaGroupConfig]:
        """The groups the OpenAI ingress hands requests to: decode, or the one aggregated group."""
        return [self.aggregated] if self.aggregated_mode else [self.decode]


class KubeRayConfig(Strict):
    """The KubeRay operator chart (https://ray-project.github.io/kuberay-helm/)."""

    chart_version: str = Field(
        default=versions.KUBERAY_CHART_VERSION,
        description=f"kuberay-operator Helm chart version, a {versions.KUBERAY_MINOR}.x release "
        "(llm_pd_eks/versions.py).",
    )

    @field_validator("chart_version")
    @classmethod
    def _operator_minor(cls, value: str) -> str:
        # the RayService fields used here (and the CRDs vendored in tests/data/kuberay) are those of the
        # KubeRay minor llm_pd_eks/versions.py records
        if not re.fullmatch(re.escape(versions.KUBERAY_MINOR) + r"\.\d+", value):
            raise ValueError(
                f"{shown(value)} is not a {versions.KUBERAY_MINOR}.x release of the kuberay-operator chart"
            )
        return value


class DevicePluginsConfig(Strict):
    """Chart versions of the NVIDIA and the AWS EFA device plugins."""

    nvidia_chart_version: str = Field(
        default=versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
        description="nvidia-device-plugin chart version (https://nvidia.github.io/k8s-device-plugin).",
    )
    efa_chart_version: str = Field(
        default=versions.EFA_DEVICE_PLUGIN_CHART_VERSION,
        description="aws-efa-k8s-device-plugin chart version (https://aws.github.io/eks-charts; "
        "v0.5.30 ships app v0.5.20).",
    )

    @field_validator("nvidia_chart_version", "efa_chart_version")
    @classmethod
    def _pinned(cls, value: str) -> str:
        return exact_chart_version(value, "0.20.0")
