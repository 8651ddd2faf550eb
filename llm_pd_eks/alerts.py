"""Alert rules for the prefill/decode serving layer, as data (a PrometheusRule's `spec.groups`).

Each rule names a failure that returns 200 OK and so hides from a health check:
- KV transfers failing (NIXL counts them on the decode side): a ticket while vLLM's
  `kv_load_failure_policy: recompute` (llm_pd_eks/serve_app.py) heals them by recomputing the prefill
  on decode (the cost is latency, which the TTFT burn sees); a page when they coincide with requests
  the engine finishes in error, i.e. when they cost answers;
- no KV bytes moving while decode generates tokens: requests are not disaggregated at all;
- KV throughput below the floor of the GPU type (kv_transfer.kv_rank_floor_gbps): NIXL is off
  EFA, typically on UCX over TCP, which still works, only many times slower;
- TTFT / inter-token latency burning their SLO error budget, per phase (prefill vs decode), on
  the multiwindow pairs of the Google SRE workbook: fast and medium burn page, slow burn tickets;
- the decode KV cache nearly full (requests queue, then get preempted);
- Ray pods Pending: the autoscaler asked for a GPU node's worth of pod that never came;
- Ray Serve answering with server errors, or holding requests no replica takes (queueing);
- a serving or GPU scrape target failing, or every target of a phase gone: the alerts above would
  go quiet for want of data, not for health.

Pages (severity critical) are only what an operator can act on at once; warnings are tickets. An
error ratio or a latency burn pages only above a traffic floor (alerting.pageMinRequestRate): at a
few requests an hour one slow request is 100 % of them.

The PromQL for shared quantities (KV throughput, an SLO's error ratio) is built by one function each,
used by the alerts, the dashboards and `make verify` alike. Every alert is unit-tested with
`promtool test rules` (tests/integration/test_alert_rules.py), firing and not firing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

import pulumi

from . import metrics as m
from .catalog import GpuInstanceType
from .config.observability import AlertingConfig, ObservabilityConfig
from .kv_transfer import kv_rank_floor_gbps
from .serving_names import NAMESPACE as SERVING_NAMESPACE

GROUP_NAME = "llm-pd-eks.serving"


@dataclass(frozen=True)
class Burn:
    """One multiwindow burn-rate condition: the error ratio over both windows above rate x budget."""

    rate: float
    long: str
    short: str


# Google SRE workbook, "Alerting on SLOs", table 5-8 (multiwindow, multi-burn-rate, 30-day budget):
# 2% of the budget in 1 h (rate 14.4) or 5% in 6 h (rate 6) page; 10% in 3 days (rate 1) tickets.
# The short window (1/12 of the long one) lets the alert resolve soon after the burn stops.
PAGE_BURNS = (Burn(14.4, "1h", "5m"), Burn(6.0, "6h", "30m"))
TICKET_BURNS = (Burn(1.0, "3d", "6h"),)
FAST_BURN_RATE = PAGE_BURNS[0].rate
KV_WINDOW = "10m"  # long enough to hold several transfers at a low request rate
SERVE_ERROR_RATIO = 0.05  # server errors (5xx) above 5% of requests for 5 minutes page
SERVE_QUEUE_MINUTES = 10  # requests waiting for a replica that long: replicas are all at max_ongoing_requests
TARGET_DOWN_MINUTES = 5  # a failing scrape (3 retries at 15 s scrape + the 5m staleness margin)

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


def traffic_floor_expr(series: str, window: str, floor: float, by: str = m.PHASE_LABEL) -> str:
    """Requests per second over `window` at or above `floor`, per `by`: the `and` of a paging ratio."""
    return f"sum by ({by}) (rate({series}[{window}])) >= {floor:g}"


def _burn(
    histogram: str, threshold: float, objective: float, burns: tuple[Burn, ...], floor: Optional[float] = None
) -> str:
    """Either burn condition; each holds when the long AND the short window burn above its rate (and,
    for a page, the long window carried at least `floor` requests per second)."""
    budget = round(1 - objective, 6)
    conditions = [
        "("
        + " and ".join(
            [f"{slo_error_ratio_expr(histogram, threshold, w)} > ({b.rate:g} * {budget})" for w in (b.long, b.short)]
            + ([traffic_floor_expr(f"{histogram}_count", b.long, floor)] if floor is not None else [])
        )
        + ")"
        for b in burns
    ]
    return " or ".join(conditions)


def _burn_text(burns: tuple[Burn, ...]) -> str:
    return " or ".join(f"{b.rate:g}x over both {b.long} and {b.short}" for b in burns)


COMPONENT = "llm-pd"  # the `component` label of every alert here
RUNBOOK_PREFIX = "runbook-"  # headings "### Runbook: <Alert>" (docs/operations.md) get the anchor runbook-<alert>


def runbook_anchor(alert: str) -> str:
    """The anchor of an alert's runbook section (GitHub lower-cases heading text, drops `:`, turns
    spaces into `-`: "### Runbook: KVTransferFailures" -> `runbook-kvtransferfailures`)."""
    return RUNBOOK_PREFIX + alert.lower()


def runbook_url(config: ObservabilityConfig, alert: str) -> Optional[str]:
    """The absolute link to the alert's runbook; None while alerting.runbookBaseUrl is unset."""
    base = config.alerting.runbook_base_url
    return f"{base}#{runbook_anchor(alert)}" if base else None


