"""Cluster Autoscaler: pinned chart whose values exist, IRSA least privilege, tags it can act on."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import DATA, NODE_GROUP, engine_config_with

from llm_pd_eks.autoscaler import DESCRIBE_ACTIONS, MUTATING_ACTIONS, SERVICE_ACCOUNT, TAG_PREFIX
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.gpu_cutover import NODE_GROUP_LABEL
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program

CHART_VALUES = yaml.safe_load((DATA / "cluster-autoscaler" / "values-9.59.0.yaml").read_text())
# Maps whose keys are the user's (labels, annotations, flags), not chart keys.
FREE_FORM = {"nodeSelector", "annotations", "extraArgs"}
ASG_TAG = "aws:autoscaling/tag:Tag"


def unknown_keys(values: dict, chart: dict, path: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        if key not in chart:
            out.append(f"{path}{key}")
        elif isinstance(value, dict) and key not in FREE_FORM and isinstance(chart[key], dict):
            out += unknown_keys(value, chart[key], f"{path}{key}.")
    return out


def release(run: ProgramRun):
    return run.one("kubernetes:helm.sh/v3:Release", "node-autoscaler")


def test_chart_pinned_and_values_known_to_the_chart(run: ProgramRun):
    r = release(run)
    cfg = stack_config(run.stack)
    assert (r.inputs["chart"], r.inputs["version"]) == ("cluster-autoscaler", cfg.node_autoscaler.chart_version)
    assert r.inputs["repositoryOpts"]["repo"] == "https://kubernetes.github.io/autoscaler"
    assert cfg.node_autoscaler.chart_version == "9.59.0"  # the vendored values' chart
    values = r.inputs["values"]
    assert unknown_keys(values, CHART_VALUES) == []
    assert unknown_keys({**values, "autoDiscovry": {}}, CHART_VALUES) == ["autoDiscovry"]  # the check bites
    assert values["autoDiscovery"]["clusterName"] == run.one("eks:index:Cluster").inputs["name"]
    assert values["awsRegion"] == cfg.region and values["cloudProvider"] == "aws"
    # the image matches the cluster's Kubernetes minor
    assert values["image"]["tag"].startswith(f"v{cfg.cluster.kubernetes_version}.")
    assert values["nodeSelector"] == {"role": "system"}


def test_irsa_trust_names_the_charts_service_account(run: ProgramRun):
    eks = run.one("eks:index:Cluster")
    role = run.one("aws:iam/role:Role", "node-autoscaler")
    values = release(run).inputs["values"]
    assert values["rbac"]["serviceAccount"]["name"] == SERVICE_ACCOUNT
    assert values["rbac"]["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"] == role.outputs["arn"]
    (stmt,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert stmt["Principal"] == {"Federated": eks.outputs["oidcProviderArn"]}
    assert stmt["Action"] == "sts:AssumeRoleWithWebIdentity"
    issuer = eks.outputs["oidcIssuer"]
    assert stmt["Condition"]["StringEquals"] == {
        f"{issuer}:sub": f"system:serviceaccount:kube-system:{SERVICE_ACCOUNT}",
        f"{issuer}:aud": "sts.amazonaws.com",
    }


def test_policy_is_least_privilege(run: ProgramRun):
    policy = json.loads(run.one("aws:iam/rolePolicy:RolePolicy", "node-autoscaler").inputs["policy"])
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    cluster = run.one("eks:index:Cluster").inputs["name"]
    assert set(by_sid["Discover"]["Action"]) == set(DESCRIBE_ACTIONS)
    assert all(a.split(":")[1].startswith(("Describe", "Get")) for a in DESCRIBE_ACTIONS)
    scale = by_sid["ScaleThisClustersGroups"]
    assert set(scale["Action"]) == set(MUTATING_ACTIONS)
    assert scale["Condition"] == {"StringEquals": {f"aws:ResourceTag/{TAG_PREFIX}/{cluster}": "owned"}}
    node_group_arns = {ng.outputs["arn"] for ng in run.of_type(NODE_GROUP)}
    assert set(by_sid["ReadThisClustersNodeGroups"]["Resource"]) == node_group_arns
    everything = {
        a for s in policy["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert not any(a.endswith("*") for a in everything)


def test_both_groups_discoverable(run: ProgramRun):
    cluster = run.one("eks:index:Cluster").inputs["name"]
    for ng in run.of_type(NODE_GROUP):
        assert ng.inputs["tags"][f"{TAG_PREFIX}/enabled"] == "true", ng.name
        assert ng.inputs["tags"][f"{TAG_PREFIX}/{cluster}"] == "owned", ng.name


def asg_tags(run: ProgramRun, group: str) -> dict[str, str]:
    ng = run.one(NODE_GROUP, group)
    (asg,) = {g["name"] for r in ng.outputs["resources"] for g in r["autoscalingGroups"]}
    tags = {}
    for t in run.of_type(ASG_TAG):
        if t.inputs["autoscalingGroupName"] == asg:
            assert t.inputs["tag"]["propagateAtLaunch"] is False
            tags[t.inputs["tag"]["key"]] = t.inputs["tag"]["value"]
    return tags


def test_gpu_group_template_lets_a_ray_worker_fit(run: ProgramRun):
    """The node CA would add (from the ASG's tags) satisfies what a Ray GPU worker asks for."""
    instance = GPU_INSTANCE_TYPES[stack_config(run.stack).gpu_nodes.instance_type]
    tags = asg_tags(run, "gpu")
    ng = run.one(NODE_GROUP, "gpu")
    prefix = f"{TAG_PREFIX}/node-template/"
    labels = {k[len(prefix + "label/") :]: v for k, v in tags.items() if k.startswith(prefix + "label/")}
    # the group's labels, and EKS's own node group label with its name (what the Ray pods select)
    assert labels == {**ng.inputs["labels"], NODE_GROUP_LABEL: ng.outputs["nodeGroupName"]}
    resources = {k[len(prefix + "resources/") :]: v for k, v in tags.items() if k.startswith(prefix + "resources/")}
    assert resources == {
        "nvidia.com/gpu": str(instance.gpus),
        "vpc.amazonaws.com/efa": str(instance.efa_interfaces),
        "hugepages-2Mi": f"{instance.efa_hugepages_2mi_mib}Mi",
    }
    (taint,) = ng.inputs["taints"]
    assert tags[f"{prefix}taint/{taint['key']}"] == f"{taint['value']}:NoSchedule"
    # what the RayService's GPU workers request fits that template
    rs = run.of_type("kubernetes:ray.io/v1:RayService")
    for svc in rs:
        for group in svc.inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
            (container,) = group["template"]["spec"]["containers"][:1]
            limits = container["resources"]["limits"]
            assert int(limits["nvidia.com/gpu"]) <= int(resources["nvidia.com/gpu"])
            assert int(limits["vpc.amazonaws.com/efa"]) <= int(resources["vpc.amazonaws.com/efa"])
            # a pod asking for more huge pages than the template advertises never triggers a scale-up
            asked = container["resources"]["requests"]["hugepages-2Mi"]
            assert asked.endswith("Mi") and int(asked[:-2]) <= int(resources["hugepages-2Mi"].removesuffix("Mi"))
            selector = group["template"]["spec"].get("nodeSelector", {})
            assert all(labels.get(k) == v for k, v in selector.items())


def test_system_group_template_has_its_label_only(programs):
    run = programs("dev")
    tags = asg_tags(run, "system")
    name = run.one(NODE_GROUP, "system").outputs["nodeGroupName"]
    assert tags == {
        f"{TAG_PREFIX}/node-template/label/role": "system",
        f"{TAG_PREFIX}/node-template/label/{NODE_GROUP_LABEL}": name,
    }


def test_autoscaler_can_be_left_out():
    run = run_program("dev", *engine_config_with("dev", "nodeAutoscaler", enabled=False))
    assert not [r for r in run.resources if "node-autoscaler" in r.name]
    assert all(f"{TAG_PREFIX}/enabled" not in (ng.inputs.get("tags") or {}) for ng in run.of_type(NODE_GROUP))


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_autoscaler_waits_for_the_system_nodes(stack, programs):
    run = programs(stack)
    assert run.one(NODE_GROUP, "system").urn in release(run).dependencies
