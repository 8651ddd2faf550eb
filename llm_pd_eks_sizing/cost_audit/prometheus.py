"""The cluster's Prometheus: GPU utilisation and idle GPU-hours (DCGM), tokens per phase, engine
replicas per phase against GPU nodes, over the audit's window (evaluated at its end)."""

from __future__ import annotations

import json
import math
import urllib.parse
from typing import Any, Optional

from llm_pd_eks import metrics as m
from llm_pd_eks_tools.core.io_safety import http_request

from .model import Audit

IDLE_UTIL_PERCENT = 5.0  # a GPU under 5 % utilisation in a minute counts as idle for that minute
PROMETHEUS_TIMEOUT_S = 10.0  # one query's whole exchange: connecting, headers and body
# Largest reply read (bytes): each query is an aggregate of a few series, a few KB.
MAX_REPLY_BYTES = 4 * 2**20


def prom_query(url: str, expr: str, at: float) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    reply = http_request(
        "GET",
        f"{url.rstrip('/')}/api/v1/query?{query}",
        timeout=PROMETHEUS_TIMEOUT_S,
        max_bytes=MAX_REPLY_BYTES,
        headers={"Accept": "application/json"},
    )
    try:
        body = json.loads(reply.body)
    except ValueError:
        raise ValueError(f"HTTP {reply.status}: the reply is not JSON") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error", "failed") if isinstance(body, dict) else "not an API answer"
        raise ValueError(f"HTTP {reply.status}: query {expr[:60]!r}: {str(error)[:120]}")
    data = body.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list) or not all(isinstance(r, dict) for r in result):
        raise ValueError(f"HTTP {reply.status}: query {expr[:60]!r}: the reply has no list of results")
    return result


def finite(value: Any) -> float:
    """A sample value as a number; NaN or an infinity (Prometheus answers "NaN" for 0/0) is refused."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"a sample value {str(value)[:40]!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"a sample value is {value!r}; no figure is made from it")
    return number


def _sample(series: Any) -> float:
    try:
        return finite(series["value"][1])
    except (KeyError, IndexError, TypeError):
        raise ValueError("a sample has no [time, value] pair") from None


def _scalar(result: list[dict[str, Any]]) -> Optional[float]:
    return _sample(result[0]) if result else None


def _by(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {str((r.get("metric") or {}).get(label, "")): _sample(r) for r in result}


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
