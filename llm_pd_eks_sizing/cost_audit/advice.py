"""Figures that need two sources, and what to change: the GPU quota against maxSize plus the update
surge, the sized $/Mtok (`make size`), idle spend, and the recommendations."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from llm_pd_eks.catalog import gpu_instance_type
from llm_pd_eks.config import CapacityBlock, CapacityReservation, StackConfig
from llm_pd_eks_sizing import model as sizing
from llm_pd_eks_sizing.size import read_workload
from llm_pd_eks_tools.core.cli import ROOT
from llm_pd_eks_tools.ops.preflight import quota_value

from .model import Audit
from .prometheus import IDLE_UTIL_PERCENT


def update_surge(availability_zones: int, max_unavailable: int = 1) -> int:
    """Nodes a managed node group update adds: the larger of twice its AZs and maxUnavailable
    (AWS, "Understand each phase of node updates", scale-up phase,
    https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html)."""
    return max(2 * availability_zones, max_unavailable)


def gpu_quota(audit: Audit, config: StackConfig, quotas: Any) -> None:
    instance = gpu_instance_type(config.gpu_nodes.instance_type)
    surge = update_surge(1)  # the GPU group lives in one AZ (one cluster placement group)
    nodes = config.gpu_nodes.max_size + surge
    value, label = quota_value(quotas, instance.family_quota_code)
    need = nodes * instance.vcpus
    audit.quota = {
        "quota": label,
        "vcpus": value,
        "max_size": config.gpu_nodes.max_size,
        "surge": surge,
        "needed_vcpus": need,
        "headroom_vcpus": value - need,
    }


def predicted(stack: str, config: StackConfig, workload_file: Path) -> dict[str, Any]:
    """What `make size` says for the workload (llm_pd_eks_sizing.model's public entry only)."""
    result = sizing.size(stack, config, read_workload(workload_file)).as_dict()
    dis, agg = result.get("disaggregated") or {}, result.get("aggregated") or {}
    return {
        "workload": str(workload_file.relative_to(ROOT) if workload_file.is_relative_to(ROOT) else workload_file),
        "disaggregated_usd_per_mtok": dis.get("usd_per_mtok"),
        "aggregated_usd_per_mtok": agg.get("usd_per_mtok"),
        "disaggregated_nodes": dis.get("nodes"),
        "aggregated_nodes": agg.get("nodes"),
        "pd_ratio": result.get("pd_ratio"),
        "output_tokens_s": result.get("output_tokens_s"),
        "price_hourly": result.get("price_hourly"),
        "verdict": result.get("verdict"),
    }


def derive(audit: Audit, config: StackConfig, window_h: float) -> None:
    """Figures that need two sources: list-price GPU spend, $/Mtok, idle spend."""
    instance = gpu_instance_type(config.gpu_nodes.instance_type)
    price = audit.predicted.get("price_hourly")
    if audit.gpu:
        audit.gpu_node_hours_seen = round(audit.gpu["gpu_hours"] / instance.gpus, 1)
    if audit.gpu_spend is None and audit.gpu and price:
        node_hours = audit.gpu["gpu_hours"] / instance.gpus
        audit.gpu_spend, audit.gpu_spend_basis = round(node_hours * price, 2), "list price x GPU node-hours (DCGM)"
    output = audit.tokens_by_phase.get("decode")
    if audit.gpu_spend is not None and output:
        audit.actual_usd_per_mtok = round(audit.gpu_spend / (output / 1e6), 4)
    if audit.gpu_spend is not None and audit.gpu:
        audit.idle_spend = round(audit.gpu_spend * audit.gpu["idle_fraction"], 2)


def recommendations(audit: Audit, config: StackConfig, window_h: float) -> list[str]:
    out: list[str] = []
    gpu, serving = audit.gpu, config.serving
    price = audit.predicted.get("price_hourly")
    if gpu and audit.idle_spend is not None and gpu["idle_fraction"] >= 0.25:
        floor = gpu["nodes_min"] or 0
        out.append(
            f"Idle GPUs: {gpu['idle_gpu_hours']:.0f} of {gpu['gpu_hours']:.0f} GPU-hours ({gpu['idle_fraction']:.0%}) "
            f"under {IDLE_UTIL_PERCENT:g}% utilisation, ${audit.idle_spend:,.2f} of ${audit.gpu_spend:,.2f}; the group "
            f"never went below {floor:.0f} node(s) (gpuNodes.minSize {config.gpu_nodes.min_size}): lower "
            f"serving.*.minReplicas / gpuNodes.minSize so scale-in can release them."
        )
    if serving is not None and audit.replicas.get("max"):
        for role, group in serving.groups().items():
            peak = audit.replicas["max"].get(role)
            if peak is None:
                continue
            if peak >= group.max_replicas:
                out.append(
                    f"{role}: peaked at maxReplicas ({peak:.0f} of {group.max_replicas}) in the window: "
                    f"raise serving.{role}.maxReplicas (and gpuNodes.maxSize) or expect queueing at peaks."
                )
            elif group.max_replicas > 1 and peak <= group.max_replicas / 2:
                out.append(
                    f"{role}: never above {peak:.0f} of maxReplicas {group.max_replicas}: "
                    f"serving.{role}.maxReplicas {max(group.min_replicas, int(peak) + 1)} keeps one of headroom "
                    f"and lowers the quota the stack must hold."
                )
    by_phase = gpu.get("util_by_phase_percent", {}) if gpu else {}
    if {"prefill", "decode"} <= set(by_phase) and min(by_phase.values()) > 0:
        p, d = by_phase["prefill"], by_phase["decode"]
        ratio = p / d
        sized = audit.predicted.get("pd_ratio")
        if ratio >= 1.5 or ratio <= 1 / 1.5:
            hot = "prefill" if ratio > 1 else "decode"
            out.append(
                f"P:D ratio: {hot} GPUs run at {max(p, d):.0f}% against {min(p, d):.0f}% on the other side "
                f"(sized ratio {sized or 'n/a'}): shift replicas toward {hot}."
            )
    dis, agg = audit.predicted.get("disaggregated_usd_per_mtok"), audit.predicted.get("aggregated_usd_per_mtok")
    if dis is not None and agg is not None and agg < dis:
        out.append(
            f"Aggregated vs disaggregated: `make size` prices aggregated serving at ${agg:.4f}/Mtok against "
            f"${dis:.4f}/Mtok disaggregated for this workload; unless TTFT isolation is needed, "
            "serve aggregated."
        )
    actual = audit.actual_usd_per_mtok
    if actual is not None and dis:
        factor = actual / dis
        if factor >= 1.5:
            tokens_s = audit.tokens_by_phase.get("decode", 0) / (window_h * 3600)
            out.append(
                f"Cost per token: ${actual:.4f}/Mtok actual against ${dis:.4f}/Mtok sized ({factor:.1f}x): "
                f"{tokens_s:,.0f} output tok/s served against "
                f"{audit.predicted.get('output_tokens_s') or 0:,.0f} "
                f"sized; resize for the real load (`make size` with a workload at the observed rate)."
            )
    out += reservation_advice(audit, config, window_h, price)
    if audit.quota and audit.quota["headroom_vcpus"] < 0:
        q = audit.quota
        out.append(
            f"Quota: {q['quota']} is {q['vcpus']:.0f} vCPUs, {q['needed_vcpus']} needed for maxSize "
            f"{q['max_size']} + {q['surge']} update surge: request {-q['headroom_vcpus']:.0f} more vCPUs."
        )
    return out


def reservation_advice(audit: Audit, config: StackConfig, window_h: float, price: Optional[float]) -> list[str]:
    """Advice on the GPU floor that ran the whole window, by what already covers it.

    - A Capacity Block is prepaid for its window: nothing to add.
    - A capacity reservation (ODCR) holds capacity but bills at the On-Demand rate, so its hours are
      On Demand in Cost Explorer: only a Savings Plan discounts them; "reserve" is no advice.
    - On demand: a Savings Plan (discount) or a capacity reservation (capacity) for the floor.
    Nothing is advised once half the GPU hours are covered (Savings Plans, Reserved Instances).
    """
    gpu, coverage = audit.gpu, audit.reservation_coverage
    if isinstance(config.gpu_nodes.capacity, CapacityBlock) or coverage is None or coverage >= 0.5:
        return []
    if not (gpu and gpu.get("nodes_min")):
        return []
    floor = int(gpu["nodes_min"])
    cost = f" (${floor * window_h * price:,.2f} at list price in the window)" if price else ""
    if isinstance(config.gpu_nodes.capacity, CapacityReservation):
        return [
            f"Savings Plan: {coverage:.0%} of GPU instance hours were discounted; capacity reservation "
            f"{config.gpu_nodes.capacity.reservation_id} holds the capacity at the On-Demand rate and {floor} node(s) "
            f"ran the whole window{cost}: a Compute Savings Plan for that floor discounts them."
        ]
    return [
        f"Reservations: {coverage:.0%} of GPU instance hours were covered; {floor} node(s) ran the whole "
        f"window{cost}: cover that floor with a Savings Plan (price) or a capacity reservation (capacity)."
    ]