def _alert(
    config: ObservabilityConfig, name: str, expr: str, for_: str, severity: str, summary: str, description: str
) -> dict[str, Any]:
    annotations = {"summary": summary, "description": description}
    link = runbook_url(config, name)
    if link:
        annotations["runbook_url"] = link
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "component": COMPONENT},
        "annotations": annotations,
    }


def kv_failure_alerts(config: ObservabilityConfig) -> list[dict[str, Any]]:
    """Failed KV transfers: a ticket while recompute heals them, a page when they cost answers."""
    failed = f"sum by ({m.PHASE_LABEL}) (increase({m.NIXL_FAILED_TRANSFERS}[{KV_WINDOW}])) > 0"
    errored = (
        f'sum by ({m.PHASE_LABEL}) (increase({m.REQUEST_SUCCESS}{{{m.FINISHED_REASON_LABEL}="error"}}[{KV_WINDOW}]))'
        " > 0"
    )
    return [
        _alert(
            config,
            "KVTransferFailures",
            failed,
            "5m",
            "warning",
            "NIXL KV-cache transfers are failing ({{ $labels.phase }})",
            "NIXL KV transfers failed in the last 10 minutes; decode recomputed those prefills (kv_load_failure_policy "
            "recompute), so the answers came, later. Look at the EFA fabric and NIXL's logs before it costs answers.",
        ),
        _alert(
            config,
            "KVTransferFailuresLoseAnswers",
            f"({failed}) and on ({m.PHASE_LABEL}) ({errored})",
            "2m",
            "critical",
            "KV transfers fail and requests end in error ({{ $labels.phase }})",
            "NIXL KV transfers failed and the engine finished requests with finished_reason error in the same "
            "10 minutes: the failures cost answers, not just latency.",
        ),
    ]


