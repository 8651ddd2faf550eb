"""Alert rules for the prefill/decode serving layer, as data (a PrometheusRule's `spec.groups`).

Each rule names a failure that returns 200 OK and so hides from a health check:
- KV transfers failing (NIXL counts them on the decode side);
- no KV bytes moving while decode generates tokens: requests are not disaggregated at all;
- KV throughput below the floor of the GPU type (kv_transfer.kv_rank_floor_gbps): NIXL is off
  EFA, typically on UCX over TCP, which still works, only many times slower;
- TTFT / inter-token latency burning their SLO error budget, per phase (prefill vs decode);
- the decode KV cache nearly full (requests queue, then get preempted);
- Ray pods Pending: the autoscaler asked for a GPU node's worth of pod that never came.

The PromQL for shared quantities (KV throughput, an SLO's error ratio) is built by one function each,
used by the alerts, the dashboards and `make verify` alike. Every alert is unit-tested with
`promtool test rules` (tests/test_alert_rules.py), firing and not firing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import pulumi

from . import metrics as m
from .catalog import GpuInstanceType
from .config.observability import AlertingConfig, ObservabilityConfig
from .kv_transfer import kv_rank_floor_gbps
from .ray_service import NAMESPACE as SERVING_NAMESPACE

GROUP_NAME = "llm-pd-eks.serving"
# Google SRE workbook, "Alerting on SLOs", multiwindow multi-burn-rate: burning 2% of a 30-day
# budget in one hour is a burn rate of 14.4; the short window (1/12 of the long one) resets fast.
FAST_BURN_RATE = 14.4
BURN_WINDOWS = ("5m", "1h")
KV_WINDOW = "10m"  # long enough to hold several transfers at a low request rate

KV_THROUGHPUT_RECORD = "llm_pd:kv_transfer_gbps:rate10m"


def kv_throughput_gbps_expr(window: str = KV_WINDOW, by: str = m.PHASE_LABEL) -> str:
    """Gbit/s per transfer: bytes moved over seconds spent transferring (vLLM's own "Throughput").

    Matches NixlKVConnectorStats.reduce(): total bytes / total transfer time, per rank; NaN (no
    sample, no alert) when nothing was transferred.
    """
    return (
        f"sum by ({by}) (rate({m.NIXL_BYTES}_sum[{window}])) * 8 / 1e9"
        f" / sum by ({by}) (rate({m.NIXL_XFER_TIME}_sum[{window}]))"
    )


def slo_error_ratio_expr(histogram: str, threshold: float, window: str, by: str = m.PHASE_LABEL) -> str:
    """Fraction of requests slower than `threshold` over `window`, per `by` (from the histogram)."""
    return (
        f'(1 - sum by ({by}) (rate({histogram}_bucket{{le="{m.le(threshold)}"}}[{window}]))'
        f" / sum by ({by}) (rate({histogram}_count[{window}])))"
    )


def _burn(histogram: str, threshold: float, objective: float) -> str:
    budget = round(1 - objective, 6)
    return " and ".join(
        f"{slo_error_ratio_expr(histogram, threshold, w)} > ({FAST_BURN_RATE} * {budget})" for w in BURN_WINDOWS
    )


COMPONENT = "llm-pd"  # the `component` label of every alert here
RUNBOOK_PREFIX = "runbook-"  # docs/day-two.md headings "### Runbook: <Alert>" get the GitHub anchor runbook-<alert>


def runbook_anchor(alert: str) -> str:
    """The docs/day-two.md anchor of an alert's runbook section (GitHub lower-cases heading text, drops `:`,
    turns spaces into `-`: "### Runbook: KVTransferFailures" -> `runbook-kvtransferfailures`)."""
    return RUNBOOK_PREFIX + alert.lower()


def runbook_url(config: ObservabilityConfig, alert: str) -> str:
    return f"{config.alerting.runbook_base_url}#{runbook_anchor(alert)}"


def _alert(
    config: ObservabilityConfig, name: str, expr: str, for_: str, severity: str, summary: str, description: str
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "component": COMPONENT},
        "annotations": {"summary": summary, "description": description, "runbook_url": runbook_url(config, name)},
    }


def alert_rules(config: ObservabilityConfig, instance: GpuInstanceType) -> list[dict[str, Any]]:
    """The alerting rules, thresholds from the stack config and the GPU catalog."""
    floor = kv_rank_floor_gbps(instance, config.kv_throughput_floor_fraction)
    decode = f'{m.PHASE_LABEL}="decode"'
    return [
        _alert(
            config,
            "KVTransferFailures",
            f"sum by ({m.PHASE_LABEL}) (increase({m.NIXL_FAILED_TRANSFERS}[5m])) > 0",
            "1m",
            "critical",
            "NIXL KV-cache transfers are failing ({{ $labels.phase }})",
            "{{ $value }} NIXL KV transfer(s) failed in 5 minutes; decode recomputes or drops those requests.",
        ),
        _alert(
            config,
            "KVTransferStalled",
            f"sum(rate({m.GENERATION_TOKENS}{{{decode}}}[{KV_WINDOW}])) > 0"
            f" unless sum(rate({m.NIXL_BYTES}_count{{{decode}}}[{KV_WINDOW}])) > 0",
            "5m",
            "critical",
            "Decode generates tokens but no KV cache arrives over NIXL",
            "Requests flow yet prefill and decode exchange no KV blocks: the P/D split is not in effect.",
        ),
        _alert(
            config,
            "KVThroughputBelowFloor",
            f"{kv_throughput_gbps_expr()} < {floor}",
            "10m",
            "warning",
            "KV transfer throughput below the {{ $labels.phase }} floor for " + instance.name,
            f"NIXL moves KV blocks at {{{{ $value | humanize }}}} Gbit/s, under the {floor} Gbit/s floor of "
            f"{instance.name}: NIXL is probably not on LIBFABRIC/EFA (UCX falls back to TCP).",
        ),
        _alert(
            config,
            "TTFTBudgetBurn",
            _burn(m.TTFT, config.ttft_slo_seconds, config.slo_objective),
            "2m",
            "critical",
            "Time to first token burns its SLO budget on {{ $labels.phase }}",
            f"More than {FAST_BURN_RATE}x the allowed {1 - config.slo_objective:.2%} of requests take over "
            f"{config.ttft_slo_seconds:g}s to the first token, over both 5m and 1h.",
        ),
        _alert(
            config,
            "InterTokenLatencyBudgetBurn",
            _burn(m.ITL, config.itl_slo_seconds, config.slo_objective),
            "2m",
            "critical",
            "Inter-token latency burns its SLO budget on {{ $labels.phase }}",
            f"More than {FAST_BURN_RATE}x the allowed {1 - config.slo_objective:.2%} of tokens take over "
            f"{config.itl_slo_seconds:g}s, over both 5m and 1h.",
        ),
        _alert(
            config,
            "DecodeKVCacheNearlyFull",
            f"max by ({m.PHASE_LABEL}, pod) ({m.KV_CACHE_USAGE}{{{decode}}}) > {config.kv_cache_full_ratio}",
            "5m",
            "warning",
            "Decode KV cache above {{ $value | humanizePercentage }} on {{ $labels.pod }}",
            "vLLM queues and then preempts requests when the KV cache is full; add decode replicas.",
        ),
        _alert(
            config,
            "RayPodsPending",
            f'sum by (namespace, pod) ({m.KSM_POD_PHASE}{{namespace="{SERVING_NAMESPACE}", phase="Pending"}}) > 0',
            f"{config.pending_minutes}m",
            "warning",
            "Ray pod {{ $labels.pod }} Pending",
            f"A Ray pod has waited over {config.pending_minutes} minutes for a node: GPU capacity, EFA devices "
            "or the node group's maxSize.",
        ),
    ]


def recording_rules() -> list[dict[str, Any]]:
    return [{"record": KV_THROUGHPUT_RECORD, "expr": kv_throughput_gbps_expr()}]


def rule_groups(config: ObservabilityConfig, instance: GpuInstanceType) -> list[dict[str, Any]]:
    """`spec.groups` of the PrometheusRule (and the file `promtool test rules` loads)."""
    return [{"name": GROUP_NAME, "rules": [*recording_rules(), *alert_rules(config, instance)]}]


# --- delivery: the Alertmanager configuration (kube-prometheus-stack value `alertmanager.config`) -------

NULL_RECEIVER = "null"  # the chart's own sink for Watchdog/InfoInhibitor (values.yaml `alertmanager.config`)
CRITICAL_RECEIVER = "llm-pd-critical"
WARNING_RECEIVER = "llm-pd-warning"
# Alerts whose cause is the KV path: while one fires, the TTFT burn it causes is not paged separately
# (a failed, stalled or slow KV transfer delays every first token on the decode side).
KV_PATH_ALERTS = ("KVTransferFailures", "KVTransferStalled", "KVThroughputBelowFloor")
KV_CAUSED_ALERTS = ("TTFTBudgetBurn",)
GROUP_BY = ["alertname", m.PHASE_LABEL, "namespace"]


@dataclass(frozen=True)
class SnsTarget:
    """An SNS topic the program creates; Alertmanager signs with SigV4 (credentials: its IRSA role)."""

    topic_arn: pulumi.Input[str]
    region: str


@dataclass(frozen=True)
class WebhookTarget:
    """A webhook (Slack, PagerDuty Events, any HTTP receiver); the URL is a Pulumi secret."""

    url: pulumi.Input[str]


AlertTarget = Union[SnsTarget, WebhookTarget]


def _receiver(name: str, target: AlertTarget) -> dict[str, Any]:
    if isinstance(target, SnsTarget):
        # Alertmanager `sns_config` (prometheus.io/docs/alerting/latest/configuration/#sns_config)
        sns = {
            "topic_arn": target.topic_arn,
            "sigv4": {"region": target.region},
            "send_resolved": True,
            "subject": "[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }} ({{ .CommonLabels.severity }})",
        }
        return {"name": name, "sns_configs": [sns]}
    # Alertmanager `webhook_config`: `url` inline (`url_file` needs Alertmanager 0.26+; CI runs Debian's 0.25)
    return {"name": name, "webhook_configs": [{"url": target.url, "send_resolved": True}]}


def _inhibit(sources: list[str], targets: list[str], equal: list[str]) -> dict[str, Any]:
    rule: dict[str, Any] = {"source_matchers": sources, "target_matchers": targets}
    if equal:
        rule["equal"] = equal
    return rule


def inhibit_rules() -> list[dict[str, Any]]:
    """The chart's default inhibitions (kube-prometheus-stack 88.5.3 values.yaml `alertmanager.config`,
    transcribed) and the P/D one: a KV-path alert holds back the TTFT burn it causes."""
    kv = "|".join(KV_PATH_ALERTS)
    caused = "|".join(KV_CAUSED_ALERTS)
    return [
        _inhibit(["severity = critical"], ["severity =~ warning|info"], ["namespace", "alertname"]),
        _inhibit(["severity = warning"], ["severity = info"], ["namespace", "alertname"]),
        _inhibit(["alertname = InfoInhibitor"], ["severity = info"], ["namespace"]),
        {"target_matchers": ["alertname = InfoInhibitor"]},
        _inhibit([f'alertname =~ "{kv}"'], [f'alertname =~ "{caused}"'], ["component"]),
    ]


def alertmanager_config(alerting: AlertingConfig, target: AlertTarget) -> dict[str, Any]:
    """Routing by severity (critical pages, warning tickets), grouping per alert and phase, inhibition."""
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": NULL_RECEIVER,
            "group_by": list(GROUP_BY),
            "group_wait": alerting.group_wait,
            "group_interval": alerting.group_interval,
            "repeat_interval": alerting.warning_repeat_interval,
            "routes": [
                # kube-prometheus-stack's always-firing Watchdog and its InfoInhibitor page nobody
                {"receiver": NULL_RECEIVER, "matchers": ['alertname = "Watchdog"']},
                {"receiver": NULL_RECEIVER, "matchers": ['alertname = "InfoInhibitor"']},
                {
                    "receiver": CRITICAL_RECEIVER,
                    "matchers": ['severity = "critical"'],
                    "repeat_interval": alerting.critical_repeat_interval,
                },
                {"receiver": WARNING_RECEIVER, "matchers": ['severity = "warning"']},
            ],
        },
        "inhibit_rules": inhibit_rules(),
        "receivers": [
            {"name": NULL_RECEIVER},
            _receiver(CRITICAL_RECEIVER, target),
            _receiver(WARNING_RECEIVER, target),
        ],
        "templates": ["/etc/alertmanager/config/*.tmpl"],
    }
