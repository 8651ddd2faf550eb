"""What one audit found: each source's outcome and every figure the report shows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class Source:
    name: str
    ok: bool
    detail: str


@dataclass
class Audit:
    stack: str
    since: str
    start: str
    end: str
    window_basis: str = ""
    sources: list[Source] = field(default_factory=list)
    spend_by_component: dict[str, float] = field(default_factory=dict)
    gpu_spend: Optional[float] = None
    gpu_spend_basis: str = ""
    gpu_node_hours_billed: Optional[float] = None  # Cost Explorer's GPU instance hours in the window
    gpu_node_hours_seen: Optional[float] = None  # DCGM's GPU-hours / GPUs per node, same window
    gpu: dict[str, Any] = field(default_factory=dict)
    tokens_by_phase: dict[str, float] = field(default_factory=dict)
    replicas: dict[str, Any] = field(default_factory=dict)
    actual_usd_per_mtok: Optional[float] = None
    predicted: dict[str, Any] = field(default_factory=dict)
    idle_spend: Optional[float] = None
    hours_by_purchase: dict[str, float] = field(default_factory=dict)
    reservation_coverage: Optional[float] = None
    on_demand_gpu_hours: Optional[float] = None
    capacity: str = "onDemand"  # gpuNodes.capacity: onDemand, reservation <id>, capacity block <id>
    quota: dict[str, Any] = field(default_factory=dict)
    recommendations: list[str] = field(default_factory=list)

    @property
    def total_spend(self) -> Optional[float]:
        return round(sum(self.spend_by_component.values()), 2) if self.spend_by_component else None
