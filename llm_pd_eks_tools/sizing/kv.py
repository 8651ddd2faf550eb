"""The KV-transfer band as sizing shows it; the model itself is the library's (llm_pd_eks/kv_transfer.py)."""

from __future__ import annotations

from typing import Any

# -- the KV-transfer band: the one model, in the library (llm_pd_eks/kv_transfer.py), which the
# program's alerts, the preview and `make verify` use too.
from llm_pd_eks.kv_transfer import (
    NIXL_EFA_EFFICIENCY,
    NIXL_EFA_INTERFACE_GBPS,
    NIXL_EFA_MEASURED_GBPS,
    NIXL_EFA_MEASURED_INTERFACES,
    NIXL_EFA_SOURCE,
    KvBand,
    kv_band,
    kv_rank_floor_gbps,
)

__all__ = [
    "NIXL_EFA_EFFICIENCY",
    "NIXL_EFA_INTERFACE_GBPS",
    "NIXL_EFA_MEASURED_GBPS",
    "NIXL_EFA_MEASURED_INTERFACES",
    "NIXL_EFA_SOURCE",
    "KvBand",
    "kv_band",
    "kv_rank_floor_gbps",
]


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def band_text(band: dict[str, Any]) -> str:
    """One line for a `KvBand.as_dict()`: per rank, line rate · measured (or the TCP failure case) · TCP."""
    head = (
        f"per rank (TP {band['tp']}, {band['interfaces_per_rank']:g} EFA interface(s) of "
        f"{band['interface_gbps']:g} Gbit/s each): "
    )
    line = f"line-rate bound {band['line_rate_gbps']:g} Gbit/s: {_duration(band['line_rate_seconds'])}"
    if band["measured_gbps"] is not None:
        measured = (
            f"NIXL/EFA at {band['efficiency']:.3f} of line rate {band['measured_gbps']:.1f} Gbit/s: "
            f"{_duration(band['measured_seconds'])} ({band['measured_source']})"
        )
    else:
        measured = "NIXL/EFA: impossible on this type (no GPUDirect RDMA)"
    tcp = f"one TCP flow {band['tcp_gbps']:g} Gbit/s: {_duration(band['tcp_seconds'])}"
    if not band["rdma"]:
        tcp += " (the failure case sizing must plan on here)"
    return head + " · ".join([line, measured, tcp])
