"""Observability of the serving layer: Prometheus + Grafana (kube-prometheus-stack), the NVIDIA DCGM
exporter, a PodMonitor for every Ray pod, the alert rules and the serving dashboard.

- kube-prometheus-stack (pinned, prometheus-community) brings the Prometheus operator and its CRDs,
  Prometheus, Alertmanager, Grafana with its dashboard sidecar, kube-state-metrics and node-exporter.
  Its Prometheus selects only monitors and rules labelled `release: <name>` unless the
  `*SelectorNilUsesHelmValues` values are false; they are, so the objects below need no chart label.
- The DCGM exporter (pinned, NVIDIA) runs on the GPU nodes only and brings its own ServiceMonitor;
  a relabelling adds the node name, so GPU panels group by node.
- The PodMonitor scrapes KubeRay's `metrics` container port (8080, KubeRay's DefaultMetricsPort /
  MetricsPortName; KubeRay's own config/prometheus/podMonitor.yaml scrapes workers the same way) on
  head and worker pods and copies `ray.io/group` into `phase` (prefill, decode,
  headgroup): every vLLM and NIXL series then says which side it comes from.
- The control plane EKS runs is not scrapeable (kube-controller-manager, kube-scheduler and etcd run
  in AWS's account) and neither is kube-proxy (EKS's add-on serves its metrics on 127.0.0.1:10249
  only): the chart's monitors and rules for them are off, or KubeControllerManagerDown,
  KubeSchedulerDown, KubeProxyDown and etcd's alerts would fire forever (EKS_MANAGED_COMPONENTS).
- Alerts reach someone, a destination per severity: Alertmanager's configuration
  (llm_pd_eks/alerts.py) routes pages to the pages topic created here (or to a webhook whose URL is a
  Pulumi secret) and tickets to the tickets topic; Alertmanager signs with SigV4 through its own
  IRSA role, allowed only `sns:Publish` on those topics. Watchdog goes to an external heartbeat.
- Prometheus, Alertmanager and Grafana keep their data on gp3 volumes (llm_pd_eks/storage.py) in the
  system nodes' AZs; Prometheus's is sized from retention and scrape load.
- CRDs: Helm installs a chart's `crds/` only on first install and never upgrades them. The chart's own
  CRD upgrade job (kube-prometheus-stack 88.5.3 values `crds.upgradeJob`, a pre-install/pre-upgrade
  hook running `kubectl apply --server-side` of the chart's CRDs) applies them before the operator.
- EFA device counters: there is no official, pinnable EFA exporter (aws-samples ships a node_exporter
  fork to build yourself). EFA is instead proven by `make verify` (devices allocatable, NIXL on
  LIBFABRIC, KV throughput over the floor) and watched by the KV-throughput alert.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from . import metrics as m
from .alerts import AlertTarget, SnsTarget, WebhookTarget, alertmanager_config, rule_groups
from .catalog import GpuInstanceType
from .cluster import irsa_trust_policy
from .config.observability import ObservabilityConfig
from .dashboards import DASHBOARD_LABEL, dashboard_json
from .efa_gpu_nodes import GPU_LABELS, GPU_TOLERATION
from .helm import HelmChart, pinned_release
from .kv_transfer import kv_rank_floor_gbps
from .serving_names import NAMESPACE as SERVING_NAMESPACE
from .storage import STORAGE_CLASS, prometheus_volume
from .system_nodes import SYSTEM_LABELS

PROMETHEUS_STACK_CHART = HelmChart("kube-prometheus-stack", "https://prometheus-community.github.io/helm-charts")
DCGM_CHART = HelmChart("dcgm-exporter", "https://nvidia.github.io/dcgm-exporter/helm-charts")
NAMESPACE = "monitoring"
# kube-prometheus-stack names its objects after the release (= chart name here, see helm.pinned_release).
PROMETHEUS_SERVICE = "kube-prometheus-stack-prometheus"
PROMETHEUS_PORT_NAME = "http-web"
GRAFANA_ADMIN_SECRET = "grafana-admin"
# The chart's Alertmanager service account (`<fullname>-alertmanager`, fullname = the release name here).
ALERTMANAGER_SERVICE_ACCOUNT = "kube-prometheus-stack-alertmanager"
ALERTMANAGER_VOLUME_GIB = 2  # silences and the notification log

RAY_METRICS_PORT_NAME = "metrics"  # KubeRay utils.MetricsPortName (DefaultMetricsPort 8080)
RAY_GROUP_LABEL = "ray.io/group"  # KubeRay utils.RayNodeGroupLabelKey: the worker group name
RAY_NODE_TYPE_LABEL = "ray.io/node-type"  # KubeRay utils.RayNodeTypeLabelKey: head | worker
SCRAPE_INTERVAL = "15s"
# kube-prometheus-stack 88.5.3 values: the components EKS manages (their ServiceMonitor and Service,
# `<component>.enabled`) and the default rule groups that alert or record on them
# (`defaultRules.rules.<group>`); both off, so no rule waits for a target that cannot exist.
EKS_MANAGED_COMPONENTS = ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")
EKS_MANAGED_RULE_GROUPS = (
    "kubeControllerManager",
    "kubeSchedulerAlerting",
    "kubeSchedulerRecording",
    "etcd",
    "kubeProxy",
)


def _meta_label(pod_label: str) -> str:
    """Prometheus's service-discovery name of a pod label (non-alphanumerics become `_`)."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in pod_label)


