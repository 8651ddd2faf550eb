"""The `observability` section: Prometheus, Grafana, the DCGM exporter, alert thresholds and alert
delivery (llm_pd_eks/observability.py, llm_pd_eks/alerts.py)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from .. import versions
from ..metrics import ITL_BUCKETS, TTFT_BUCKETS
from .base import Strict, exact_chart_version


class SnsSubscriptionConfig(Strict):
    """One subscription of the alert topic (SNS Subscribe: Protocol and Endpoint)."""

    protocol: Literal["email", "email-json", "https", "http", "sms", "sqs", "lambda"] = Field(
        description="SNS protocol of the subscription (email needs the recipient to confirm)."
    )
    endpoint: str = Field(min_length=1, description="Address, URL, phone number or ARN the topic delivers to.")
    severity: Literal["critical", "warning"] = Field(
        description="Which alerts it receives: critical (pages: the on-call's pager, its own topic) or warning "
        "(tickets: a queue or a ticket system's inbox, the tickets topic). Each severity needs one."
    )


class AlertingConfig(Strict):
    """Where alerts go: routing by severity, grouping, inhibition (llm_pd_eks/alerts.py)."""

    receiver: Literal["sns", "webhook"] = Field(
        default="sns",
        description="Where pages (critical) go. sns: a topic this program creates, with the critical "
        "snsSubscriptions; webhook: the URL in the Pulumi secret alertWebhookUrl (PagerDuty Events, any HTTP "
        "receiver). Tickets (warning) always go to a tickets topic with the warning snsSubscriptions.",
    )
    sns_subscriptions: list[SnsSubscriptionConfig] = Field(
        default_factory=list, description="Subscriptions of the alert topic (receiver sns)."
    )
    runbook_base_url: Optional[str] = Field(
        default=None,
        pattern=r"^https://[^\s#]+$",
        description="Absolute https URL of the page holding the runbooks (docs/operations.md where the "
        "repository is browsed, e.g. https://github.com/<org>/<repo>/blob/main/docs/operations.md); every "
        "alert's runbook_url is this plus its runbook anchor. Unset: alerts carry no runbook link and the "
        "deploy gate refuses the stack.",
    )
    heartbeat_url: Optional[str] = Field(
        default=None,
        pattern=r"^https://[^\s]+$",
        description="Dead-man's switch: the https URL of an external heartbeat receiver (healthchecks.io, "
        "Opsgenie or PagerDuty heartbeats, Cronitor) that Alertmanager posts kube-prometheus-stack's always-firing "
        "Watchdog to every heartbeatInterval; that service pages when the posts stop (Prometheus, Alertmanager "
        "or the way out is down). Use a receiver whose ping URL carries no API key (it is plain config). Unset: "
        "Watchdog goes nowhere and the deploy gate refuses the stack.",
    )
    heartbeat_interval: str = Field(
        default="1m",
        pattern=r"^\d+[smh]$",
        description="How often Watchdog is posted to heartbeatUrl; the receiver's grace period must be longer.",
    )
    page_min_request_rate: float = Field(
        default=0.05,
        gt=0.0,
        description="Requests per second (per phase or application, over the alert's window) below which an "
        "error-ratio or latency-burn alert does not page: a handful of requests makes any ratio noise "
        "(0.05/s = 3 a minute).",
    )
    group_wait: str = Field(
        default="30s",
        pattern=r"^\d+[smh]$",
        description="How long a new alert group waits for more alerts before notifying.",
    )
    group_interval: str = Field(
        default="5m",
        pattern=r"^\d+[smh]$",
        description="How long before notifying about new alerts in a notified group.",
    )
    critical_repeat_interval: str = Field(
        default="1h", pattern=r"^\d+[smh]$", description="How often a still-firing critical alert is sent again."
    )
    warning_repeat_interval: str = Field(
        default="12h", pattern=r"^\d+[smh]$", description="How often a still-firing warning is sent again."
    )

    @model_validator(mode="after")
    def _pages_go_one_way(self) -> "AlertingConfig":
        if self.receiver == "webhook" and any(s.severity == "critical" for s in self.sns_subscriptions):
            raise ValueError(
                "snsSubscriptions with severity critical need receiver sns: with receiver webhook pages go to "
                "alertWebhookUrl (make them severity warning, or drop them)"
            )
        return self


class ObservabilityConfig(Strict):
    """What watches the serving layer: kube-prometheus-stack, the DCGM exporter and the alert thresholds."""

    enabled: bool = Field(
        default=True,
        description="Deploy Prometheus, Grafana, the DCGM exporter, scrape configs, dashboards and alerts.",
    )
    kube_prometheus_stack_chart_version: str = Field(
        default=versions.KUBE_PROMETHEUS_STACK_CHART_VERSION,
        description="kube-prometheus-stack chart version (https://prometheus-community.github.io/helm-charts).",
    )
    dcgm_exporter_chart_version: str = Field(
        default=versions.DCGM_EXPORTER_CHART_VERSION,
        description="dcgm-exporter chart version (https://nvidia.github.io/dcgm-exporter/helm-charts).",
    )
    retention: str = Field(
        default="15d", pattern=r"^\d+[hdw]$", description="How long Prometheus keeps samples (e.g. 15d)."
    )
    ttft_slo_seconds: float = Field(
        default=2.5, description="Time-to-first-token SLO per phase; must be a bucket bound of vLLM's TTFT histogram."
    )
    itl_slo_seconds: float = Field(
        default=0.1, description="Inter-token latency SLO per phase; must be a bucket bound of vLLM's ITL histogram."
    )
    slo_objective: float = Field(
        default=0.99, gt=0.5, lt=1.0, description="Fraction of requests that must meet each latency SLO."
    )
    kv_cache_full_ratio: float = Field(
        default=0.9, gt=0.0, le=1.0, description="Decode KV-cache usage (0..1) above which the cache counts as full."
    )
    kv_throughput_floor_fraction: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="KV throughput floor as a fraction of the GPU type's reference NIXL-over-EFA throughput.",
    )
    pending_minutes: int = Field(
        default=15, ge=1, le=240, description="Minutes a Ray pod may stay Pending before the replicas-pending alert."
    )
    alerting: AlertingConfig = Field(
        default_factory=AlertingConfig, description="Alert delivery: receiver, subscriptions, grouping intervals."
    )
    prometheus_active_series: int = Field(
        default=300_000,
        ge=10_000,
        le=20_000_000,
        description="Expected active series (check `prometheus_tsdb_head_series`); sizes Prometheus's volume "
        "with the retention and the scrape interval.",
    )
    grafana_volume_gib: int = Field(default=10, ge=1, le=1000, description="Grafana's gp3 volume, GiB.")

    @field_validator("kube_prometheus_stack_chart_version", "dcgm_exporter_chart_version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return exact_chart_version(value, "88.5.3")

    @field_validator("ttft_slo_seconds")
    @classmethod
    def _ttft_bucket(cls, value: float) -> float:
        return _bucket_bound(value, TTFT_BUCKETS, "TTFT")

    @field_validator("itl_slo_seconds")
    @classmethod
    def _itl_bucket(cls, value: float) -> float:
        return _bucket_bound(value, ITL_BUCKETS, "inter-token latency")


def _bucket_bound(value: float, buckets: tuple[float, ...], what: str) -> float:
    # `le="<slo>"` must name a real bucket, or the SLO series is empty and the alert can never fire.
    if float(value) not in buckets:
        raise ValueError(
            f"{value} is not a bucket bound of vLLM's {what} histogram; choose one of "
            + ", ".join(f"{b:g}" for b in buckets)
        )
    return float(value)
