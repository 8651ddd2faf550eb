"""Grafana dashboards as data: one JSON model built here, provisioned by the Grafana sidecar.

kube-prometheus-stack's Grafana runs a sidecar that loads every ConfigMap labelled
`grafana_dashboard: "1"` (chart values `grafana.sidecar.dashboards.label/labelValue`, searching all
namespaces), so a dashboard is a ConfigMap whose one data key holds the JSON below.

Panels, per phase (`phase` = the pod's `ray.io/group`: prefill or decode): TTFT and inter-token
latency quantiles, queue depth, running requests, KV-cache usage, engine replicas; KV transfer
bytes, time, throughput (against the GPU type's floor) and failures; GPU utilisation and memory per
node (DCGM); the hourly cost of the running nodes (prices from llm_pd_eks/data/prices.json).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from . import metrics as m
from .alerts import kv_throughput_gbps_expr

DASHBOARD_UID = "llm-pd-eks-serving"
DASHBOARD_LABEL = {"grafana_dashboard": "1"}  # the chart's sidecar default
INSTANCE_TYPE_LABEL = "label_node_kubernetes_io_instance_type"  # kube_node_labels, via metricLabelsAllowlist
_PHASE = m.PHASE_LABEL


def _target(expr: str, legend: str, ref: str = "A") -> dict[str, Any]:
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    return {"expr": expr, "legendFormat": legend, "refId": ref, "datasource": datasource}


def _panel(title: str, targets: list[dict[str, Any]], unit: str, x: int, y: int, **field: Any) -> dict[str, Any]:
    return {
        "type": "timeseries",
        "title": title,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit, **field}, "overrides": []},
        "targets": targets,
    }


def _quantiles(histogram: str) -> list[dict[str, Any]]:
    return [
        _target(
            f"histogram_quantile({q}, sum by ({_PHASE}, le) (rate({histogram}_bucket[5m])))",
            f"p{int(q * 100)} {{{{{_PHASE}}}}}",
            ref,
        )
        for q, ref in ((0.5, "A"), (0.95, "B"), (0.99, "C"))
    ]


def hourly_cost_expr(hourly_prices: Mapping[str, float]) -> str:
    """USD per hour of the nodes running now: node count per instance type times its list price."""
    terms = [
        f'count({m.KSM_NODE_LABELS}{{{INSTANCE_TYPE_LABEL}="{name}"}}) * {price} or vector(0)'
        for name, price in sorted(hourly_prices.items())
    ]
    return " + ".join(f"({t})" for t in terms) if terms else "vector(0)"


# Panels of the KV path between prefill and decode: an aggregated app (no decode phase) has none to show.
KV_PATH_PANELS = (
    "KV bytes moved (NIXL)",
    "KV transfer time (NIXL)",
    "KV transfer throughput vs floor",
    "KV transfer failures",
    "Requests by P/D path (decode-only vs disaggregated)",
)


def dashboard(
    kv_floor_gbps: float, hourly_prices: Mapping[str, float], phases: tuple[str, ...] = m.PHASES
) -> dict[str, Any]:
    """The serving dashboard's JSON model (Grafana schema 39); `phases` without decode (aggregated
    serving): no KV-path panels, and the title says so."""
    by_phase = f"{{{{{_PHASE}}}}}"
    panels = [
        _panel("Time to first token by phase", _quantiles(m.TTFT), "s", 0, 0),
        _panel("Inter-token latency by phase", _quantiles(m.ITL), "s", 12, 0),
        _panel(
            "Queue depth (waiting requests)", [_target(f"sum by ({_PHASE}) ({m.WAITING})", by_phase)], "short", 0, 8
        ),
        _panel("Running requests", [_target(f"sum by ({_PHASE}) ({m.RUNNING})", by_phase)], "short", 12, 8),
        _panel(
            "KV-cache usage per replica",
            [_target(f"max by ({_PHASE}, pod) ({m.KV_CACHE_USAGE})", f"{by_phase} {{{{pod}}}}")],
            "percentunit",
            0,
            16,
            min=0,
            max=1,
        ),
        _panel(
            "Engine replicas by phase",
            [_target(f"count by ({_PHASE}) ({m.RUNNING})", by_phase)],
            "short",
            12,
            16,
        ),
        _panel(
            "Serve replicas: target vs healthy",
            [
                _target(f"sum by (deployment) ({m.SERVE_TARGET_REPLICAS})", "target {{deployment}}"),
                _target(f"sum by (deployment) ({m.SERVE_REPLICA_HEALTHY})", "healthy {{deployment}}", "B"),
            ],
            "short",
            12,
            48,
        ),
        _panel(
            "KV bytes moved (NIXL)",
            [_target(f"sum by ({_PHASE}) (rate({m.NIXL_BYTES}_sum[5m]))", by_phase)],
            "Bps",
            0,
            24,
        ),
        _panel("KV transfer time (NIXL)", _quantiles(m.NIXL_XFER_TIME), "s", 12, 24),
        _panel(
            "KV transfer throughput vs floor",
            [_target(kv_throughput_gbps_expr("5m"), by_phase), _target(f"vector({kv_floor_gbps})", "floor", "B")],
            "Gbits",
            0,
            32,
        ),
        _panel(
            "KV transfer failures",
            [
                _target(f"sum by ({_PHASE}) (increase({m.NIXL_FAILED_TRANSFERS}[5m]))", f"transfers {by_phase}"),
                _target(
                    f"sum by ({_PHASE}) (increase({m.NIXL_FAILED_NOTIFICATIONS}[5m]))", f"notifications {by_phase}", "B"
                ),
                _target(f"sum by ({_PHASE}) (increase({m.NIXL_KV_EXPIRED}[5m]))", f"expired leases {by_phase}", "C"),
            ],
            "short",
            12,
            32,
        ),
        _panel(
            "GPU utilisation per node",
            [_target(f"avg by ({m.NODE_LABEL}) ({m.GPU_UTIL})", f"{{{{{m.NODE_LABEL}}}}}")],
            "percent",
            0,
            40,
            min=0,
            max=100,
        ),
        _panel(
            "GPU memory used per node",
            [_target(f"sum by ({m.NODE_LABEL}) ({m.GPU_FB_USED}) * 1024 * 1024", f"{{{{{m.NODE_LABEL}}}}}")],
            "bytes",
            12,
            40,
        ),
        _panel(
            "Prefix-cache hit rate by phase",
            [
                _target(
                    f"sum by ({_PHASE}) (rate({m.PREFIX_CACHE_HITS}[5m])) / "
                    f"sum by ({_PHASE}) (rate({m.PREFIX_CACHE_QUERIES}[5m]))",
                    by_phase,
                )
            ],
            "percentunit",
            0,
            56,
            min=0,
            max=1,
        ),
        _panel(
            "Requests by P/D path (decode-only vs disaggregated)",
            [_target(f"sum by (path) (rate({m.PD_PATH_REQUESTS}[5m]))", "{{path}}")],
            "reqps",
            12,
            56,
        ),
        _panel(
            "Cost of running nodes (list price)",
            [_target(hourly_cost_expr(hourly_prices), "USD/h")],
            "currencyUSD",
            0,
            48,
        ),
    ]
    disaggregated = "decode" in phases
    if not disaggregated:
        panels = [p for p in panels if p["title"] not in KV_PATH_PANELS]
    for number, panel in enumerate(panels, start=1):
        panel["id"] = number
    return {
        "uid": DASHBOARD_UID,
        "title": "LLM prefill/decode serving" if disaggregated else "LLM aggregated serving",
        "tags": ["llm-pd-eks"],
        "timezone": "utc",
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"}]
        },
        "panels": panels,
    }


def dashboard_json(kv_floor_gbps: float, hourly_prices: Mapping[str, float], phases: tuple[str, ...] = m.PHASES) -> str:
    return json.dumps(dashboard(kv_floor_gbps, hourly_prices, phases), indent=1, sort_keys=True)


def expressions(model: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard (tests run them on a real Prometheus)."""
    return [t["expr"] for p in model["panels"] for t in p["targets"]]
