"""`make cost-audit STACK=... [SINCE=7d]`: what the stack cost, what it served, and what to change.

Sources, each optional (a missing one is named in the report and on stderr, never fatal):
- AWS Cost Explorer, filtered by the tags the program puts on everything (`project`, `stack`; they
  must be activated as cost-allocation tags, docs/day-two.md "Cost audit"): spend by service and by EC2
  instance type (-> component), and EC2 hours by purchase type (-> reservation coverage).
- The cluster's Prometheus (`--prometheus URL`, e.g. a `kubectl port-forward` of
  kube-prometheus-stack-prometheus): GPU utilisation and idle GPU-hours from DCGM, tokens generated
  per phase, engine replicas per phase against GPU nodes.
- Service Quotas: the GPU family's on-demand vCPU quota against `gpuNodes.maxSize` plus the managed
  node group's update surge.
- `llm_pd_eks_tools.sizing.size` (what `make size` predicts) for the workload file: the $/Mtok to compare with.

Writes report.md, report.json and spend.png under --out (default build/cost-audit/<stack>/).
Exit codes (llm_pd_eks_tools/cli.py): 0 every source answered; 5 the report was written but a source was
unavailable; 2 bad arguments or stack config. Bounded time: botocore timeouts of 5 s/10 s with one
retry, at most 20 Cost Explorer pages per query, 10 s per Prometheus query.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Optional

from llm_pd_eks import metrics as m
from llm_pd_eks.catalog import gpu_instance_type
from llm_pd_eks.config import ConfigError, StackConfig
from llm_pd_eks_tools.cli import ROOT, Exit, ToolError, exit_with, one_line

PROG = "cost-audit"
# The tags __main__.py puts on every AWS resource (`tags = {"project": ..., "stack": ..., ...}`).
PROJECT_TAG, STACK_TAG = "project", "stack"
EC2_COMPUTE = "Amazon Elastic Compute Cloud - Compute"  # Cost Explorer SERVICE dimension value
SERVICE_COMPONENT = {
    "Amazon Elastic Container Service for Kubernetes": "eks-control-plane",
    "EC2 - Other": "ebs-nat-transfer",
    "Amazon Virtual Private Cloud": "network",
    "Amazon Elastic Load Balancing": "load-balancer",
    "Amazon Simple Notification Service": "alerting",
}
ON_DEMAND = "On Demand Instances"  # Cost Explorer PURCHASE_TYPE value
IDLE_UTIL_PERCENT = 5.0  # a GPU under 5 % utilisation in a minute counts as idle for that minute
MAX_PAGES = 20
PROMETHEUS_TIMEOUT_S = 10.0
MAX_SINCE_DAYS = 90


def parse_since(text: str) -> timedelta:
    match = re.fullmatch(r"(\d+)([hd])", text)
    if match is None or int(match.group(1)) == 0:
        raise ToolError(Exit.USAGE, f"--since {text!r}: give a window such as 7d or 36h")
    window = timedelta(hours=int(match.group(1))) if match.group(2) == "h" else timedelta(days=int(match.group(1)))
    if window > timedelta(days=MAX_SINCE_DAYS):
        raise ToolError(Exit.USAGE, f"--since {text}: at most {MAX_SINCE_DAYS}d (Cost Explorer's daily history)")
    return window


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
    sources: list[Source] = field(default_factory=list)
    spend_by_component: dict[str, float] = field(default_factory=dict)
    gpu_spend: Optional[float] = None
    gpu_spend_basis: str = ""
    gpu: dict[str, Any] = field(default_factory=dict)
    tokens_by_phase: dict[str, float] = field(default_factory=dict)
    replicas: dict[str, Any] = field(default_factory=dict)
    actual_usd_per_mtok: Optional[float] = None
    predicted: dict[str, Any] = field(default_factory=dict)
    idle_spend: Optional[float] = None
    reservation_coverage: Optional[float] = None
    on_demand_gpu_hours: Optional[float] = None
    quota: dict[str, Any] = field(default_factory=dict)
    recommendations: list[str] = field(default_factory=list)

    @property
    def total_spend(self) -> Optional[float]:
        return round(sum(self.spend_by_component.values()), 2) if self.spend_by_component else None


def progress(source: str, text: str) -> None:
    print(f"{PROG}: {source}: {text}", file=sys.stderr, flush=True)


# --- Cost Explorer -------------------------------------------------------------------------------------


def tag_filter(project: str, stack: str, *more: dict[str, Any]) -> dict[str, Any]:
    tags = [
        {"Tags": {"Key": k, "Values": [v], "MatchOptions": ["EQUALS"]}}
        for k, v in ((PROJECT_TAG, project), (STACK_TAG, stack))
    ]
    return {"And": [*tags, *more]}


def _grouped(
    ce: Any, start: date, end: date, group: str, metrics: list[str], filter_: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """Sum of each metric per group key over the window (all pages, at most MAX_PAGES)."""
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
            for g in day.get("Groups", []):
                key = g["Keys"][0]
                for metric in metrics:
                    amount = float(g.get("Metrics", {}).get(metric, {}).get("Amount", 0.0))
                    totals.setdefault(key, {}).setdefault(metric, 0.0)
                    totals[key][metric] += amount
        token = page.get("NextPageToken")
        if not token:
            break
        kwargs["NextPageToken"] = token
    return totals


def cost_explorer(audit: Audit, config: StackConfig, ce: Any, start: date, end: date) -> None:
    project, gpu_type = config.name, config.gpu_nodes.instance_type
    by_service = _grouped(ce, start, end, "SERVICE", ["UnblendedCost"], tag_filter(project, audit.stack))
    compute = {"Dimensions": {"Key": "SERVICE", "Values": [EC2_COMPUTE], "MatchOptions": ["EQUALS"]}}
    by_type = _grouped(
        ce, start, end, "INSTANCE_TYPE", ["UnblendedCost", "UsageQuantity"], tag_filter(project, audit.stack, compute)
    )
    gpu_only = {"Dimensions": {"Key": "INSTANCE_TYPE", "Values": [gpu_type], "MatchOptions": ["EQUALS"]}}
    by_purchase = _grouped(
        ce,
        start,
        end,
        "PURCHASE_TYPE",
        ["UnblendedCost", "UsageQuantity"],
        tag_filter(project, audit.stack, compute, gpu_only),
    )
    spend: dict[str, float] = {}
    for service, metrics in by_service.items():
        if service == EC2_COMPUTE:
            continue  # split by instance type below
        name = SERVICE_COMPONENT.get(service, service)
        spend[name] = spend.get(name, 0.0) + metrics["UnblendedCost"]
    for instance_type, metrics in by_type.items():
        name = (
            "gpu-nodes"
            if instance_type == gpu_type
            else ("system-nodes" if instance_type == config.system_nodes.instance_type else f"ec2 {instance_type}")
        )
        spend[name] = spend.get(name, 0.0) + metrics["UnblendedCost"]
    audit.spend_by_component = {k: round(v, 2) for k, v in sorted(spend.items(), key=lambda kv: -kv[1])}
    if gpu_type in by_type:
        audit.gpu_spend, audit.gpu_spend_basis = round(by_type[gpu_type]["UnblendedCost"], 2), "Cost Explorer"
    hours = {k: v["UsageQuantity"] for k, v in by_purchase.items()}
    total = sum(hours.values())
    if total > 0:
        audit.on_demand_gpu_hours = round(hours.get(ON_DEMAND, 0.0), 1)
        audit.reservation_coverage = round(1 - hours.get(ON_DEMAND, 0.0) / total, 4)


# --- Prometheus ----------------------------------------------------------------------------------------


def prom_query(url: str, expr: str, at: float) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query?{query}", timeout=PROMETHEUS_TIMEOUT_S) as resp:
        body = json.loads(resp.read())
    if body.get("status") != "success":
        raise ValueError(f"query {expr!r}: {body.get('error', 'failed')}")
    return list(body["data"]["result"])


def _scalar(result: list[dict[str, Any]]) -> Optional[float]:
    return float(result[0]["value"][1]) if result else None


def _by(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {r["metric"].get(label, ""): float(r["value"][1]) for r in result}


def phase_nodes() -> str:
    """1 per (node, phase) where a vLLM engine of that phase runs (the PodMonitor adds node and phase)."""
    return f"max by ({m.NODE_LABEL}, {m.PHASE_LABEL}) ({m.RUNNING} * 0 + 1)"


def prometheus_queries(window: str) -> dict[str, str]:
    """The PromQL of the audit; GPU time at a 1-minute resolution (subqueries), independent of the scrape."""
    util, running, tokens = m.GPU_UTIL, m.RUNNING, m.GENERATION_TOKENS
    return {
        "gpu_util_avg": f"avg(avg_over_time({util}[{window}]))",
        "gpu_hours": f"sum(count_over_time({util}[{window}:1m])) / 60",
        "idle_gpu_hours": f"sum(count_over_time(({util} < {IDLE_UTIL_PERCENT:g})[{window}:1m])) / 60",
        "util_by_phase": f"avg by ({m.PHASE_LABEL}) (avg_over_time(({util} * on ({m.NODE_LABEL}) "
        f"group_left ({m.PHASE_LABEL}) {phase_nodes()})[{window}:1m]))",
        "tokens_by_phase": f"sum by ({m.PHASE_LABEL}) (increase({tokens}[{window}]))",
        "replicas_avg": f"avg_over_time((count by ({m.PHASE_LABEL}) ({running}))[{window}:1m])",
        "replicas_max": f"max_over_time((count by ({m.PHASE_LABEL}) ({running}))[{window}:1m])",
        "gpu_nodes_avg": f"avg_over_time(count(count by ({m.NODE_LABEL}) ({util}))[{window}:1m])",
        "gpu_nodes_min": f"min_over_time(count(count by ({m.NODE_LABEL}) ({util}))[{window}:1m])",
        "gpu_nodes_max": f"max_over_time(count(count by ({m.NODE_LABEL}) ({util}))[{window}:1m])",
    }


def prometheus(audit: Audit, url: str, window: str, at: float) -> None:
    q = {name: prom_query(url, expr, at) for name, expr in prometheus_queries(window).items()}
    gpu_hours = _scalar(q["gpu_hours"])
    if not gpu_hours:
        raise ValueError(f"no {m.GPU_UTIL} series in the window: is the DCGM exporter scraped?")
    idle = _scalar(q["idle_gpu_hours"]) or 0.0
    audit.gpu = {
        "util_avg_percent": round(_scalar(q["gpu_util_avg"]) or 0.0, 1),
        "gpu_hours": round(gpu_hours, 1),
        "idle_gpu_hours": round(idle, 1),
        "idle_fraction": round(idle / gpu_hours, 4),
        "util_by_phase_percent": {k: round(v, 1) for k, v in sorted(_by(q["util_by_phase"], m.PHASE_LABEL).items())},
        "nodes_avg": round(_scalar(q["gpu_nodes_avg"]) or 0.0, 2),
        "nodes_min": _scalar(q["gpu_nodes_min"]),
        "nodes_max": _scalar(q["gpu_nodes_max"]),
    }
    audit.tokens_by_phase = {k: round(v) for k, v in sorted(_by(q["tokens_by_phase"], m.PHASE_LABEL).items())}
    audit.replicas = {
        "avg": {k: round(v, 2) for k, v in sorted(_by(q["replicas_avg"], m.PHASE_LABEL).items())},
        "max": dict(sorted(_by(q["replicas_max"], m.PHASE_LABEL).items())),
    }


# --- quota ---------------------------------------------------------------------------------------------


def update_surge(availability_zones: int, max_unavailable: int = 1) -> int:
    """Nodes a managed node group update adds: the larger of twice its AZs and maxUnavailable
    (AWS, "Understand each phase of node updates", scale-up phase,
    https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html)."""
    return max(2 * availability_zones, max_unavailable)


def gpu_quota(audit: Audit, config: StackConfig, quotas: Any) -> None:
    from llm_pd_eks_tools.preflight import quota_value

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


# --- prediction and recommendations --------------------------------------------------------------------


def predicted(stack: str, config: StackConfig, workload_file: Path) -> dict[str, Any]:
    """What `make size` says for the workload (llm_pd_eks_tools.sizing's public entry only)."""
    from llm_pd_eks_tools import sizing

    result = sizing.size(stack, config, sizing.load_workload(workload_file)).as_dict()
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
    if audit.reservation_coverage is not None and audit.reservation_coverage < 0.5 and gpu and gpu["nodes_min"]:
        floor = int(gpu["nodes_min"])
        cost = f" (${floor * window_h * price:,.2f} at list price in the window)" if price else ""
        out.append(
            f"Reservations: {audit.reservation_coverage:.0%} of GPU instance hours were covered; {floor} "
            f"node(s) ran the whole window{cost}: cover that floor with a Savings Plan or capacity reservation."
        )
    if audit.quota and audit.quota["headroom_vcpus"] < 0:
        q = audit.quota
        out.append(
            f"Quota: {q['quota']} is {q['vcpus']:.0f} vCPUs, {q['needed_vcpus']} needed for maxSize "
            f"{q['max_size']} + {q['surge']} update surge: request {-q['headroom_vcpus']:.0f} more vCPUs."
        )
    return out


# --- output --------------------------------------------------------------------------------------------


def _money(x: Optional[float], digits: int = 2) -> str:
    return "n/a" if x is None else f"${x:,.{digits}f}"


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def efficiency_rows(audit: Audit) -> list[tuple[str, str]]:
    gpu, pred, rep = audit.gpu, audit.predicted, audit.replicas
    tokens = ", ".join(f"{k} {v:,}" for k, v in audit.tokens_by_phase.items()) or "n/a"
    peaks = rep.get("max", {})
    replicas = ", ".join(f"{k} {v} ({peaks.get(k, 0):.0f})" for k, v in rep.get("avg", {}).items()) or "n/a"
    rows = [
        (f"GPU spend ({audit.gpu_spend_basis or 'n/a'})", _money(audit.gpu_spend)),
        ("GPU utilisation (avg)", f"{gpu['util_avg_percent']}%" if gpu else "n/a"),
        ("GPU-hours / idle GPU-hours", f"{gpu['gpu_hours']} / {gpu['idle_gpu_hours']}" if gpu else "n/a"),
        ("idle spend", _money(audit.idle_spend)),
        ("tokens generated by phase", tokens),
        ("engine replicas avg (max)", replicas),
        (
            "GPU nodes avg (min-max)",
            f"{gpu['nodes_avg']} ({gpu['nodes_min']:g}-{gpu['nodes_max']:g})" if gpu else "n/a",
        ),
        ("$/Mtok actual (GPU spend / decode tokens)", _money(audit.actual_usd_per_mtok, 4)),
        (
            "$/Mtok sized, disaggregated / aggregated",
            f"{_money(pred.get('disaggregated_usd_per_mtok'), 4)} / {_money(pred.get('aggregated_usd_per_mtok'), 4)}",
        ),
        ("reservation coverage (GPU instance hours)", _pct(audit.reservation_coverage)),
    ]
    if audit.quota:
        q = audit.quota
        rows.append(
            (
                f"GPU quota headroom (maxSize {q['max_size']} + surge {q['surge']})",
                f"{q['headroom_vcpus']:.0f} of {q['vcpus']:.0f} vCPUs",
            )
        )
    return rows


def render_markdown(audit: Audit) -> str:
    lines = [f"# Cost audit: {audit.stack}, last {audit.since} ({audit.start} to {audit.end})", "", "## Sources", ""]
    lines += [f"- {s.name}: {'ok' if s.ok else 'UNAVAILABLE'} ({s.detail})" for s in audit.sources]
    lines += ["", "## Spend by component", "", "| component | USD |", "|---|---:|"]
    spend = [f"| {k} | {_money(v)} |" for k, v in audit.spend_by_component.items()]
    lines += spend or ["| (no Cost Explorer data) | |"]
    if audit.total_spend is not None:
        lines.append(f"| **total** | **{_money(audit.total_spend)}** |")
    lines += [
        "",
        "![spend by component](spend.png)",
        "",
        "## Serving efficiency",
        "",
        "| figure | value |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {value} |" for name, value in efficiency_rows(audit)]
    lines += ["", "## Recommendations", ""]
    advice = [f"{i}. {r}" for i, r in enumerate(audit.recommendations, 1)]
    lines += advice or ["None: nothing stands out in this window."]
    return "\n".join(lines) + "\n"


def chart(audit: Audit) -> bytes:
    from llm_pd_eks_tools.png_chart import bar_chart

    bars = [(k, v, _money(v)) for k, v in audit.spend_by_component.items()]
    if not bars and audit.gpu_spend is not None:
        bars = [("gpu-nodes (list price)", audit.gpu_spend, _money(audit.gpu_spend))]
    return bar_chart(f"{audit.stack} spend, last {audit.since}", bars)


# --- CLI -----------------------------------------------------------------------------------------------


def _guarded(audit: Audit, name: str, run: Callable[[], str]) -> None:
    """Run one source; its failure is recorded and printed, never raised."""
    started = time.monotonic()
    try:
        detail = run()
        audit.sources.append(Source(name, True, f"{detail}, {time.monotonic() - started:.1f}s"))
        progress(name, f"ok ({detail})")
    except Exception as error:  # each source is optional: name it, keep going
        reason = one_line(f"{type(error).__name__}: {error}", 200)
        audit.sources.append(Source(name, False, reason))
        progress(name, f"unavailable: {reason}")


def load_config(stack: str) -> StackConfig:
    from llm_pd_eks_tools.preview.mockrun import stack_config

    try:
        return stack_config(stack, ROOT)
    except FileNotFoundError as error:
        raise ToolError(Exit.USAGE, one_line(str(error))) from None
    except ConfigError as error:
        raise ToolError(Exit.USAGE, one_line(f"Pulumi.{stack}.yaml: {'; '.join(error.problems)}")) from None


def main(
    argv: Optional[list[str]] = None, clients: Optional[tuple[Any, Any]] = None, now: Optional[datetime] = None
) -> int:
    """CLI entry. `clients` = (cost explorer, service quotas) to inject; built from boto3 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m llm_pd_eks_tools.cost_audit", description=__doc__.split("\n")[0])
    parser.add_argument("--stack", required=True, help="the stack (Pulumi.<stack>.yaml)")
    parser.add_argument("--since", default="7d", help="the window, e.g. 7d or 36h (default 7d)")
    parser.add_argument(
        "--prometheus",
        default=os.environ.get("PROMETHEUS_URL"),
        help="the cluster Prometheus URL (default $PROMETHEUS_URL; omitted: that source is skipped)",
    )
    parser.add_argument("--workload", type=Path, help="the workload `make size` sized (default workloads/<stack>.yaml)")
    parser.add_argument("--out", type=Path, help="output folder (default build/cost-audit/<stack>)")
    parser.add_argument("--json", action="store_true", help="print report.json to stdout")
    args = parser.parse_args(argv)
    window = parse_since(args.since)
    config = load_config(args.stack)
    if args.prometheus is not None and not re.match(r"https?://[^/\s]+", args.prometheus):
        raise ToolError(Exit.USAGE, f"--prometheus {args.prometheus!r} is not a URL such as http://127.0.0.1:9090")
    workload = args.workload or ROOT / "workloads" / f"{args.stack}.yaml"
    out = args.out or ROOT / "build" / "cost-audit" / args.stack

    end_at = now or datetime.now(UTC)
    start_at = end_at - window
    # Cost Explorer takes whole days, End exclusive: the days the window touches.
    start_day, end_day = start_at.date(), end_at.date() + timedelta(days=1)
    audit = Audit(args.stack, args.since, start_at.isoformat(timespec="minutes"), end_at.isoformat(timespec="minutes"))
    window_h = window.total_seconds() / 3600
    if clients is None:
        clients = _make_clients(config.region)
    ce, quotas = clients

    def run_ce() -> str:
        cost_explorer(audit, config, ce, start_day, end_day)
        return f"{len(audit.spend_by_component)} component(s), {start_day} to {end_day} (End exclusive)"

    def run_prometheus() -> str:
        if args.prometheus is None:
            raise ValueError("no --prometheus URL (or PROMETHEUS_URL) given")
        prometheus(audit, args.prometheus, f"{math.ceil(window_h)}h", end_at.timestamp())
        return f"{args.prometheus}, {len(prometheus_queries('1h'))} queries"

    def run_quota() -> str:
        gpu_quota(audit, config, quotas)
        return audit.quota["quota"]

    def run_sizing() -> str:
        if not workload.is_file():
            raise ValueError(f"{workload} not found (give --workload)")
        audit.predicted = predicted(args.stack, config, workload)
        return f"{audit.predicted['workload']}"

    progress("start", f"stack {args.stack}, {audit.start} to {audit.end}")
    _guarded(audit, "cost explorer", run_ce)
    _guarded(audit, "prometheus", run_prometheus)
    _guarded(audit, "service quotas", run_quota)
    _guarded(audit, "make size", run_sizing)
    derive(audit, config, window_h)
    audit.recommendations = recommendations(audit, config, window_h)

    out.mkdir(parents=True, exist_ok=True)
    report = {**asdict(audit), "total_spend": audit.total_spend}
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "report.md").write_text(render_markdown(audit))
    (out / "spend.png").write_bytes(chart(audit))
    progress("done", f"wrote {out / 'report.md'}, report.json, spend.png")
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render_markdown(audit), end="")
    return Exit.OK if all(s.ok for s in audit.sources) else Exit.UNVERIFIED


def _make_clients(region: str) -> tuple[Any, Any]:
    """Cost Explorer (its endpoint is us-east-1) and Service Quotas, with preflight's short timeouts."""
    import boto3

    from llm_pd_eks_tools.preflight import check_endpoint_env, client_config

    check_endpoint_env(os.environ)
    session = boto3.session.Session()
    cfg = client_config()
    return session.client("ce", region_name="us-east-1", config=cfg), session.client(
        "service-quotas", region_name=region, config=cfg
    )


if __name__ == "__main__":
    exit_with(PROG, main)
