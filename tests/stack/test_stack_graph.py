"""The graph each stack registers: network, cluster, system nodes and same-AZ EFA GPU nodes.

Expected values come from the stack's own config file and the GPU catalog, never from the code under test.
"""

from __future__ import annotations

import pytest
from helpers import LAUNCH_TEMPLATE, NODE_GROUP, PLACEMENT_GROUP, SUBNET

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.network import CLUSTER_TAG_VALUE
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.core.stackfile import PROJECT
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration, eks_cluster_ids


def node_group_subnets(run: ProgramRun, node_group: Registration) -> list[Registration]:
    """Subnets of a node group, found the way a first preview must: through property dependencies."""
    urns = node_group.property_dependencies["subnetIds"]
    subnets = [run.by_urn(u) for u in urns]
    assert all(s.type == SUBNET for s in subnets)
    # and, since mocks know the IDs, the IDs agree with the dependencies
    assert sorted(node_group.inputs["subnetIds"]) == sorted(s.id for s in subnets)
    return subnets


def launch_template_of(run: ProgramRun, node_group: Registration) -> Registration:
    (urn,) = {u for u in node_group.property_dependencies["launchTemplate"] if run.by_urn(u).type == LAUNCH_TEMPLATE}
    lt = run.by_urn(urn)
    assert node_group.inputs["launchTemplate"]["id"] == lt.id
    return lt


def gpu_node_group(run: ProgramRun) -> Registration:
    return run.one(NODE_GROUP, "gpu-nodes")


def test_gpu_subnets_all_in_the_configured_az(run: ProgramRun):
    cfg = stack_config(run.stack)
    subnets = node_group_subnets(run, gpu_node_group(run))
    assert {s.inputs["availabilityZone"] for s in subnets} == {cfg.gpu_nodes.availability_zone}


def test_efa_interface_per_network_card(run: ProgramRun):
    cfg = stack_config(run.stack)
    lt = launch_template_of(run, gpu_node_group(run))
    expected = GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type].efa_interfaces
    assert lt.inputs["instanceType"] == cfg.gpu_nodes.instance_type
    nics = sorted(lt.inputs["networkInterfaces"], key=lambda n: n["networkCardIndex"])
    assert len(nics) == expected
    assert [n["networkCardIndex"] for n in nics] == list(range(expected))
    assert (nics[0]["interfaceType"], nics[0]["deviceIndex"]) == ("efa", 0)
    assert all((n["interfaceType"], n["deviceIndex"]) == ("efa-only", 1) for n in nics[1:])


def test_gpu_nodes_join_the_efa_and_cluster_security_groups(run: ProgramRun):
    lt = launch_template_of(run, gpu_node_group(run))
    sg = run.one("aws:ec2/securityGroup:SecurityGroup", "efa")
    eks = run.one("eks:index:Cluster")
    eks_created = eks_cluster_ids(eks.name)["eksClusterSecurityGroupId"]  # not pulumi-eks's own group
    for nic in lt.inputs["networkInterfaces"]:
        assert sg.id in nic["securityGroups"]
        assert eks_created in nic["securityGroups"]
    # EFA needs all traffic both ways between members of the group.
    assert any(r["self"] and r["protocol"] == "-1" for r in sg.inputs["ingress"])
    assert any(r.get("self") and r["protocol"] == "-1" for r in sg.inputs["egress"])


def test_every_launch_template_requires_imdsv2(run: ProgramRun):
    templates = run.of_type(LAUNCH_TEMPLATE)
    assert len(templates) == 2  # system and GPU nodes
    for lt in templates:
        assert lt.inputs["metadataOptions"]["httpTokens"] == "required", lt.name
        assert lt.inputs["metadataOptions"]["httpEndpoint"] == "enabled", lt.name


def test_gpu_launch_template_sits_in_a_cluster_placement_group(run: ProgramRun):
    lt = launch_template_of(run, gpu_node_group(run))
    (pg_urn,) = lt.property_dependencies["placement"]
    pg = run.by_urn(pg_urn)
    assert pg.type == PLACEMENT_GROUP
    assert pg.inputs["strategy"] == "cluster"
    assert lt.inputs["placement"]["groupName"] == pg.outputs["name"]


def test_nodes_live_only_in_private_subnets(run: ProgramRun):
    node_groups = run.of_type(NODE_GROUP)
    assert len(node_groups) == 2
    for ng in node_groups:
        for subnet in node_group_subnets(run, ng):
            assert subnet.inputs["mapPublicIpOnLaunch"] is False, (ng.name, subnet.name)
            assert subnet.inputs["tags"].get("kubernetes.io/role/internal-elb") == "1"


