"""The observability component as registered by each stack, and its config section.

The PodMonitor and PrometheusRule are validated against the prometheus-operator CRDs that the pinned
kube-prometheus-stack chart installs (vendored: tests/data/prometheus-operator/SOURCE).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml
from helpers import DATA, config_problems, merged, validate_values

from llm_pd_eks import metrics as m
from llm_pd_eks.alerts import rule_groups
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.dashboards import DASHBOARD_LABEL, DASHBOARD_UID, expressions, hourly_cost_expr
from llm_pd_eks.efa_gpu_nodes import GPU_TOLERATION
from llm_pd_eks.kv_transfer import kv_rank_floor_gbps
from llm_pd_eks.observability import DCGM_CHART, PROMETHEUS_STACK_CHART
from llm_pd_eks.serving_names import NAMESPACE as SERVING_NAMESPACE
from llm_pd_eks_tools.core.stack import load_stack_config
from llm_pd_eks_tools.core.stack import stack_config as checked_in_config
from llm_pd_eks_tools.core.stackfile import PROJECT
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program

RELEASE = "kubernetes:helm.sh/v3:Release"
POD_MONITOR = "kubernetes:monitoring.coreos.com/v1:PodMonitor"
PROMETHEUS_RULE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"

GOOD = {
    "network": {"vpcCidr": "10.0.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"]},
    "gpuNodes": {"instanceType": "g6e.12xlarge", "availabilityZone": "us-west-2a", "maxSize": 2},
}


def crd_schema(name: str) -> dict[str, Any]:
    crd = yaml.safe_load((DATA / "prometheus-operator" / f"crd-{name}.yaml").read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return v1["schema"]["openAPIV3Schema"]


def validate(instance: dict[str, Any], schema: dict[str, Any]) -> None:
    """Validate without checking the schema itself: Kubernetes CRDs carry Go RE2 patterns (`^(?i)...`)
    that Python's `re` refuses to compile; none of them applies to a field these objects set."""
    jsonschema.Draft202012Validator(schema).validate(instance)


def one(run: ProgramRun, type_: str, name_part: str = "") -> Any:
    (found,) = [r for r in run.of_type(type_) if name_part in r.name]
    return found


def manifest(reg: Any) -> dict[str, Any]:
    return json.loads(json.dumps({k: reg.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}))


# --- config -------------------------------------------------------------------------------------


def test_on_by_default_with_pinned_charts():
    cfg = validate_values(GOOD).observability
    assert cfg.enabled is True
    assert (cfg.kube_prometheus_stack_chart_version, cfg.dcgm_exporter_chart_version) == ("88.5.3", "4.8.2")


@pytest.mark.parametrize(
    "override, key, words",
    [
        ({"kubePrometheusStackChartVersion": "88.x"}, "kubePrometheusStackChartVersion", "exact chart version"),
        ({"ttftSloSeconds": 3}, "ttftSloSeconds", "not a bucket bound of vLLM's TTFT histogram"),
        ({"itlSloSeconds": 0.09}, "itlSloSeconds", "inter-token latency histogram"),
        ({"sloObjective": 1.0}, "sloObjective", "less than 1"),
        ({"retention": "forever"}, "retention", "pattern"),
        ({"grafanaUrl": "x"}, "grafanaUrl", "unknown key"),
    ],
)
def test_each_mistake_is_refused_by_key(override, key, words):
    (problem,) = config_problems(merged(GOOD, {"observability": override}))
    assert problem.startswith(f"{PROJECT}:observability.{key}") and words in problem


def test_grafana_password_only_as_a_secret():
    (problem,) = config_problems({**GOOD, "grafanaAdminPassword": "hunter2"})
    assert "grafanaAdminPassword" in problem and "--secret" in problem
    assert validate_values({**GOOD, "grafanaAdminPassword": "x"}, secret_keys=[f"{PROJECT}:grafanaAdminPassword"])


# --- what each stack registers -------------------------------------------------------------------


def test_pinned_official_charts(run: ProgramRun):
    cfg = checked_in_config(run.stack).observability
    releases = {r.inputs["chart"]: r.inputs for r in run.of_type(RELEASE)}
    stack = releases[PROMETHEUS_STACK_CHART.name]
    assert stack["version"] == cfg.kube_prometheus_stack_chart_version
    assert stack["repositoryOpts"]["repo"] == "https://prometheus-community.github.io/helm-charts"
    dcgm = releases[DCGM_CHART.name]
    assert (dcgm["version"], dcgm["repositoryOpts"]["repo"]) == (
        cfg.dcgm_exporter_chart_version,
        "https://nvidia.github.io/dcgm-exporter/helm-charts",
    )
    # Prometheus must pick up monitors and rules without the chart's `release` label
    spec = stack["values"]["prometheus"]["prometheusSpec"]
    assert spec["podMonitorSelectorNilUsesHelmValues"] is False and spec["ruleSelectorNilUsesHelmValues"] is False
    # DCGM runs on the tainted GPU nodes; node-exporter keeps its chart default (tolerates all NoSchedule)
    assert GPU_TOLERATION in dcgm["values"]["tolerations"]
    assert "prometheus-node-exporter" not in stack["values"]


