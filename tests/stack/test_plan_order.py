"""Ordering over the whole plan: what `pulumi up` creates first and `pulumi destroy` deletes last.

The engine creates a resource only after everything it depends on (dependsOn, property
dependencies, a provider it uses) and deletes in the reverse order, so each rule below is a
question about the transitive dependencies recorded by the mock run.
"""

from __future__ import annotations

import copy

import pytest
from helpers import STACKS, run_with

from llm_pd_eks_tools.core.stack import load_stack_config
from llm_pd_eks_tools.core.stackfile import PROJECT
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program

NAMESPACE = "kubernetes:core/v1:Namespace"
RELEASE = "kubernetes:helm.sh/v3:Release"
# Namespaces every cluster has before the first object is applied (created by the API server).
# https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/#initial-namespaces
SYSTEM_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}


def ancestors(run: ProgramRun, urn: str) -> set[str]:
    """Every resource the engine must finish before `urn` (dependencies of a component mean its
    children, as the engine expands them), transitively."""
    children: dict[str, list[str]] = {}
    for r in run.resources:
        children.setdefault(r.parent, []).append(r.urn)
    by_urn = {r.urn: r for r in run.resources}
    seen: set[str] = set()
    todo = [urn]
    while todo:
        reg = by_urn.get(todo.pop())
        if reg is None:
            continue
        direct = set(reg.dependencies) | {u for deps in reg.property_dependencies.values() for u in deps}
        if reg.provider:
            direct.add(reg.provider.rsplit("::", 1)[0])  # a provider reference is `<urn>::<id>`
        for dep in direct:
            expanded = [dep, *children.get(dep, [])]
            for d in expanded:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
    return seen


def namespace_of(reg) -> str | None:
    if reg.type == RELEASE:
        return reg.inputs.get("namespace")
    if not reg.type.startswith("kubernetes:") or reg.type == NAMESPACE:
        return None
    return (reg.inputs.get("metadata") or {}).get("namespace")


def namespace_creators(run: ProgramRun) -> dict[str, list[str]]:
    """namespace -> the resources that create it (a Namespace, or a Helm release with createNamespace)."""
    out: dict[str, list[str]] = {}
    for r in run.resources:
        if r.type == NAMESPACE:
            out.setdefault(r.inputs["metadata"]["name"], []).append(r.urn)
        elif r.type == RELEASE and r.inputs.get("createNamespace"):
            out.setdefault(r.inputs["namespace"], []).append(r.urn)
    return out


def unordered_namespaced(run: ProgramRun) -> list[str]:
    """Namespaced objects whose namespace is neither a system one nor created before them."""
    creators = namespace_creators(run)
    bad = []
    for r in run.resources:
        ns = namespace_of(r)
        if ns is None or ns in SYSTEM_NAMESPACES:
            continue
        if r.urn in creators.get(ns, []):
            continue
        if not set(creators.get(ns, [])) & ancestors(run, r.urn):
            bad.append(f"{r.type} {r.name} in {ns}")
    return bad


def with_grafana_password(stack: str) -> ProgramRun:
    config, secret_keys = load_stack_config(stack)
    config[f"{PROJECT}:grafanaAdminPassword"] = "correct-horse-battery-staple"
    return run_program(stack, config, [*secret_keys, f"{PROJECT}:grafanaAdminPassword"])


@pytest.mark.parametrize("stack", STACKS)
def test_every_namespaced_object_waits_for_its_namespace(programs, stack):
    assert unordered_namespaced(programs(stack)) == []


def test_the_grafana_admin_secret_waits_for_the_monitoring_namespace():
    run = with_grafana_password("dev")
    secret = run.one("kubernetes:core/v1:Secret", "grafana-admin")
    assert secret.inputs["metadata"]["namespace"] == "monitoring"
    assert unordered_namespaced(run) == []


def test_the_rule_catches_an_object_created_before_its_namespace(programs):
    """The check itself: drop the namespace from a namespaced object's dependencies and it is reported."""
    run = copy.deepcopy(programs("dev"))
    pdb = run.one("kubernetes:policy/v1:PodDisruptionBudget", "prefill")
    creators = set(namespace_creators(run)[pdb.inputs["metadata"]["namespace"]])
    assert creators & ancestors(run, pdb.urn)
    pdb.dependencies = [d for d in pdb.dependencies if d not in creators]
    pdb.property_dependencies = {k: [u for u in v if u not in creators] for k, v in pdb.property_dependencies.items()}
    assert unordered_namespaced(run) == [f"{pdb.type} {pdb.name} in llm-serving"]


# -- the deploy path: `up` reaches the Kubernetes API, proven before the GPU nodes launch -----------
GPU_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"


def refusal(stack: str, **sections: dict) -> tuple[str, list]:
    with pytest.raises(Exception) as info:
        run_with(stack, **sections)
    return str(info.value), info.value.registrations  # type: ignore[attr-defined]


