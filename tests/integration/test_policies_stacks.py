"""The pack over what the program really registers for dev, staging and prod (mock runtime):
no mandatory violation, every policy actually ran, and the same stacks bent in one place fail."""

from __future__ import annotations

import pytest
from google.protobuf import json_format
from helpers import RAY_SERVICE, STACKS
from policy_fixtures import mandatory, of, pack

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.analyzer import UNKNOWN, analyze_run, run_resources


def _judge(resources):
    return pack().analyze_all(resources)


def _props(message) -> dict:
    return json_format.MessageToDict(message.properties)


def _set_props(message, props: dict) -> None:
    message.properties.Clear()
    message.properties.update(props)


@pytest.mark.parametrize("stack", STACKS)
def test_stack_has_no_mandatory_violation(stack, programs):
    verdicts = analyze_run(programs(stack), server=pack())
    assert mandatory(verdicts) == [], "\n".join(v.message for v in mandatory(verdicts))
    # A policy that tripped over an unknown value reports "can't run policy" instead of judging.
    assert [v for v in verdicts if "can't run policy" in v.message] == []


def first_preview(run):
    """The run's resources as a first `pulumi preview` shows them: every value a provider computes
    (IDs, ARNs, generated names such as the placement group's) is unknown wherever it flows."""
    computed = {r.id for r in run.resources if r.id}
    for r in run.resources:
        computed |= {v for k, v in r.outputs.items() if k not in r.inputs and isinstance(v, str) and len(v) >= 6}

    def blank(value):
        if isinstance(value, dict):
            return {k: blank(v) for k, v in value.items()}
        if isinstance(value, list):
            return [blank(v) for v in value]
        if isinstance(value, str) and any(c in value for c in computed):
            return UNKNOWN
        return value

    resources = run_resources(run)
    for message in resources:
        _set_props(message, blank(_props(message)))
    return resources


@pytest.mark.parametrize("stack", STACKS)
def test_stack_first_preview_has_no_mandatory_violation(stack, programs):
    resources = first_preview(programs(stack))
    gpu_ng = next(_props(r) for r in resources if r.name == "gpu-nodes-ng")
    assert gpu_ng["subnetIds"] == [UNKNOWN] and gpu_ng["launchTemplate"]["id"] == UNKNOWN  # really blanked
    verdicts = _judge(resources)
    assert mandatory(verdicts) == [], "\n".join(v.message for v in mandatory(verdicts))
    assert [v for v in verdicts if "can't run policy" in v.message] == []


@pytest.mark.parametrize("preview", ["mock-ids", "first-preview"])
@pytest.mark.parametrize("stack", STACKS)
def test_gpu_node_group_of_the_stack_is_really_judged(stack, preview, programs):
    """Give the stack's GPU node group a second AZ's subnet: the single-AZ rule must fire."""
    run = programs(stack)
    resources = run_resources(run) if preview == "mock-ids" else first_preview(run)
    by_name = {r.name: r for r in resources}
    gpu_ng = by_name["gpu-nodes-ng"]
    own = list(gpu_ng.propertyDependencies["subnetIds"].urns)
    own_az = run.by_urn(own[0]).inputs["availabilityZone"]
    other = next(
        r
        for r in run.of_type("aws:ec2/subnet:Subnet")
        if r.inputs["availabilityZone"] != own_az and "private" in r.name
    )
    gpu_ng.propertyDependencies["subnetIds"].urns.append(other.urn)
    found = of(_judge(resources), "gpu-node-group-single-az")
    assert [v.urn for v in found] == [gpu_ng.urn]
    assert own_az in found[0].message and other.inputs["availabilityZone"] in found[0].message


@pytest.mark.parametrize("preview", ["mock-ids", "first-preview"])
@pytest.mark.parametrize("stack", STACKS)
def test_gpu_launch_template_of_the_stack_is_really_judged(stack, preview, programs):
    """Strip the EFA interfaces and the placement of the stack's GPU launch template."""
    run = programs(stack)
    resources = run_resources(run) if preview == "mock-ids" else first_preview(run)
    lt = next(r for r in resources if r.name == "gpu-nodes-lt")
    props = _props(lt)
    props["networkInterfaces"] = [{"networkCardIndex": 0, "deviceIndex": 0}]
    del props["placement"]
    _set_props(lt, props)
    verdicts = _judge(resources)
    assert [v.urn for v in of(verdicts, "efa-on-gpu-nodes")] == [lt.urn]
    assert [v.urn for v in of(verdicts, "gpu-cluster-placement-group")] == [lt.urn]


def _ray_service(stack: str, resources):
    """The stack's RayService message; a stack without `serving` has none (and nothing to judge here)."""
    found = [r for r in resources if r.type == RAY_SERVICE]
    if stack_config(stack).serving is None:
        assert found == []
        pytest.skip(f"stack {stack} configures no serving, so registers no RayService")
    (svc,) = found
    return svc


@pytest.mark.parametrize("stack", STACKS)
def test_stack_ray_service_nixl_backend_is_really_judged(stack, programs):
    resources = run_resources(programs(stack))
    svc = _ray_service(stack, resources)
    props = _props(svc)
    assert "NixlConnector" in props["spec"]["serveConfigV2"]
    props["spec"]["serveConfigV2"] = props["spec"]["serveConfigV2"].replace("LIBFABRIC", "UCX")
    _set_props(svc, props)
    found = of(_judge(resources), "nixl-libfabric-backend")
    assert found and {v.urn for v in found} == {svc.urn}