def test_pod_monitor_matches_the_crd_and_labels_the_phase(run: ProgramRun):
    pm = manifest(one(run, POD_MONITOR))
    schema = crd_schema("podmonitors")
    validate(pm, schema)
    spec = pm["spec"]
    assert spec["namespaceSelector"] == {"matchNames": [SERVING_NAMESPACE]}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"  # KubeRay's MetricsPortName
    targets = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert targets[m.PHASE_LABEL] == ["__meta_kubernetes_pod_label_ray_io_group"]
    broken = json.loads(json.dumps(pm))
    broken["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = "copy"  # not a relabel action
    with pytest.raises(jsonschema.ValidationError):
        validate(broken, schema)


def test_prometheus_rule_matches_the_crd_and_the_gpu_floor(run: ProgramRun):
    rule = manifest(one(run, PROMETHEUS_RULE))
    schema = crd_schema("prometheusrules")
    validate(rule, schema)
    config = checked_in_config(run.stack)
    instance = GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type]
    assert rule["spec"]["groups"] == rule_groups(config.observability, instance)
    floor = kv_rank_floor_gbps(instance, config.observability.kv_throughput_floor_fraction)
    (kv,) = [r for r in rule["spec"]["groups"][0]["rules"] if r.get("alert") == "KVThroughputBelowFloor"]
    assert kv["expr"].endswith(f"< {floor}")
    broken = json.loads(json.dumps(rule))
    del broken["spec"]["groups"][0]["name"]
    with pytest.raises(jsonschema.ValidationError):
        validate(broken, schema)


def test_dashboard_is_provisioned_by_the_sidecar(run: ProgramRun):
    cm = one(run, CONFIG_MAP, "dashboard").inputs
    assert cm["metadata"]["labels"] == DASHBOARD_LABEL
    (body,) = cm["data"].values()
    model = json.loads(body)
    assert model["uid"] == DASHBOARD_UID
    exprs = " ".join(expressions(model))
    for name in (
        m.TTFT,
        m.ITL,
        m.WAITING,
        m.RUNNING,
        m.KV_CACHE_USAGE,
        m.NIXL_BYTES,
        m.NIXL_XFER_TIME,
        m.NIXL_FAILED_TRANSFERS,
        m.GPU_UTIL,
        m.GPU_FB_USED,
        m.KSM_NODE_LABELS,
    ):
        assert name in exprs, name
    config = checked_in_config(run.stack)
    assert f'"{config.gpu_nodes.instance_type}"' in exprs  # the cost panel prices the GPU nodes


def test_cost_expression_prices_each_node_type():
    expr = hourly_cost_expr({"g6e.12xlarge": 10.49264, "m7i.xlarge": 0.2016})
    assert 'label_node_kubernetes_io_instance_type="g6e.12xlarge"}) * 10.49264' in expr
    assert 'label_node_kubernetes_io_instance_type="m7i.xlarge"}) * 0.2016' in expr
    assert hourly_cost_expr({}) == "vector(0)"


def test_disabled_registers_nothing_of_it():
    config, secret_keys = load_stack_config("dev")
    config[f"{PROJECT}:observability"] = json.dumps({"enabled": False})
    run = run_program("dev", config, secret_keys)
    assert not run.of_type(POD_MONITOR) and not run.of_type(PROMETHEUS_RULE)
    assert PROMETHEUS_STACK_CHART.name not in {r.inputs["chart"] for r in run.of_type(RELEASE)}


def test_the_served_engines_export_the_metrics_the_alerts_read(run: ProgramRun):
    """Every vLLM/NIXL series comes from `LLMConfig.log_engine_metrics` (Ray's default True): the
    RayService's serve config, parsed by Ray's own LLMConfig, must leave it on for both phases."""
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    (rs,) = run.of_type("kubernetes:ray.io/v1:RayService")
    (app,) = yaml.safe_load(rs.inputs["spec"]["serveConfigV2"])["applications"]
    for role in m.PHASES:
        llm = LLMConfig.model_validate(app["args"][f"{role}_config"])
        assert llm.log_engine_metrics is True, role
        assert not llm.engine_kwargs.get("disable_log_stats"), role


def test_the_control_plane_eks_manages_is_neither_scraped_nor_alerted_on(programs):
    """kube-controller-manager, kube-scheduler and etcd run in AWS's account, and EKS's kube-proxy serves
    its metrics on 127.0.0.1 only: no monitor looks for them and no default rule waits on them
    (KubeSchedulerDown / KubeControllerManagerDown / KubeProxyDown would fire forever).
    Value names: kube-prometheus-stack 88.5.3 values.yaml (`kubeScheduler.enabled`,
    `defaultRules.rules.kubeSchedulerAlerting`, ...)."""
    (release,) = [
        r
        for r in programs("dev").of_type("kubernetes:helm.sh/v3:Release")
        if r.inputs["chart"] == "kube-prometheus-stack"
    ]
    values = release.inputs["values"]
    for component in ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy"):
        assert values[component] == {"enabled": False}
    rules = values["defaultRules"]["rules"]
    assert {k for k, v in rules.items() if v is False} == {
        "kubeControllerManager",
        "kubeSchedulerAlerting",
        "kubeSchedulerRecording",
        "etcd",
        "kubeProxy",
    }
    # each is a key of the chart's own values (a misspelt key would leave the rule group on)
    chart = yaml.safe_load((DATA / "kube-prometheus-stack" / "values-88.5.3.yaml").read_text())
    assert set(rules) <= set(chart["defaultRules"]["rules"])
    assert {"kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy"} <= set(chart)
    assert "kubelet" not in rules and "kubeApiserverAvailability" not in rules  # what EKS lets us scrape stays on
