"""What `make verify` reports and what it checks against: a check's result, the expected cluster (from
the stack config and the GPU catalog), and what earlier checks hand to later ones."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from llm_pd_eks.serving_names import ROLES
from llm_pd_eks_sizing.model import kv_rank_floor_gbps

if TYPE_CHECKING:  # the config and the catalog are read when a run builds its Expected, not on import
    from llm_pd_eks.catalog import GpuInstanceType
    from llm_pd_eks.config import StackConfig


class Status(enum.StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    UNVERIFIED = "UNVERIFIED"


@dataclass
class FabricProbe:
    """What FABRIC_PROBE printed in one pod."""

    processes: dict[str, str] = field(default_factory=dict)  # pid -> command line, for each plugin user
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # pid -> FI_* variables
    counters: dict[str, int] = field(default_factory=dict)  # sysfs path -> value

    @classmethod
    def parse(cls, text: str) -> "FabricProbe":
        probe = cls()
        for line in text.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "proc":
                pid, _, command = rest.partition(" ")
                probe.processes[pid] = command.strip()
            elif kind == "env":
                pid, _, assignment = rest.partition(" ")
                name, _, value = assignment.partition("=")
                probe.env.setdefault(pid, {})[name] = value
            elif kind == "counter":
                path, _, value = rest.rpartition(" ")
                if value.strip().isdigit():
                    probe.counters[path] = int(value)
        return probe

    def bytes_moved_since(self, before: "FabricProbe") -> int:
        """Bytes the pod's EFA devices counted since `before` (a counter that went down: reset, not counted)."""
        return sum(
            max(0, value - before.counters[path]) for path, value in self.counters.items() if path in before.counters
        )


@dataclass
class Check:
    name: str
    status: Status
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Expected:
    """What the stack config and the GPU catalog say the cluster must look like."""

    gpu_nodes: int
    availability_zone: str
    instance: GpuInstanceType
    hugepages_mib: Optional[int]
    model_id: Optional[str]
    endpoint_service: Optional[str]  # KubeRay's serve Service (`spec.serveService.metadata.name`)
    floor_gbps: float
    admission_mode: str = "deny"  # admissionPolicy.mode: the GPU-pod admission policy's binding actions
    kv_bytes_per_token: Optional[float] = None  # the traffic gate's KV floor per canary (llm_pd_eks/models.py)
    nixl_backend: str = "LIBFABRIC"  # the backend the decode side must log: EFA's

    @classmethod
    def from_config(cls, config: StackConfig, instance: GpuInstanceType) -> "Expected":
        return cls(
            gpu_nodes=config.gpu_nodes.min_size,  # at least: Cluster Autoscaler owns the count above it
            availability_zone=config.gpu_nodes.availability_zone,
            instance=instance,
            hugepages_mib=catalog_hugepages_mib(instance),
            model_id=config.serving.model_id if config.serving else None,
            endpoint_service=config.serving.endpoint_name if config.serving else None,
            # per rank, from the one KV-transfer model (llm_pd_eks_sizing/model/: kv_band)
            floor_gbps=kv_rank_floor_gbps(instance, config.observability.kv_throughput_floor_fraction),
            admission_mode=config.admission_policy.mode,
            kv_bytes_per_token=_kv_bytes_per_token(config),
        )


def _kv_bytes_per_token(config: StackConfig) -> Optional[float]:
    """The served model's KV a token at the stack's KV dtype (fp8: 1 byte, auto: the bf16 weights' 2)."""
    from llm_pd_eks.models import MODELS

    if config.serving is None or config.serving.model_id not in MODELS:
        return None
    dtype_bytes = 1 if config.serving.kv_cache_dtype == "fp8" else 2
    return float(MODELS[config.serving.model_id].kv_bytes_per_token(dtype_bytes))


def catalog_hugepages_mib(instance: GpuInstanceType) -> Optional[int]:
    """2 MiB hugepages the catalog says an EFA GPU node reserves (`efa_hugepages_2mi_mib`).

    Read by name so this check starts biting the moment the catalog carries the figure.
    """
    value = getattr(instance, "efa_hugepages_2mi_mib", None)
    return int(value) if value is not None else None


@dataclass
class Context:
    """What earlier checks found that later ones use."""

    pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # role -> worker pods
    completion_seconds: Optional[float] = None
    probes: dict[str, FabricProbe] = field(default_factory=dict)  # pod name -> before the test request
    probe_errors: dict[str, str] = field(default_factory=dict)  # pod name -> why it could not be probed

    def worker_pods(self) -> list[tuple[str, dict[str, Any]]]:
        return [(role, pod) for role in ROLES for pod in self.pods.get(role, [])]


def quantity_mib(value: str) -> float:
    """A Kubernetes memory quantity in MiB (binary and decimal suffixes)."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?|k)?", value.strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    return float(match[1]) * units.get(match[2] or "", 1) / 2**20