def test_system_nodes_span_every_az(run: ProgramRun):
    cfg = stack_config(run.stack)
    ng = run.one(NODE_GROUP, "system-nodes")
    azs = sorted(s.inputs["availabilityZone"] for s in node_group_subnets(run, ng))
    assert azs == sorted(cfg.network.availability_zones)
    assert ng.inputs["labels"] == {"role": "system"}
    assert ng.inputs["instanceTypes"] == [cfg.system_nodes.instance_type]


def test_gpu_node_group_shape(run: ProgramRun):
    cfg = stack_config(run.stack)
    ng = gpu_node_group(run)
    assert ng.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
    assert ng.inputs["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert ng.inputs["scalingConfig"]["minSize"] >= 2
    assert ng.inputs["scalingConfig"] == {
        "minSize": cfg.gpu_nodes.min_size,
        "desiredSize": cfg.gpu_nodes.desired_size,
        "maxSize": cfg.gpu_nodes.max_size,
    }
    assert "instanceTypes" not in ng.inputs  # the type lives in the launch template (EKS allows one place only)


def test_subnets_per_az_with_eks_tags(run: ProgramRun):
    cfg = stack_config(run.stack)
    subnets = run.of_type(SUBNET)
    cluster_tag = f"kubernetes.io/cluster/{PROJECT}-{run.stack}"
    public = [s for s in subnets if s.inputs["mapPublicIpOnLaunch"]]
    private = [s for s in subnets if not s.inputs["mapPublicIpOnLaunch"]]
    assert sorted(s.inputs["availabilityZone"] for s in public) == sorted(cfg.network.availability_zones)
    assert sorted(s.inputs["availabilityZone"] for s in private) == sorted(cfg.network.availability_zones)
    assert all(s.inputs["tags"]["kubernetes.io/role/elb"] == "1" for s in public)
    assert all(s.inputs["tags"][cluster_tag] == CLUSTER_TAG_VALUE for s in subnets)


def test_nat_gateways_per_stack(run: ProgramRun):
    cfg = stack_config(run.stack)
    nats = run.of_type("aws:ec2/natGateway:NatGateway")
    expected = 1 if cfg.network.nat_gateways == "single" else len(cfg.network.availability_zones)
    assert len(nats) == expected
    public_ids = {s.id for s in run.of_type(SUBNET) if s.inputs["mapPublicIpOnLaunch"]}
    assert all(n.inputs["subnetId"] in public_ids for n in nats)
    # every private route table sends 0.0.0.0/0 through one of those NATs
    nat_ids = {n.id for n in nats}
    private_rts = [r for r in run.of_type("aws:ec2/routeTable:RouteTable") if "private" in r.name]
    assert len(private_rts) == len(cfg.network.availability_zones)
    assert all(r.inputs["routes"][0]["natGatewayId"] in nat_ids for r in private_rts)


def test_dev_is_single_nat_and_prod_is_nat_per_az(programs):
    assert len(programs("dev").of_type("aws:ec2/natGateway:NatGateway")) == 1
    prod = programs("prod")
    prod_azs = stack_config("prod").network.availability_zones
    assert len(prod.of_type("aws:ec2/natGateway:NatGateway")) == len(prod_azs) > 1


def test_protect_only_where_configured(run: ProgramRun):
    cfg = stack_config(run.stack)
    assert run.one("aws:ec2/vpc:Vpc").protect is cfg.protect
    assert run.one("eks:index:Cluster").protect is cfg.protect
    # protection is deliberate, not inherited by everything
    assert not any(r.protect for r in run.resources if r.type not in ("aws:ec2/vpc:Vpc", "eks:index:Cluster"))


def test_prod_is_protected(programs):
    prod = programs("prod")
    assert prod.one("aws:ec2/vpc:Vpc").protect and prod.one("eks:index:Cluster").protect


def test_cluster_settings(run: ProgramRun):
    cfg = stack_config(run.stack)
    eks = run.one("eks:index:Cluster")
    i = eks.inputs
    assert i["name"] == f"{PROJECT}-{run.stack}"
    assert i["skipDefaultNodeGroup"] is True
    assert i["createOidcProvider"] is True
    assert i["authenticationMode"] == "API"
    assert i["endpointPrivateAccess"] is True
    assert i["endpointPublicAccess"] is bool(cfg.cluster.public_access_cidrs)
    assert i.get("publicAccessCidrs") in (None, list(cfg.cluster.public_access_cidrs))
    assert "0.0.0.0/0" not in (i.get("publicAccessCidrs") or [])
    assert set(i["enabledClusterLogTypes"]) == set(cfg.cluster.log_types)
    key = run.one("aws:kms/key:Key")
    assert key.urn in eks.property_dependencies["encryptionConfigKeyArn"]
    assert key.inputs["enableKeyRotation"] is True
    # private subnets for the control plane's ENIs, from the network
    private_urns = {s.urn for s in run.of_type(SUBNET) if not s.inputs["mapPublicIpOnLaunch"]}
    assert set(eks.property_dependencies["privateSubnetIds"]) == private_urns


def test_core_addons_are_eks_managed(run: ProgramRun):
    managed = {a.inputs["addonName"]: a for a in run.of_type("aws:eks/addon:Addon")}
    # EBS CSI: llm_pd_eks/storage.py; the node monitoring agent feeds the GPU group's auto repair
    assert set(managed) == {"vpc-cni", "coredns", "kube-proxy", "aws-ebs-csi-driver", "eks-node-monitoring-agent"}
    addons = {k: v for k, v in managed.items() if k != "aws-ebs-csi-driver"}
    eks = run.one("eks:index:Cluster")
    assert eks.inputs["useDefaultVpcCni"] is True  # pulumi-eks installs no second copy
    assert eks.inputs["corednsAddonOptions"]["enabled"] is False
    assert eks.inputs["kubeProxyAddonOptions"]["enabled"] is False
    system_ng = run.one(NODE_GROUP, "system-nodes")
    assert system_ng.urn in addons["coredns"].dependencies  # CoreDNS needs nodes to become healthy
    assert all(eks.urn in a.dependencies for a in addons.values())


def test_node_groups_wait_for_cluster_and_role(run: ProgramRun):
    eks = run.one("eks:index:Cluster")
    # the node role's attachments (the Cluster component's); IRSA roles of add-ons are not the nodes'
    attachments = {
        a.urn
        for a in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if "::llm-pd-eks:index:Cluster$" in a.urn
    }
    assert len(attachments) >= 3
    for ng in run.of_type(NODE_GROUP):
        assert eks.urn in ng.dependencies
        assert attachments <= set(ng.dependencies)
        assert ng.inputs["clusterName"] == eks.inputs["name"]


def test_kubernetes_provider_from_cluster_kubeconfig(run: ProgramRun):
    provider = run.one("pulumi:providers:kubernetes")
    eks = run.one("eks:index:Cluster")
    assert provider.property_dependencies["kubeconfig"] == [eks.urn]


def test_components_parent_their_children(run: ProgramRun):
    components = {r.urn: r for r in run.resources if r.type.startswith(f"{PROJECT}:index:")}
    assert {c.type.split(":")[-1] for c in components.values()} >= {
        "Network",
        "Cluster",
        "SystemNodeGroup",
        "EfaGpuNodeGroup",
        "CoreAddons",
    }
    for r in run.resources:
        if r.type.startswith(f"{PROJECT}:index:"):
            continue
        assert r.parent in components, f"{r.type} {r.name} is not parented to a component"


def test_names_are_deterministic(run: ProgramRun):
    from llm_pd_eks_tools.plan.preview.mockrun import run_program

    again = run_program(run.stack)
    assert sorted(r.urn for r in again.resources) == sorted(r.urn for r in run.resources)


def test_stack_outputs(run: ProgramRun):
    cfg = stack_config(run.stack)
    out = run.stack_outputs
    for key in ("vpcId", "privateSubnetIds", "clusterName", "kubeconfig", "gpuAvailabilityZone", "nodeGroupNames"):
        assert key in out, key
    assert out["gpuAvailabilityZone"] == cfg.gpu_nodes.availability_zone
    assert set(out["nodeGroupNames"]) >= {"system", "gpu"}
    assert len(out["privateSubnetIds"]) == len(cfg.network.availability_zones)
    assert "kubeconfig" in run.secret_outputs


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_each_environment_has_a_valid_stack_file(stack):
    from llm_pd_eks_tools.core.stack import stacks

    assert stack in stacks()
    cfg = stack_config(stack)
    assert cfg.region and cfg.gpu_nodes.instance_type in GPU_INSTANCE_TYPES
