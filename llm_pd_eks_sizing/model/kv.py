"""The KV-transfer band as sizing shows it; the model itself is the library's (llm_pd_eks/kv_transfer.py)."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

# -- the KV-transfer band: the one model, in the library (llm_pd_eks/kv_transfer.py), which the
# program's alerts, the preview and `make verify` use too.
from llm_pd_eks.catalog import GpuInstanceType
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
from llm_pd_eks.models import ModelSpec

VLLM_BLOCK_TOKENS = 16  # vllm/config/cache.py at v0.26.0: CacheConfig.DEFAULT_BLOCK_SIZE

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


# -- KV transfer by message size: nixlbench's LIBFABRIC table and vLLM's KV block layout ------------------
# vLLM's NixlConnector (vllm/distributed/kv_transfer/kv_connector/v1/nixl at v0.26.0) registers each
# layer's K and V caches as regions of whole blocks (CacheConfig.DEFAULT_BLOCK_SIZE = 16 tokens) and the
# decode side READs one request's blocks from each prefill rank in one transfer. A request's per-rank
# message is therefore its blocks x 16 tokens x the rank's share of the KV bytes a token; the rate is
# nixlbench's at that message size, interpolated in log size and log rate between the measured rows.
NIXLBENCH_TABLE = Path(__file__).parent / "data" / "nixlbench-libfabric-p5.json"
NIXLBENCH_SOURCE = (
    "nixlbench LIBFABRIC VRAM->VRAM on p5.48xlarge (aws-samples/awsome-inference "
    "2.projects/dynamo-inference/benchmarks/nixlbench-libfabric/README.md, 2025-11-20)"
)
# the table's GPU share of a p5.48xlarge: 32 EFA interfaces of 100 Gbit/s over 8 GPUs = 50 GB/s
NIXLBENCH_RANK_GBYTES_S = 4 * 100 / 8


def nixlbench_rows(path: Path = NIXLBENCH_TABLE) -> list[tuple[int, float]]:
    """(message bytes, GB/s) rows of the vendored table, smallest first."""
    data = json.loads(Path(path).read_text())
    return sorted((int(r["block_bytes"]), float(r["gbytes_s"])) for r in data["rows"])


@dataclass(frozen=True)
class KvMessage:
    """One request's KV cache as the decode side reads it from one prefill rank."""

    tokens: int
    blocks: int
    rank_bytes: int  # the message: whole blocks, the rank's share of the KV heads
    descriptors: int  # NIXL descriptors: one per block per layer per K and V region

    @classmethod
    def of(cls, model: ModelSpec, tokens: int, kv_dtype_bytes: int, tp: int) -> "KvMessage":
        blocks = math.ceil(max(tokens, 1) / VLLM_BLOCK_TOKENS)
        per_token = model.kv_bytes_per_token(kv_dtype_bytes) / tp
        return cls(int(tokens), blocks, int(blocks * VLLM_BLOCK_TOKENS * per_token), blocks * model.layers * 2)


def interpolate_gbytes_s(rows: list[tuple[int, float]], message_bytes: float) -> float:
    """GB/s at `message_bytes`: log-log between rows; below the first row the rate falls with the size
    (latency-bound), above the last it stays the last row's (the link is full)."""
    if message_bytes <= rows[0][0]:
        return rows[0][1] * message_bytes / rows[0][0]
    for (s0, r0), (s1, r1) in itertools.pairwise(rows):
        if message_bytes <= s1:
            f = math.log(message_bytes / s0) / math.log(s1 / s0)
            return math.exp(math.log(r0) + f * math.log(r1 / r0))
    return rows[-1][1]


@dataclass(frozen=True)
class KvTransfer:
    """Seconds to move one request's KV cache, per rank (all ranks at once), and what they rest on."""

    message: KvMessage
    gbytes_s: float
    seconds: float
    basis: str
    rdma: bool


def _layout_note(message: KvMessage) -> str:
    size = message.rank_bytes // max(message.descriptors, 1)
    return (
        f" ({message.descriptors:,} descriptors of {size / 1024:,.0f} KiB in vLLM's layout: an upper bound, "
        "nixlbench's rate is for one contiguous message)"
    )


def kv_transfer(
    model: ModelSpec,
    tokens: int,
    kv_dtype_bytes: int,
    instance: GpuInstanceType,
    tp: int,
    rows: Optional[list[tuple[int, float]]] = None,
    rows_source: str = "",
) -> KvTransfer:
    """The KV handoff of one request: the message size sets the rate (nixlbench table, the stack's own
    from `make calibrate` or the vendored p5 one scaled to this type's per-rank line rate); a type
    without GPUDirect RDMA gets one TCP flow, flagged."""
    message = KvMessage.of(model, tokens, kv_dtype_bytes, tp)
    band = kv_band(model, 1, kv_dtype_bytes, instance, tp)
    if not instance.efa_rdma_read:
        gbytes = band.tcp_gbps / 8
        basis = f"no GPUDirect RDMA on {instance.name}: NIXL LIBFABRIC cannot run; one TCP flow (failure case)"
    elif rows is not None:
        gbytes = interpolate_gbytes_s(rows, message.rank_bytes)
        basis = f"calibrated nixlbench ({rows_source or 'calibration file'}) at {message.rank_bytes:,} B a rank"
        basis += _layout_note(message)
    else:
        scale = band.line_rate_gbps / 8 / NIXLBENCH_RANK_GBYTES_S
        gbytes = interpolate_gbytes_s(nixlbench_rows(), message.rank_bytes) * scale
        basis = f"{NIXLBENCH_SOURCE} at {message.rank_bytes:,} B a rank" + _layout_note(message)
        if instance.name != "p5.48xlarge":
            basis += f", scaled by line rate to {instance.name} (assumed)"
    return KvTransfer(message, gbytes, message.rank_bytes / (gbytes * 1e9), basis, instance.efa_rdma_read)


def check_nixlbench_rows(rows: list[tuple[int, float]], line_rate_gbytes_s: float) -> list[tuple[int, float]]:
    """Measured rows, refused (ValueError, one line) when a rate is not a finite positive number or
    beats the rank's line rate (no transfer can)."""
    if not rows:
        raise ValueError("no result rows")
    for size, rate in rows:
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"block {size:,} B: bandwidth {rate!r} GB/s is not a positive number")
        if rate > line_rate_gbytes_s * 1.001:
            raise ValueError(
                f"block {size:,} B: {rate:g} GB/s is above one rank's line rate ({line_rate_gbytes_s:g} GB/s): "
                "not a measurement of this fabric"
            )
    return sorted(rows)
