"""Moving one request's KV cache from prefill to decode over EFA: the one model of it.

`make size` plans with it, the preview shows its band, the program's KV-throughput alert and
dashboard and `make verify` judge the running stack by its floor (`kv_rank_floor_gbps`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from .catalog import GpuInstanceType
from .models import MODELS, ModelSpec

# The one measured NIXL-over-EFA figure: about 9.6 GB/s (76.8 Gbit/s) for ONE worker (one GPU) driving 4
# EFA interfaces of a p5.48xlarge (ai-dynamo/dynamo PR #7764; the PR
# text was not readable offline). Per interface that is 76.8 / (4 x 100 Gbit/s) = 0.192 of line rate,
# the efficiency every GPUDirect-RDMA type is planned at here (until `make calibrate` measures the
# stack's own with nixlbench).
NIXL_EFA_MEASURED_GBPS = 9.6 * 8
NIXL_EFA_MEASURED_INTERFACES = 4
NIXL_EFA_INTERFACE_GBPS = 100.0  # p5.48xlarge: 32 network cards of 100 Gbit/s (EC2 NetworkCards)
NIXL_EFA_EFFICIENCY = NIXL_EFA_MEASURED_GBPS / (NIXL_EFA_MEASURED_INTERFACES * NIXL_EFA_INTERFACE_GBPS)
NIXL_EFA_SOURCE = "ai-dynamo/dynamo PR #7764: ~9.6 GB/s NIXL over EFA, one worker on 4 EFA interfaces"


@dataclass(frozen=True)
class KvBand:
    """Moving one request's KV cache from a prefill to a decode replica, per TP rank.

    Each of the prefill replica's `tp` ranks moves its 1/tp share of the KV cache over its own EFA
    interfaces (`interfaces_per_rank` = the node's EFA interfaces / its GPUs; a fraction where GPUs
    share one), all ranks at once, so the request's transfer time is one rank's:

    line rate: the rank's interfaces at line rate (the bound no transfer reaches);
    measured: the same at the measured per-interface efficiency (`efficiency`, `measured_source`);
    tcp: one TCP flow per rank, what is left where the type has no GPUDirect RDMA (NIXL's LIBFABRIC
    backend requires it): a failure case, shown as such (`rdma` False), not a plan.
    """

    tokens: int
    bytes: int
    tp: int
    interfaces_per_rank: float
    interface_gbps: float
    rdma: bool
    efficiency: float
    measured_source: str
    tcp_gbps: float
    calibrated: bool = False  # efficiency from calibration/<stack>.yaml (nixlbench) instead of the published figure

    @staticmethod
    def _seconds(num_bytes: float, gbps: float) -> float:
        return num_bytes * 8 / (gbps * 1e9)

    @property
    def rank_bytes(self) -> float:
        return self.bytes / self.tp

    @property
    def line_rate_gbps(self) -> float:
        """One rank's share of line rate, Gbit/s."""
        return self.interfaces_per_rank * self.interface_gbps

    @property
    def measured_gbps(self) -> Optional[float]:
        """One rank's NIXL/EFA throughput at the measured efficiency; None without GPUDirect RDMA."""
        return self.line_rate_gbps * self.efficiency if self.rdma else None

    @property
    def line_rate_seconds(self) -> float:
        return self._seconds(self.rank_bytes, self.line_rate_gbps)

    @property
    def measured_seconds(self) -> Optional[float]:
        gbps = self.measured_gbps
        return None if gbps is None else self._seconds(self.rank_bytes, gbps)

    @property
    def tcp_seconds(self) -> float:
        return self._seconds(self.rank_bytes, self.tcp_gbps)

    @property
    def planning_gbps(self) -> float:
        """Per rank: the measured NIXL/EFA rate, or (no GPUDirect RDMA: the failure case) one TCP flow."""
        gbps = self.measured_gbps
        return gbps if gbps is not None else self.tcp_gbps

    @property
    def planning_basis(self) -> str:
        if not self.rdma:
            return "one TCP flow per rank: this type has no GPUDirect RDMA, NIXL LIBFABRIC cannot run (failure case)"
        where = "calibrated nixlbench" if self.calibrated else "measured"
        return f"{where} NIXL/EFA, {self.efficiency:.3f} of line rate per interface, per TP rank"

    @property
    def planning_seconds(self) -> float:
        return self._seconds(self.rank_bytes, self.planning_gbps)

    def seconds_per_token(self) -> float:
        return self.planning_seconds / max(self.tokens, 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "rank_bytes": self.rank_bytes,
            "line_rate_gbps": self.line_rate_gbps,
            "measured_gbps": self.measured_gbps,
            "line_rate_seconds": self.line_rate_seconds,
            "measured_seconds": self.measured_seconds,
            "tcp_seconds": self.tcp_seconds,
            "planning_gbps": self.planning_gbps,
            "planning_seconds": self.planning_seconds,
            "planning_basis": self.planning_basis,
        }


def kv_band(
    model: ModelSpec,
    tokens: int,
    kv_dtype_bytes: int,
    instance: GpuInstanceType,
    tp: int = 1,
    efficiency: Optional[float] = None,
) -> KvBand:
    """The one KV-transfer model (`make size`, the preview's band and `make verify`'s floor use it).

    `tp`: the prefill replica's tensor-parallel size; `efficiency`: a calibrated per-interface
    efficiency (calibration/<stack>.yaml) in place of the published one.
    """
    return KvBand(
        tokens=int(tokens),
        bytes=model.kv_bytes_per_token(kv_dtype_bytes) * int(tokens),
        tp=int(tp),
        interfaces_per_rank=instance.efa_interfaces / instance.gpus,
        interface_gbps=instance.network_gbps / instance.efa_interfaces,
        rdma=instance.efa_rdma_read,
        efficiency=NIXL_EFA_EFFICIENCY if efficiency is None else efficiency,
        measured_source="calibration (nixlbench)" if efficiency is not None else NIXL_EFA_SOURCE,
        tcp_gbps=float(instance.single_flow_tcp_gbps),
        calibrated=efficiency is not None,
    )


def kv_rank_floor_gbps(instance: GpuInstanceType, fraction: float, efficiency: Optional[float] = None) -> float:
    """Gbit/s per rank below which NIXL is taken to have left EFA: `fraction` of the planned per-rank rate.

    vLLM reports NIXL throughput per rank (NixlKVConnectorStats), the unit `KvBand.planning_gbps` is in.
    """
    any_model = next(iter(MODELS.values()))
    band = kv_band(any_model, 1, 2, instance, 1, efficiency)
    return round(fraction * band.planning_gbps, 3)