def ray_relabelings() -> list[dict[str, Any]]:
    return [
        {"sourceLabels": [_meta_label(RAY_GROUP_LABEL)], "targetLabel": m.PHASE_LABEL, "action": "replace"},
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": m.NODE_LABEL, "action": "replace"},
    ]


def ray_pod_monitor_spec() -> dict[str, Any]:
    return {
        "namespaceSelector": {"matchNames": [SERVING_NAMESPACE]},
        "selector": {
            "matchExpressions": [{"key": RAY_NODE_TYPE_LABEL, "operator": "In", "values": ["head", "worker"]}]
        },
        "podMetricsEndpoints": [
            {"port": RAY_METRICS_PORT_NAME, "interval": SCRAPE_INTERVAL, "relabelings": ray_relabelings()}
        ],
    }


def _pvc(gib: int) -> dict[str, Any]:
    """A prometheus-operator `storage(Spec).volumeClaimTemplate` on the gp3 class."""
    return {
        "volumeClaimTemplate": {
            "spec": {
                "storageClassName": STORAGE_CLASS,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": f"{gib}Gi"}},
            }
        }
    }


def prometheus_stack_values(
    config: ObservabilityConfig,
    grafana_secret: Optional[str],
    alert_target: Optional[AlertTarget] = None,
    alertmanager_role_arn: Optional[pulumi.Input[str]] = None,
    ticket_target: Optional[AlertTarget] = None,
) -> dict[str, Any]:
    """Everything on the system nodes except node-exporter: a DaemonSet whose chart default (4.56.1,
    the version kube-prometheus-stack 88.5.3 pins) tolerates every NoSchedule taint, the GPU one included."""
    system = dict(SYSTEM_LABELS)
    volume = prometheus_volume(config.prometheus_active_series, SCRAPE_INTERVAL, config.retention)
    grafana: dict[str, Any] = {
        "nodeSelector": system,
        "sidecar": {"dashboards": {"enabled": True}},
        "persistence": {
            "enabled": True,
            "type": "pvc",
            "storageClassName": STORAGE_CLASS,
            "accessModes": ["ReadWriteOnce"],
            "size": f"{config.grafana_volume_gib}Gi",
        },
        # a ReadWriteOnce volume follows one pod: the chart's default RollingUpdate would start the new pod
        # while the old one still holds it (Grafana chart values: persistence, deploymentStrategy)
        "deploymentStrategy": {"type": "Recreate"},
    }
    if grafana_secret is not None:
        grafana["admin"] = {"existingSecret": grafana_secret, "userKey": "admin-user", "passwordKey": "admin-password"}
    alertmanager: dict[str, Any] = {
        "alertmanagerSpec": {"nodeSelector": system, "storage": _pvc(ALERTMANAGER_VOLUME_GIB)},
    }
    if alert_target is not None and ticket_target is not None:
        alertmanager["config"] = alertmanager_config(config.alerting, alert_target, ticket_target)
    if alertmanager_role_arn is not None:
        alertmanager["serviceAccount"] = {"annotations": {"eks.amazonaws.com/role-arn": alertmanager_role_arn}}
    return {
        **{component: {"enabled": False} for component in EKS_MANAGED_COMPONENTS},
        "defaultRules": {"rules": dict.fromkeys(EKS_MANAGED_RULE_GROUPS, False)},
        # the chart's own CRD upgrade hook: CRDs applied (server-side) before the operator on every upgrade
        "crds": {"upgradeJob": {"enabled": True, "forceConflicts": True, "nodeSelector": system}},
        "prometheusOperator": {"nodeSelector": system},
        "prometheus": {
            "prometheusSpec": {
                "nodeSelector": system,
                "retention": config.retention,
                "retentionSize": volume.retention_size,
                "storageSpec": _pvc(volume.gib),
                "podMonitorSelectorNilUsesHelmValues": False,
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
            }
        },
        "alertmanager": alertmanager,
        "grafana": grafana,
        "kube-state-metrics": {
            "nodeSelector": system,
            # kube_node_labels carries only allow-listed labels: the cost panel needs the instance type.
            "metricLabelsAllowlist": ["nodes=[node.kubernetes.io/instance-type]"],
        },
    }