@pytest.mark.parametrize("stack", STACKS)
def test_the_gpu_nodes_launch_only_after_a_kubernetes_object_applied(programs, stack):
    """An unreachable API fails `up` at the first Kubernetes object, before any GPU instance bills."""
    run = programs(stack)
    gpu = run.one(GPU_NODE_GROUP, "gpu")
    before_gpu = ancestors(run, gpu.urn)
    applied = [
        r
        for r in run.resources
        if r.urn in before_gpu
        and r.custom
        and r.type.startswith("kubernetes:")
        and not r.type.startswith("pulumi:providers:")
    ]
    assert [(r.type, r.inputs["metadata"]["namespace"]) for r in applied] == [
        ("kubernetes:core/v1:ConfigMap", "kube-system")
    ]
    provider = run.one("pulumi:providers:kubernetes", "cluster-k8s")
    assert applied[0].provider.rsplit("::", 1)[0] == provider.urn  # through the cluster's own endpoint


def test_a_stack_without_a_deploy_path_is_refused_before_anything_registers():
    message, registered = refusal("dev", deploy={"apiSourceCidrs": []})
    assert "llm-pd-eks:deploy.apiSourceCidrs: not set" in message
    assert registered == []


def test_a_runner_outside_the_public_allow_list_is_refused():
    message, registered = refusal("staging", deploy={"apiSourceCidrs": ["198.51.100.7/32"]})
    assert "198.51.100.7/32 is not inside cluster.publicAccessCidrs (203.0.113.0/24)" in message
    assert registered == []


def test_a_runner_inside_the_vpc_this_up_creates_is_refused():
    message, registered = refusal(
        "prod", cluster={"publicAccessCidrs": []}, deploy={"apiSourceCidrs": ["10.30.200.0/24"]}
    )
    assert "10.30.200.0/24 overlaps network.vpcCidr 10.30.0.0/16" in message
    assert registered == []


def test_a_private_only_endpoint_needs_a_connected_private_network():
    message, _ = refusal("dev", cluster={"publicAccessCidrs": []}, deploy={"apiSourceCidrs": ["203.0.113.0/24"]})
    assert "203.0.113.0/24 is not a private (RFC 1918) network" in message


def test_a_connected_network_gets_443_on_the_cluster_security_group():
    """Private-only: EKS's cluster group admits only its members until a rule admits the runner's network."""
    from llm_pd_eks_tools.plan.preview.mockrun import eks_cluster_ids

    run = run_with("prod", cluster={"publicAccessCidrs": []}, deploy={"apiSourceCidrs": ["172.20.0.0/16"]})
    rule = run.one(INGRESS_RULE, "api-access")
    eks_sg = eks_cluster_ids(run.one("eks:index:Cluster", "cluster").name)["eksClusterSecurityGroupId"]
    assert (rule.inputs["securityGroupId"], rule.inputs["cidrIpv4"], rule.inputs["ipProtocol"]) == (
        eks_sg,
        "172.20.0.0/16",
        "tcp",
    )
    assert (rule.inputs["fromPort"], rule.inputs["toPort"]) == (443, 443)
    probe = run.one("kubernetes:core/v1:ConfigMap", "api-access")
    assert rule.urn in ancestors(run, probe.urn)
    assert rule.urn in ancestors(run, run.one(GPU_NODE_GROUP, "gpu").urn)


def test_a_public_route_adds_no_rule(programs):
    assert programs("dev").of_type(INGRESS_RULE) == []


# -- destroy: nothing the cluster made is left to block the VPC's deletion --------------------------
EGRESS = (
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:ec2/vpcEndpoint:VpcEndpoint",
    "aws:ec2/subnet:Subnet",
)


@pytest.mark.parametrize("stack", STACKS)
def test_destroy_removes_what_runs_on_the_cluster_before_the_routes_out(programs, stack):
    """`destroy` deletes a resource before everything it depends on. Every Kubernetes object (the
    RayService and its KubeRay-made NLB among them) and every node group must therefore depend on the
    IGW, the NAT gateways, the route table associations, the S3 endpoint and the subnets: an NLB's
    public addresses keep the IGW from detaching, a node's ENIs keep its subnet."""
    run = programs(stack)
    egress = {r.urn for r in run.resources if r.type in EGRESS}
    on_cluster = [
        r for r in run.resources if r.custom and (r.type.startswith("kubernetes:") or r.type == GPU_NODE_GROUP)
    ]
    assert len(on_cluster) > 10
    late = [r.name for r in on_cluster if not egress <= ancestors(run, r.urn)]
    assert late == []


@pytest.mark.parametrize("stack", STACKS)
def test_the_rayservice_is_deleted_in_the_foreground(programs, stack):
    """KubeRay's serve Service (and its NLB) is owned by the RayService; foreground deletion keeps the
    RayService until the Service's load-balancer-cleanup finalizer is gone, i.e. the NLB is deleted."""
    rs = programs(stack).one("kubernetes:ray.io/v1:RayService")
    assert rs.inputs["metadata"]["annotations"]["pulumi.com/deletionPropagationPolicy"] == "foreground"


@pytest.mark.parametrize("stack", STACKS)
def test_the_nodes_go_before_the_vpc_cni(programs, stack):
    """Nodes start after the VPC CNI has its IRSA role, and are drained and deleted while aws-node still
    runs (deleting the add-on first would cut the network of the pods being drained)."""
    run = programs(stack)
    cni = next(a for a in run.of_type("aws:eks/addon:Addon") if a.inputs["addonName"] == "vpc-cni")
    for ng in run.of_type(GPU_NODE_GROUP):
        assert cni.urn in ancestors(run, ng.urn)