def alert_rules(config: ObservabilityConfig, instance: GpuInstanceType) -> list[dict[str, Any]]:
    """The alerting rules, thresholds from the stack config and the GPU catalog."""
    floor = kv_rank_floor_gbps(instance, config.kv_throughput_floor_fraction)
    decode = f'{m.PHASE_LABEL}="decode"'
    return [
        *kv_failure_alerts(config),
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
        *_burn_alerts(config, "TTFT", m.TTFT, config.ttft_slo_seconds, "Time to first token", "requests take over"),
        *_burn_alerts(
            config, "InterTokenLatency", m.ITL, config.itl_slo_seconds, "Inter-token latency", "tokens take over"
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
        *serve_alerts(config),
        *target_alerts(config),
    ]


def _burn_alerts(
    config: ObservabilityConfig, stem: str, histogram: str, slo: float, what: str, noun: str
) -> list[dict[str, Any]]:
    """The paging pair (fast, medium) as one alert and the slow burn as a ticket."""
    allowed = f"{1 - config.slo_objective:.2%}"
    return [
        _alert(
            config,
            f"{stem}BudgetBurn",
            _burn(histogram, slo, config.slo_objective, PAGE_BURNS, config.alerting.page_min_request_rate),
            "2m",
            "critical",
            what + " burns its SLO budget on {{ $labels.phase }}",
            f"{what}: the share of {noun.split()[0]} over {slo:g}s burns the allowed {allowed} at "
            f"{_burn_text(PAGE_BURNS)}, at {config.alerting.page_min_request_rate:g} requests/s or more: "
            "the month's budget goes in days.",
        ),
        _alert(
            config,
            f"{stem}BudgetSlowBurn",
            _burn(histogram, slo, config.slo_objective, TICKET_BURNS),
            "1h",
            "warning",
            what + " slowly burns its SLO budget on {{ $labels.phase }}",
            f"{what}: {noun} {slo:g}s more often than the allowed {allowed}, {_burn_text(TICKET_BURNS)}: "
            "at this rate the month's budget is spent before the month ends.",
        ),
    ]


def serve_alerts(config: ObservabilityConfig) -> list[dict[str, Any]]:
    """Ray Serve's own view: the proxy answering 5xx, requests waiting for a free replica."""
    requests = f"sum by (application) (rate({m.SERVE_HTTP_REQUESTS}[5m]))"
    errors = f'sum by (application) (rate({m.SERVE_HTTP_REQUESTS}{{status_code=~"5.."}}[5m]))'
    floor = traffic_floor_expr(m.SERVE_HTTP_REQUESTS, "5m", config.alerting.page_min_request_rate, "application")
    return [
        _alert(
            config,
            "ServeServerErrors",
            f"({errors} / {requests} > {SERVE_ERROR_RATIO:g}) and ({floor})",
            "5m",
            "critical",
            "Ray Serve answers {{ $value | humanizePercentage }} of requests with a server error",
            f"Over {SERVE_ERROR_RATIO:.0%} of HTTP requests to {{{{ $labels.application }}}} end in a 5xx: "
            "engines failing, replicas restarting or requests timing out.",
        ),
        _alert(
            config,
            "ServeRequestsQueued",
            f"sum by (application, deployment) ({m.SERVE_QUEUED}) > 0",
            f"{SERVE_QUEUE_MINUTES}m",
            "warning",
            "Requests wait for a free {{ $labels.deployment }} replica",
            f"For {SERVE_QUEUE_MINUTES} minutes requests have queued in Serve's router: every replica is at "
            "max_ongoing_requests and autoscaling has not caught up (maxReplicas, GPU nodes).",
        ),
    ]


def target_alerts(config: ObservabilityConfig, expected: tuple[str, ...] = m.PHASES) -> list[dict[str, Any]]:
    """Scrape targets of the serving layer: one failing, or a whole phase (of `expected`) gone from discovery."""
    serving = f'namespace="{SERVING_NAMESPACE}"'
    phases = "|".join(expected)
    return [
        _alert(
            config,
            "ServingTargetDown",
            f"min by (job, namespace, pod) ({m.SCRAPE_UP}{{{serving}}}) == 0",
            f"{TARGET_DOWN_MINUTES}m",
            "warning",
            "Prometheus cannot scrape {{ $labels.pod }}",
            "Its metrics are missing: the alerts on this pod's series stay quiet whatever happens on it.",
        ),
        _alert(
            config,
            "ServingTargetsMissing",
            f'sum by (namespace, {m.PHASE_LABEL}) ({m.SCRAPE_UP}{{{serving}, {m.PHASE_LABEL}=~"{phases}"}}) == 0'
            + "".join(f' or absent({m.SCRAPE_UP}{{{serving}, {m.PHASE_LABEL}="{p}"}})' for p in expected),
            "15m",
            "critical",
            "No serving pod of a phase is scraped",
            "Every vLLM/NIXL alert is blind: the pods are gone from discovery (RayService down, PodMonitor "
            "changed) or none answers its scrape.",
        ),
    ]


def recording_rules() -> list[dict[str, Any]]:
    return [{"record": KV_THROUGHPUT_RECORD, "expr": kv_throughput_gbps_expr()}]


def rule_groups(
    config: ObservabilityConfig, instance: GpuInstanceType, phases: tuple[str, ...] = m.PHASES
) -> list[dict[str, Any]]:
    """`spec.groups` of the PrometheusRule (and the file `promtool test rules` loads). `phases`: the
    serving's worker groups; without a decode phase (aggregated serving) no KV moves between pods, so
    the KV-transfer alerts are left out and the scrape alerts expect the phases there are."""
    rules = alert_rules(config, instance)
    if "decode" not in phases:
        rules = [r for r in rules if r["alert"] not in KV_PATH_ALERTS]
        names = {"ServingTargetDown", "ServingTargetsMissing"}
        rules = [r for r in rules if r["alert"] not in names] + target_alerts(config, phases)
    return [{"name": GROUP_NAME, "rules": [*recording_rules(), *rules]}]


# --- delivery: the Alertmanager configuration (kube-prometheus-stack value `alertmanager.config`) -------

NULL_RECEIVER = "null"  # the chart's own sink for InfoInhibitor and `info` (values.yaml `alertmanager.config`)
CRITICAL_RECEIVER = "llm-pd-critical"  # pages
WARNING_RECEIVER = "llm-pd-warning"  # tickets
HEARTBEAT_RECEIVER = "heartbeat"  # the dead-man's switch: Watchdog to an external heartbeat receiver
# Alerts of the kubernetes-mixin (kube-prometheus-stack's default rules) on what EKS runs for the
# cluster: the API server's availability, its error budget, its client certificates and aggregated
# APIs. Nobody on this team can act on them at once (an AWS support case can): tickets, never pages.
EKS_CONTROL_PLANE_ALERTS = (
    "KubeAPIDown",
    "KubeAPIErrorBudgetBurn",
    "KubeAPITerminatedRequests",
    "KubeAggregatedAPIDown",
    "KubeAggregatedAPIErrors",
    "KubeClientCertificateExpiration",
)
# Alerts whose cause is the KV path: while one fires, the TTFT burn it causes is not paged separately
# (a failed, stalled or slow KV transfer delays every first token on the decode side).
KV_PATH_ALERTS = ("KVTransferFailures", "KVTransferFailuresLoseAnswers", "KVTransferStalled", "KVThroughputBelowFloor")
KV_CAUSED_ALERTS = ("TTFTBudgetBurn", "TTFTBudgetSlowBurn")
# A paging burn holds back the slow-burn ticket of the same SLO and phase (one budget, one notice).
BURN_STEMS = ("TTFT", "InterTokenLatency")
GROUP_BY = ["alertname", m.PHASE_LABEL, "namespace"]


@dataclass(frozen=True)
class SnsTarget:
    """An SNS topic the program creates; Alertmanager signs with SigV4 (credentials: its IRSA role)."""

    topic_arn: pulumi.Input[str]
    region: str


@dataclass(frozen=True)
class HeartbeatTarget:
    """The external heartbeat receiver Watchdog is posted to (alerting.heartbeatUrl)."""

    url: str


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
    transcribed), the P/D one (a KV-path alert holds back the TTFT burns it causes) and a paging burn
    holding back the slow-burn ticket of the same SLO."""
    kv = "|".join(KV_PATH_ALERTS)
    caused = "|".join(KV_CAUSED_ALERTS)
    return [
        _inhibit(["severity = critical"], ["severity =~ warning|info"], ["namespace", "alertname"]),
        _inhibit(["severity = warning"], ["severity = info"], ["namespace", "alertname"]),
        _inhibit(["alertname = InfoInhibitor"], ["severity = info"], ["namespace"]),
        {"target_matchers": ["alertname = InfoInhibitor"]},
        _inhibit([f'alertname =~ "{kv}"'], [f'alertname =~ "{caused}"'], ["component"]),
        *(
            _inhibit(
                [f'alertname = "{stem}BudgetBurn"'],
                [f'alertname = "{stem}BudgetSlowBurn"'],
                ["component", m.PHASE_LABEL],
            )
            for stem in BURN_STEMS
        ),
    ]


def alertmanager_config(alerting: AlertingConfig, target: AlertTarget, tickets: AlertTarget) -> dict[str, Any]:
    """Routing by severity (critical to `target`, the pages; warning to `tickets`), grouping per alert and
    phase, inhibition, and the dead-man's switch.

    The default route (the root's receiver) is the ticket receiver: an alert no route names, without a
    severity or with another one, reaches someone instead of the null sink. kube-prometheus-stack's
    always-firing Watchdog goes to alerting.heartbeatUrl every heartbeatInterval (nowhere while it is
    unset, which the deploy gate refuses); the mixin's alerts on the EKS control plane are tickets
    whatever their severity; only InfoInhibitor and `info` alerts (the chart's own "informational only"
    severity) go nowhere.
    """
    heartbeat: dict[str, Any] = {"receiver": NULL_RECEIVER, "matchers": ['alertname = "Watchdog"']}
    receivers: list[dict[str, Any]] = [{"name": NULL_RECEIVER}]
    if alerting.heartbeat_url is not None:
        heartbeat = {
            "receiver": HEARTBEAT_RECEIVER,
            "matchers": ['alertname = "Watchdog"'],
            "group_by": ["alertname"],
            "group_wait": "0s",
            "group_interval": alerting.heartbeat_interval,
            "repeat_interval": alerting.heartbeat_interval,
        }
        receivers.append(
            {"name": HEARTBEAT_RECEIVER, "webhook_configs": [{"url": alerting.heartbeat_url, "send_resolved": False}]}
        )
    eks = "|".join(EKS_CONTROL_PLANE_ALERTS)
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": WARNING_RECEIVER,
            "group_by": list(GROUP_BY),
            "group_wait": alerting.group_wait,
            "group_interval": alerting.group_interval,
            "repeat_interval": alerting.warning_repeat_interval,
            "routes": [
                heartbeat,
                {"receiver": WARNING_RECEIVER, "matchers": [f'alertname =~ "{eks}"']},
                {"receiver": NULL_RECEIVER, "matchers": ['alertname = "InfoInhibitor"']},
                {"receiver": NULL_RECEIVER, "matchers": ['severity = "info"']},
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
            *receivers,
            _receiver(CRITICAL_RECEIVER, target),
            _receiver(WARNING_RECEIVER, tickets),
        ],
        "templates": ["/etc/alertmanager/config/*.tmpl"],
    }