@pytest.mark.parametrize("stack", STACKS)
def test_stack_ray_gpu_workers_are_really_judged(stack, programs):
    resources = run_resources(programs(stack))
    svc = _ray_service(stack, resources)
    props = _props(svc)
    groups = props["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    gpu_groups = [
        g
        for g in groups
        if any(
            "nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {})
            for c in g["template"]["spec"]["containers"]
        )
    ]
    assert gpu_groups, "the RayService has no GPU worker group"
    for group in gpu_groups:
        for c in group["template"]["spec"]["containers"]:
            for part in ("limits", "requests"):
                (c.get("resources", {}).get(part) or {}).pop("vpc.amazonaws.com/efa", None)
    _set_props(svc, props)
    found = of(_judge(resources), "ray-gpu-pods-efa")
    gpu_containers = [
        c
        for g in gpu_groups
        for c in g["template"]["spec"]["containers"]
        if "nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {})
    ]
    assert len(found) == len(gpu_containers)
    for group in gpu_groups:
        assert any(f"worker group '{group['groupName']}'" in v.message for v in found)


@pytest.mark.parametrize("stack", STACKS)
def test_stack_placement_strategy_judged_on_first_preview(stack, programs):
    """groupName may be unknown on a first preview (the group's own placement group is named by the node
    group's key, which waits on the security groups' ids): the rule reaches the group through
    `placement`'s property dependency either way."""
    resources = first_preview(programs(stack))
    lt = next(r for r in resources if r.name == "gpu-nodes-lt")
    pg = next(r for r in resources if r.name == "gpu-nodes-pg")
    assert _props(lt)["placement"]["groupName"] in (UNKNOWN, _props(pg)["name"])
    _set_props(pg, {**_props(pg), "strategy": "partition"})
    found = of(_judge(resources), "gpu-cluster-placement-group")
    assert [v.urn for v in found] == [lt.urn] and "'partition'" in found[0].message


@pytest.mark.parametrize("preview", ["mock-ids", "first-preview"])
@pytest.mark.parametrize("stack", STACKS)
def test_stack_efa_security_group_is_really_judged(stack, preview, programs):
    """Open the stack's EFA security group to the internet: efa-security-group names it."""
    run = programs(stack)
    resources = run_resources(run) if preview == "mock-ids" else first_preview(run)
    sg = next(r for r in resources if r.type == "aws:ec2/securityGroup:SecurityGroup" and "efa" in r.name)
    props = _props(sg)
    props["ingress"].append({"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]})
    _set_props(sg, props)
    found = of(_judge(resources), "efa-security-group")
    assert [v.urn for v in found] == [sg.urn] and "admits the internet" in found[0].message


@pytest.mark.parametrize("preview", ["mock-ids", "first-preview"])
@pytest.mark.parametrize("stack", STACKS)
def test_stack_gpu_subnet_route_to_internet_gateway_is_really_judged(stack, preview, programs):
    """Point the GPU subnet's route table at the internet gateway (mapPublicIpOnLaunch stays false)."""
    run = programs(stack)
    resources = run_resources(run) if preview == "mock-ids" else first_preview(run)
    gpu_ng = next(r for r in resources if r.name == "gpu-nodes-ng")
    subnet_urn = gpu_ng.propertyDependencies["subnetIds"].urns[0]
    assoc = next(
        r
        for r in resources
        if r.type == "aws:ec2/routeTableAssociation:RouteTableAssociation"
        and list(r.propertyDependencies["subnetId"].urns) == [subnet_urn]
    )
    table = next(r for r in resources if r.urn == assoc.propertyDependencies["routeTableId"].urns[0])
    igw = next(r for r in resources if r.type == "aws:ec2/internetGateway:InternetGateway")
    props = _props(table)
    assert all("natGatewayId" in route for route in props["routes"])
    assert of(_judge(resources), "gpu-nodes-private") == []
    props["routes"] = [{"cidrBlock": "0.0.0.0/0", "gatewayId": UNKNOWN if preview == "first-preview" else "igw-1"}]
    _set_props(table, props)
    table.propertyDependencies["routes"].urns[:] = [igw.urn]
    found = of(_judge(resources), "gpu-nodes-private")
    assert [v.urn for v in found] == [gpu_ng.urn] and "routes to an internet gateway" in found[0].message


@pytest.mark.parametrize("stack", STACKS)
def test_stack_ray_pods_efa_share_is_really_judged(stack, programs):
    """One EFA device per GPU pod: enough on a 1-card type (dev's g6e.12xlarge), refused on p4d/p5."""
    resources = first_preview(programs(stack))
    svc = _ray_service(stack, resources)
    gpu_type = stack_config(stack).gpu_nodes.instance_type
    props = _props(svc)
    for group in props["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        for c in group["template"]["spec"]["containers"]:
            if "vpc.amazonaws.com/efa" in c.get("resources", {}).get("limits", {}):
                c["resources"]["limits"]["vpc.amazonaws.com/efa"] = "1"
    _set_props(svc, props)
    found = of(_judge(resources), "ray-gpu-pods-efa")
    cards = GPU_INSTANCE_TYPES[gpu_type].efa_interfaces
    assert bool(found) == (cards > 1)
    for v in found:
        assert f"of its {cards})" in v.message and gpu_type in v.message