def sns_publish_policy(*topic_arns: str) -> str:
    resource: Any = topic_arns[0] if len(topic_arns) == 1 else list(topic_arns)
    return json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sns:Publish", "Resource": resource}]}
    )


def dcgm_values() -> dict[str, Any]:
    return {
        "nodeSelector": dict(GPU_LABELS),
        "tolerations": [GPU_TOLERATION],
        "serviceMonitor": {
            "enabled": True,
            "interval": SCRAPE_INTERVAL,
            "relabelings": [
                {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": m.NODE_LABEL, "action": "replace"}
            ],
        },
    }


@dataclass(frozen=True)
class ObservabilityArgs:
    """Inputs of `Observability`; the provider, node group, OIDC provider and storage class come from the
    other components."""

    config: ObservabilityConfig
    """The `observability` section: chart versions, retention, SLOs, alert thresholds, alert delivery."""
    instance: GpuInstanceType
    """The GPU node type (its reference KV throughput sets the alert floor)."""
    provider: k8s.Provider
    """The cluster's Kubernetes provider."""
    hourly_prices: Mapping[str, float]
    """USD/h of the node types this stack runs (the dashboard's cost panel)."""
    gpu_node_group: pulumi.Resource
    """The GPU node group: the DCGM exporter exists for these nodes."""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    """What the charts wait for: the system nodes, the CNI and DNS add-ons."""
    grafana_admin_password: Optional[pulumi.Input[str]] = None
    """Grafana's admin password, kept a Pulumi secret; omitted: the chart generates one."""
    region: str = "us-west-2"
    """The SNS topic's region (Alertmanager signs for it)."""
    oidc_provider_arn: Optional[pulumi.Input[str]] = None
    """The cluster's IAM OIDC provider: Alertmanager's publish role trusts it (required)."""
    oidc_issuer: Optional[pulumi.Input[str]] = None
    """The OIDC issuer without `https://` (required: Alertmanager publishes tickets to SNS)."""
    alert_webhook_url: Optional[pulumi.Input[str]] = None
    """The alert webhook's URL, kept a Pulumi secret (receiver webhook; required there)."""
    storage_class: Optional[pulumi.Resource] = None
    """The gp3 StorageClass the volumes bind to."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags on every AWS resource."""
    phases: tuple[str, ...] = m.PHASES
    """The serving phases (the Ray worker groups: prefill and decode, or the one aggregated group): the
    scrape alerts expect each, and an aggregated stack gets no KV-transfer alerts (it moves no KV)."""


def check_observability_args(args: ObservabilityArgs) -> None:
    """`pulumi.InputPropertyError` naming the input the `observability` section alone cannot rule out."""
    receiver = args.config.alerting.receiver
    if receiver == "webhook" and args.alert_webhook_url is None:
        raise pulumi.InputPropertyError(
            "alert_webhook_url", "not given, but config.alerting.receiver is webhook: alerts would go nowhere"
        )
    for key in ("oidc_provider_arn", "oidc_issuer"):
        if getattr(args, key) is None:
            raise pulumi.InputPropertyError(
                key, "not given: Alertmanager could not publish to the alert topics (tickets always go to SNS)"
            )


class Observability(pulumi.ComponentResource):
    prometheus_stack: k8s.helm.v3.Release
    dcgm_exporter: k8s.helm.v3.Release
    ray_pod_monitor: k8s.apiextensions.CustomResource
    rules: k8s.apiextensions.CustomResource
    dashboard: k8s.core.v1.ConfigMap
    grafana_secret: Optional[k8s.core.v1.Secret]
    namespace: k8s.core.v1.Namespace
    alert_topic: Optional[aws.sns.Topic]
    ticket_topic: aws.sns.Topic
    alertmanager_role: Optional[aws.iam.Role]

    def __init__(self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None):
        check_observability_args(args)
        super().__init__("llm-pd-eks:index:Observability", name, None, opts)
        config = args.config

        # The namespace is a resource of its own (not the chart's createNamespace): the admin Secret
        # below is applied before the chart, and Kubernetes refuses an object whose namespace does
        # not exist yet. On destroy it goes last, after everything in it.
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=NAMESPACE),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
        )
        in_namespace = [self.namespace]

        self.grafana_secret = None
        if args.grafana_admin_password is not None:
            self.grafana_secret = k8s.core.v1.Secret(
                f"{name}-grafana-admin",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=GRAFANA_ADMIN_SECRET, namespace=NAMESPACE),
                type="Opaque",
                string_data={"admin-user": "admin", "admin-password": args.grafana_admin_password},
                opts=pulumi.ResourceOptions(
                    parent=self, provider=args.provider, depends_on=[*args.depends_on, *in_namespace]
                ),
            )
        secret_deps: list[pulumi.Resource] = [self.grafana_secret] if self.grafana_secret is not None else []
        if args.storage_class is not None:
            secret_deps.append(args.storage_class)
        target, tickets = self._alert_targets(name, args)
        self.prometheus_stack = pinned_release(
            f"{name}-prometheus-stack",
            PROMETHEUS_STACK_CHART,
            config.kube_prometheus_stack_chart_version,
            NAMESPACE,
            prometheus_stack_values(
                config,
                GRAFANA_ADMIN_SECRET if self.grafana_secret is not None else None,
                target,
                self.alertmanager_role.arn if self.alertmanager_role is not None else None,
                tickets,
            ),
            pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[*args.depends_on, *in_namespace, *secret_deps]
            ),
        )
        # Everything below needs the chart's CRDs (PodMonitor, ServiceMonitor, PrometheusRule) or namespace.
        after_stack = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.prometheus_stack])
        self.dcgm_exporter = pinned_release(
            f"{name}-dcgm-exporter",
            DCGM_CHART,
            config.dcgm_exporter_chart_version,
            NAMESPACE,
            dcgm_values(),
            pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[self.prometheus_stack, args.gpu_node_group]
            ),
        )
        self.ray_pod_monitor = k8s.apiextensions.CustomResource(
            f"{name}-ray-podmonitor",
            api_version="monitoring.coreos.com/v1",
            kind="PodMonitor",
            metadata=k8s.meta.v1.ObjectMetaArgs(name="ray", namespace=NAMESPACE),
            spec=ray_pod_monitor_spec(),
            opts=after_stack,
        )
        self.rules = k8s.apiextensions.CustomResource(
            f"{name}-rules",
            api_version="monitoring.coreos.com/v1",
            kind="PrometheusRule",
            metadata=k8s.meta.v1.ObjectMetaArgs(name="llm-pd-serving", namespace=NAMESPACE),
            spec={"groups": rule_groups(config, args.instance, args.phases)},
            opts=after_stack,
        )
        floor = kv_rank_floor_gbps(args.instance, config.kv_throughput_floor_fraction)
        self.dashboard = k8s.core.v1.ConfigMap(
            f"{name}-dashboard",
            metadata=k8s.meta.v1.ObjectMetaArgs(name="llm-pd-dashboard", namespace=NAMESPACE, labels=DASHBOARD_LABEL),
            data={"llm-pd-serving.json": dashboard_json(floor, args.hourly_prices, args.phases)},
            opts=after_stack,
        )
        self.register_outputs(
            {
                "prometheus": f"{PROMETHEUS_SERVICE}.{NAMESPACE}.svc:9090",
                "kvFloorGbps": floor,
                "dashboardUid": json.loads(dashboard_json(floor, args.hourly_prices, args.phases))["uid"],
                "alertTopicArn": self.alert_topic.arn if self.alert_topic is not None else None,
                "ticketTopicArn": self.ticket_topic.arn,
            }
        )

    def _alert_targets(self, name: str, args: ObservabilityArgs) -> tuple[Optional[AlertTarget], AlertTarget]:
        """(pages, tickets): the pages topic or the secret webhook, and the tickets topic, each topic with the
        subscriptions of its severity, and Alertmanager's role that may publish to them."""
        alerting = args.config.alerting
        self.alert_topic, self.alertmanager_role = None, None
        opts = pulumi.ResourceOptions(parent=self)
        if alerting.receiver == "sns":
            self.alert_topic = aws.sns.Topic(f"{name}-alerts", tags=dict(args.tags), opts=opts)
        self.ticket_topic = aws.sns.Topic(f"{name}-tickets", tags=dict(args.tags), opts=opts)
        topics = {"critical": self.alert_topic, "warning": self.ticket_topic}
        for number, sub in enumerate(alerting.sns_subscriptions):
            topic = topics[sub.severity]
            if topic is None:  # a critical subscription while pages go to the webhook: nothing to subscribe to
                continue
            aws.sns.TopicSubscription(
                f"{name}-alerts-{number}",
                topic=topic.arn,
                protocol=sub.protocol,
                endpoint=sub.endpoint,
                opts=opts,
            )
        arns = [t.arn for t in topics.values() if t is not None]
        if args.oidc_provider_arn is not None and args.oidc_issuer is not None:
            self.alertmanager_role = aws.iam.Role(
                f"{name}-alertmanager-role",
                description=f"Alertmanager (IRSA, {NAMESPACE}/{ALERTMANAGER_SERVICE_ACCOUNT}): publish alerts to SNS",
                assume_role_policy=pulumi.Output.all(args.oidc_provider_arn, args.oidc_issuer).apply(
                    lambda a: irsa_trust_policy(a[0], a[1], NAMESPACE, ALERTMANAGER_SERVICE_ACCOUNT)
                ),
                tags=dict(args.tags),
                opts=opts,
            )
            aws.iam.RolePolicy(
                f"{name}-alertmanager-publish",
                role=self.alertmanager_role.id,
                policy=pulumi.Output.all(*arns).apply(lambda a: sns_publish_policy(*a)),
                opts=opts,
            )
        tickets = SnsTarget(self.ticket_topic.arn, args.region)
        if self.alert_topic is None:
            return (WebhookTarget(args.alert_webhook_url) if args.alert_webhook_url is not None else None), tickets
        return SnsTarget(self.alert_topic.arn, args.region), tickets
