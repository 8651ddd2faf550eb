"""Storage that survives and CRDs that upgrade, as each stack registers them.

The chart's own values (vendored: tests/data/kube-prometheus-stack/SOURCE) judge every value path
the program sets on kube-prometheus-stack; the CRD-change lines of the preview diff are checked on
two real program runs that differ only in chart versions.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from helpers import DATA, engine_config_with

from llm_pd_eks.alerts import CRITICAL_RECEIVER, KV_CAUSED_ALERTS, KV_PATH_ALERTS, WARNING_RECEIVER
from llm_pd_eks.kuberay import KUBERAY_CHART, KUBERAY_CRDS
from llm_pd_eks.observability import ALERTMANAGER_SERVICE_ACCOUNT, PROMETHEUS_STACK_CHART
from llm_pd_eks.storage import (
    EBS_CSI_POLICY_ARN,
    EBS_TOPOLOGY_KEY,
    STORAGE_CLASS,
    duration_seconds,
    prometheus_volume,
)
from llm_pd_eks_tools.core.stack import stack_config as checked_in_config
from llm_pd_eks_tools.plan.preview.crds import crd_changes
from llm_pd_eks_tools.plan.preview.diff import changed_paths
from llm_pd_eks_tools.plan.preview.harness import resource_records
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program

RELEASE = "kubernetes:helm.sh/v3:Release"
CHART_VALUES = yaml.safe_load((DATA / "kube-prometheus-stack" / "values-88.5.3.yaml").read_text())


def release(run: ProgramRun, chart: str) -> dict[str, Any]:
    (found,) = [r.inputs for r in run.of_type(RELEASE) if r.inputs["chart"] == chart]
    return found


def paths(values: Any, prefix: str = "") -> list[str]:
    """Dotted paths of `values`, stopping at free-form maps (selectors, labels, annotations, config)."""
    if not isinstance(values, dict) or prefix.endswith(
        ("nodeSelector", "annotations", ".config", "storageSpec", ".storage", "persistence", "sidecar", "admin")
    ):
        return [prefix]
    return [p for k, v in values.items() for p in paths(v, f"{prefix}.{k}" if prefix else k)]


def has_path(values: dict[str, Any], dotted: str) -> bool:
    node: Any = values
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def test_prometheus_volume_follows_retention_and_scrape_load() -> None:
    # 300,000 series every 15 s = 20,000 samples/s; x 2 bytes x 15 days (1,296,000 s) = 51.84 GB
    # = 48.28 GiB; x 1.3 headroom = 62.8 -> 63 GiB; retentionSize 80 % of it = 50 GB.
    volume = prometheus_volume(300_000, "15s", "15d")
    assert volume.samples_per_second == 20_000
    assert (volume.gib, volume.retention_size) == (63, "50GB")
    assert prometheus_volume(300_000, "15s", "30d").gib == 126  # twice the retention, twice the disk
    assert prometheus_volume(10_000, "60s", "1d").gib == 10  # the floor
    assert duration_seconds("2w") == 1_209_600
    with pytest.raises(ValueError, match="not a duration"):
        duration_seconds("15 days")


def test_ebs_csi_add_on_with_its_own_irsa_role(run: ProgramRun) -> None:
    (addon,) = [r for r in run.of_type("aws:eks/addon:Addon") if r.inputs["addonName"] == "aws-ebs-csi-driver"]
    (role,) = [r for r in run.of_type("aws:iam/role:Role") if "ebs-csi" in r.name]
    assert addon.inputs["serviceAccountRoleArn"] == role.outputs["arn"]
    trust = json.loads(role.inputs["assumeRolePolicy"])
    (statement,) = trust["Statement"]
    (sub,) = [v for k, v in statement["Condition"]["StringEquals"].items() if k.endswith(":sub")]
    assert sub == "system:serviceaccount:kube-system:ebs-csi-controller-sa"
    (attachment,) = [r for r in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment") if "ebs-csi" in r.name]
    assert attachment.inputs["policyArn"] == EBS_CSI_POLICY_ARN


def test_every_launch_template_tags_its_root_volume(run: ProgramRun) -> None:
    """EC2 tags only the resource types a tag specification names: the root volume needs its own."""
    for template in run.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        specs = {s["resourceType"]: s["tags"] for s in template.inputs["tagSpecifications"]}
        assert specs["volume"]["stack"] == run.stack and specs["volume"]["project"] == "llm-pd-eks"
        assert specs["volume"] == specs["instance"], template.name


def test_gp3_class_binds_in_the_system_nodes_zones(run: ProgramRun) -> None:
    (sc,) = run.of_type("kubernetes:storage.k8s.io/v1:StorageClass")
    spec = sc.inputs
    assert spec["metadata"]["name"] == STORAGE_CLASS and spec["provisioner"] == "ebs.csi.aws.com"
    # the stack's tags on every volume the CSI driver creates (aws-ebs-csi-driver docs/tagging.md:
    # StorageClass parameters tagSpecification_<n> = "key=value"), so the cost audit counts them
    tagged = {k: v for k, v in spec["parameters"].items() if k.startswith("tagSpecification_")}
    assert {k: v for k, v in spec["parameters"].items() if k not in tagged} == {"type": "gp3", "encrypted": "true"}
    tags = dict(v.split("=", 1) for v in tagged.values())
    assert tags["project"] == "llm-pd-eks" and tags["stack"] == run.stack
    assert spec["volumeBindingMode"] == "WaitForFirstConsumer"
    (term,) = spec["allowedTopologies"]
    (expr,) = term["matchLabelExpressions"]
    config = checked_in_config(run.stack)
    assert expr == {"key": EBS_TOPOLOGY_KEY, "values": sorted(config.network.availability_zones)}
    assert config.gpu_nodes.availability_zone in expr["values"]  # system nodes span every private subnet


def test_prometheus_grafana_and_alertmanager_keep_their_data(run: ProgramRun) -> None:
    config = checked_in_config(run.stack).observability
    values = release(run, PROMETHEUS_STACK_CHART.name)["values"]
    spec = values["prometheus"]["prometheusSpec"]
    volume = prometheus_volume(config.prometheus_active_series, "15s", config.retention)
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == STORAGE_CLASS
    assert claim["resources"]["requests"]["storage"] == f"{volume.gib}Gi"
    assert spec["retentionSize"] == volume.retention_size
    am_claim = values["alertmanager"]["alertmanagerSpec"]["storage"]["volumeClaimTemplate"]["spec"]
    assert am_claim["storageClassName"] == STORAGE_CLASS
    assert values["grafana"]["persistence"]["storageClassName"] == STORAGE_CLASS
    assert values["grafana"]["deploymentStrategy"] == {"type": "Recreate"}  # one pod holds the RWO volume


def test_every_value_path_is_one_the_chart_has(run: ProgramRun) -> None:
    values = release(run, PROMETHEUS_STACK_CHART.name)["values"]
    ours = [p for p in paths(values) if not p.startswith(("grafana.", "kube-state-metrics."))]  # subcharts
    missing = [p for p in ours if not has_path(CHART_VALUES, p)]
    assert not missing, missing
    assert "prometheus.prometheusSpec.retentionSize" in ours and "crds.upgradeJob.nodeSelector" in ours
    assert not has_path(CHART_VALUES, "prometheus.prometheusSpec.retentionSizeBytes")  # the check can fail
    assert has_path(CHART_VALUES, "crds.upgradeJob.enabled") and CHART_VALUES["crds"]["upgradeJob"]["enabled"] is False
    assert values["crds"]["upgradeJob"]["enabled"] is True  # the chart's default is off


def test_alerts_route_to_the_topic_the_program_creates(run: ProgramRun) -> None:
    """Pages to the pages topic, tickets to the tickets topic: a destination per severity."""
    values = release(run, PROMETHEUS_STACK_CHART.name)["values"]
    am = values["alertmanager"]["config"]
    topics = {t.name: t for t in run.of_type("aws:sns/topic:Topic")}
    assert set(topics) == {"observability-alerts", "observability-tickets"}
    for receiver, topic in ((CRITICAL_RECEIVER, "observability-alerts"), (WARNING_RECEIVER, "observability-tickets")):
        (config,) = [r for r in am["receivers"] if r["name"] == receiver]
        (sns,) = config["sns_configs"]
        assert sns["topic_arn"] == topics[topic].outputs["arn"]
        assert sns["sigv4"]["region"] == checked_in_config(run.stack).region
    (role,) = [r for r in run.of_type("aws:iam/role:Role") if "alertmanager" in r.name]
    (publish,) = [r for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if "alertmanager" in r.name]
    resource = json.loads(publish.inputs["policy"])["Statement"][0]["Resource"]
    assert sorted(resource) == sorted(t.outputs["arn"] for t in topics.values())
    assert ALERTMANAGER_SERVICE_ACCOUNT in role.inputs["assumeRolePolicy"]
    assert values["alertmanager"]["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"] == role.outputs["arn"]
    (inhibit,) = [
        r for r in am["inhibit_rules"] if any("KVTransferFailures" in t for t in r.get("source_matchers", []))
    ]
    assert all(a in inhibit["source_matchers"][0] for a in KV_PATH_ALERTS)
    assert all(a in inhibit["target_matchers"][0] for a in KV_CAUSED_ALERTS)


def test_kuberay_crds_are_applied_before_the_operator(run: ProgramRun) -> None:
    version = checked_in_config(run.stack).kuberay.chart_version
    files = {r.name: r for r in run.of_type("kubernetes:yaml/v2:ConfigFile")}
    assert sorted(files) == sorted(f"kuberay-crd-{crd}" for crd in KUBERAY_CRDS)
    for name, record in files.items():
        crd = name.removeprefix("kuberay-crd-")
        assert record.inputs["file"] == (
            f"https://raw.githubusercontent.com/ray-project/kuberay/v{version}/"
            f"helm-chart/kuberay-operator/crds/ray.io_{crd}.yaml"
        )
    (operator,) = [r for r in run.of_type(RELEASE) if r.inputs["chart"] == KUBERAY_CHART.name]
    assert operator.inputs["skipCrds"] is True
    assert {r.urn for r in files.values()} <= set(operator.dependencies)


def _records(run: ProgramRun) -> dict[str, dict[str, Any]]:
    return {r["urn"]: r for r in resource_records(run)}


def test_a_chart_bump_names_its_crd_change_in_the_preview_diff() -> None:
    before = _records(run_program("dev"))
    config, secret_keys = engine_config_with("dev", "kuberay", chartVersion="1.7.1")
    key = "llm-pd-eks:observability"
    config[key] = json.dumps({**json.loads(config.get(key, "{}")), "kubePrometheusStackChartVersion": "88.5.4"})
    after = _records(run_program("dev", config, secret_keys))
    changed = []
    for urn in sorted(set(before) & set(after)):
        found = changed_paths({"inputs": before[urn]["inputs"]}, {"inputs": after[urn]["inputs"]})
        if found:
            changed.append((after[urn], found))
    lines = crd_changes([], [], changed)
    assert len([line for line in lines if "kuberay-crd-" in line]) == len(KUBERAY_CRDS)
    assert any("/v1.7.0/" in line and "/v1.7.1/" in line for line in lines)
    assert any(line.startswith("`kube-prometheus-stack` 88.5.3 → 88.5.4") for line in lines)
    assert crd_changes([], [], []) == []
