"""AWS Cost Explorer: the stack's spend by component and its GPU hours by purchase type.

- Filtered by the tags the program puts on everything (`project`, `stack`: instances, root volumes,
  CSI volumes, NAT gateways, ...), activated as cost-allocation tags.
- **Net amortized cost** (`NetAmortizedCost`): a Savings Plan's or reservation's upfront and
  recurring fees spread over the hours they cover, after discounts (AWS, "Understanding your
  amortized costs"). Unblended cost would show Savings-Plan-covered hours as free and a reservation's
  fee as one day's lump, so the spend would not be the spend.
- Daily amounts times the window's share of each day (window.Window.day_share): 1 for whole days.
- `EC2 - Other` split by usage type: EBS volumes, NAT gateways, data transfer.
"""

from __future__ import annotations

from typing import Any

from llm_pd_eks.config import StackConfig

from .model import Audit
from .prometheus import finite
from .window import Window

# The tags llm_pd_eks/deployment.py puts on every AWS resource (`{"project": ..., "stack": ...}`).
PROJECT_TAG, STACK_TAG = "project", "stack"
COST_METRIC = "NetAmortizedCost"
USAGE_METRIC = "UsageQuantity"
EC2_COMPUTE = "Amazon Elastic Compute Cloud - Compute"  # Cost Explorer SERVICE dimension values
EC2_OTHER = "EC2 - Other"
SERVICE_COMPONENT = {
    "Amazon Elastic Container Service for Kubernetes": "eks-control-plane",
    "Amazon Virtual Private Cloud": "network",
    "Amazon Elastic Load Balancing": "load-balancer",
    "Amazon Simple Notification Service": "alerting",
}
# EC2 - Other by USAGE_TYPE, e.g. `USW2-EBS:VolumeUsage.gp3`, `USW2-NatGateway-Hours`,
# `USW2-DataTransfer-Regional-Bytes`.
USAGE_COMPONENT = (("EBS:", "ebs-volumes"), ("NatGateway", "nat-gateway"), ("DataTransfer", "data-transfer"))
ON_DEMAND = "On Demand Instances"  # Cost Explorer PURCHASE_TYPE values
SPOT = "Spot Instances"
MAX_PAGES = 20


def tag_filter(project: str, stack: str, *more: dict[str, Any]) -> dict[str, Any]:
    tags = [
        {"Tags": {"Key": k, "Values": [v], "MatchOptions": ["EQUALS"]}}
        for k, v in ((PROJECT_TAG, project), (STACK_TAG, stack))
    ]
    return {"And": [*tags, *more]}


def dimension(key: str, value: str) -> dict[str, Any]:
    return {"Dimensions": {"Key": key, "Values": [value], "MatchOptions": ["EQUALS"]}}


def grouped(
    ce: Any, window: Window, group: str, metrics: list[str], filter_: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """Each metric per group key, summed over the window's days times each day's share (all pages, at
    most MAX_PAGES)."""
    from datetime import date

    start, end = window.ce_period()
    totals: dict[str, dict[str, float]] = {}
    kwargs: dict[str, Any] = {
        "TimePeriod": {"Start": start.isoformat(), "End": end.isoformat()},
        "Granularity": "DAILY",
        "Metrics": metrics,
        "Filter": filter_,
        "GroupBy": [{"Type": "DIMENSION", "Key": group}],
    }
    for _ in range(MAX_PAGES):
        page = ce.get_cost_and_usage(**kwargs)
        for day in page.get("ResultsByTime", []):
            share = window.day_share(date.fromisoformat(day["TimePeriod"]["Start"]))
            for g in day.get("Groups", []):
                key = g["Keys"][0]
                for metric in metrics:
                    amount = finite(g.get("Metrics", {}).get(metric, {}).get("Amount", 0.0))
                    totals.setdefault(key, {}).setdefault(metric, 0.0)
                    totals[key][metric] += amount * share
        token = page.get("NextPageToken")
        if not token:
            break
        kwargs["NextPageToken"] = token
    return totals


def usage_component(usage_type: str) -> str:
    return next((name for marker, name in USAGE_COMPONENT if marker in usage_type), "ec2-other")


def cost_explorer(audit: Audit, config: StackConfig, ce: Any, window: Window) -> None:
    """Spend by component, GPU spend and node-hours, GPU hours by purchase type."""
    project, gpu_type = config.name, config.gpu_nodes.instance_type
    tags = tag_filter(project, audit.stack)
    by_service = grouped(ce, window, "SERVICE", [COST_METRIC], tags)
    compute = dimension("SERVICE", EC2_COMPUTE)
    by_type = grouped(
        ce, window, "INSTANCE_TYPE", [COST_METRIC, USAGE_METRIC], tag_filter(project, audit.stack, compute)
    )
    gpu_only = dimension("INSTANCE_TYPE", gpu_type)
    by_purchase = grouped(
        ce, window, "PURCHASE_TYPE", [COST_METRIC, USAGE_METRIC], tag_filter(project, audit.stack, compute, gpu_only)
    )
    by_usage = grouped(
        ce, window, "USAGE_TYPE", [COST_METRIC], tag_filter(project, audit.stack, dimension("SERVICE", EC2_OTHER))
    )
    spend: dict[str, float] = {}

    def add(name: str, amount: float) -> None:
        spend[name] = spend.get(name, 0.0) + amount

    for service, metrics in by_service.items():
        if service in (EC2_COMPUTE, EC2_OTHER):
            continue  # split by instance type and by usage type below
        add(SERVICE_COMPONENT.get(service, service), metrics[COST_METRIC])
    for instance_type, metrics in by_type.items():
        system = config.system_nodes.instance_type
        add(
            "gpu-nodes"
            if instance_type == gpu_type
            else "system-nodes"
            if instance_type == system
            else f"ec2 {instance_type}",
            metrics[COST_METRIC],
        )
    for usage_type, metrics in by_usage.items():
        add(usage_component(usage_type), metrics[COST_METRIC])
    audit.spend_by_component = {k: round(v, 2) for k, v in sorted(spend.items(), key=lambda kv: -kv[1])}
    if gpu_type in by_type:
        audit.gpu_spend = round(by_type[gpu_type][COST_METRIC], 2)
        audit.gpu_spend_basis = "Cost Explorer, net amortized"
        audit.gpu_node_hours_billed = round(by_type[gpu_type][USAGE_METRIC], 1)
    hours = {k: v[USAGE_METRIC] for k, v in by_purchase.items()}
    audit.hours_by_purchase = {k: round(v, 1) for k, v in sorted(hours.items())}
    total = sum(hours.values())
    if total > 0:
        # Savings Plans, Reserved Instances and Capacity Blocks discount or prepay the hour; an ODCR
        # bills at the On-Demand rate (it reserves capacity, not price), so its hours stay On Demand.
        uncovered = hours.get(ON_DEMAND, 0.0) + hours.get(SPOT, 0.0)
        audit.on_demand_gpu_hours = round(hours.get(ON_DEMAND, 0.0), 1)
        audit.reservation_coverage = round(1 - uncovered / total, 4)
