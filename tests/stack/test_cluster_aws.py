"""The control plane's AWS settings read as AWS applies them: upgrade policy, control-plane log
group, the VPC CNI's own IRSA role, the S3 gateway endpoint, the public serving endpoint.

AWS pages each rule follows are cited next to the code (llm_pd_eks/cluster.py, llm_pd_eks/network.py,
llm_pd_eks/serve_endpoint.py); these tests run the program under mocks and read the plan.
"""

from __future__ import annotations

import base64
import json

import pytest
from helpers import NODE_GROUP, STACKS, run_with

from llm_pd_eks_tools.core.stack import load_stack_config, stack_config
from llm_pd_eks_tools.core.stackfile import PROJECT
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program

ROLE = "aws:iam/role:Role"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ADDON = "aws:eks/addon:Addon"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
CNI_POLICY = "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"


def depends(run: ProgramRun, reg, on) -> bool:
    return on.urn in reg.dependencies or any(on.urn in deps for deps in reg.property_dependencies.values())


# -- EKS upgrade policy -----------------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_standard_support_unless_the_stack_opts_in(programs, stack):
    eks = programs(stack).one("eks:index:Cluster")
    assert eks.inputs["upgradePolicy"] == {"supportType": "STANDARD"}


def test_extended_support_is_an_explicit_choice():
    eks = run_with("dev", cluster={"extendedSupport": True}).one("eks:index:Cluster")
    assert eks.inputs["upgradePolicy"] == {"supportType": "EXTENDED"}


# -- control-plane log group ------------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_the_program_owns_the_control_plane_log_group(programs, stack):
    run = programs(stack)
    eks = run.one("eks:index:Cluster")
    group = run.one(LOG_GROUP, "control-plane")
    assert group.inputs["name"] == f"/aws/eks/{eks.inputs['name']}/cluster"  # the group EKS writes to
    assert group.inputs["retentionInDays"] == stack_config(stack).cluster.log_retention_days == 90
    assert not group.inputs.get("skipDestroy")  # deleted with the stack
    assert group.urn in eks.property_dependencies["clusterTags"]  # exists before EKS would make its own


def test_a_retention_cloudwatch_refuses_is_refused():
    from llm_pd_eks.config import ConfigError, validate_engine_config

    config, secret_keys = load_stack_config("dev")
    config[f"{PROJECT}:cluster"] = json.dumps({**json.loads(config[f"{PROJECT}:cluster"]), "logRetentionDays": 100})
    with pytest.raises(ConfigError) as info:
        validate_engine_config(config, secret_keys, stack="dev")
    assert "llm-pd-eks:cluster.logRetentionDays" in str(info.value)


def test_no_log_types_no_log_group():
    run = run_with("dev", cluster={"logTypes": []})
    assert run.of_type(LOG_GROUP) == []


# -- VPC CNI with its own IRSA role -------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_the_vpc_cni_uses_its_own_irsa_role_not_the_node_role(programs, stack):
    run = programs(stack)
    cni = next(a for a in run.of_type(ADDON) if a.inputs["addonName"] == "vpc-cni")
    role = next(r for r in run.of_type(ROLE) if r.urn in cni.property_dependencies["serviceAccountRoleArn"])
    assert cni.inputs["serviceAccountRoleArn"] == role.outputs["arn"]
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    issuer = run.one("eks:index:Cluster").outputs["oidcIssuer"]
    assert [s["Condition"]["StringEquals"] for s in trust] == [
        {f"{issuer}:sub": "system:serviceaccount:kube-system:aws-node", f"{issuer}:aud": "sts.amazonaws.com"}
    ]
    policies = {a.inputs["policyArn"]: a for a in run.of_type(ATTACHMENT)}
    assert depends(run, policies[CNI_POLICY], role)
    node_role = run.one(ROLE, "node-role")
    attached_to_nodes = [a.inputs["policyArn"] for a in run.of_type(ATTACHMENT) if depends(run, a, node_role)]
    assert CNI_POLICY not in attached_to_nodes
    for ng in run.of_type(NODE_GROUP):  # no node's aws-node pod starts before the add-on has its role
        assert cni.urn in ng.dependencies


# -- S3 gateway endpoint ------------------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_s3_traffic_of_the_private_subnets_skips_the_nat_gateway(programs, stack):
    run = programs(stack)
    endpoint = run.one("aws:ec2/vpcEndpoint:VpcEndpoint", "s3")
    region = stack_config(stack).region
    assert (endpoint.inputs["serviceName"], endpoint.inputs["vpcEndpointType"]) == (
        f"com.amazonaws.{region}.s3",
        "Gateway",
    )
    private_rts = {
        r.urn
        for r in run.of_type("aws:ec2/routeTable:RouteTable")
        if any("natGatewayId" in route for route in r.inputs["routes"])
    }
    assert len(private_rts) == len(stack_config(stack).network.availability_zones)
    assert set(endpoint.property_dependencies["routeTableIds"]) == private_rts
    assert run.of_type("aws:ec2/vpcEndpoint:VpcEndpoint") == [endpoint]  # no interface endpoints (reason in network.py)


# -- the public serving endpoint ------------------------------------------------------------------
def upstream_source_ranges(service: dict) -> list[str]:
    """Transcribed from kubernetes/cloud-provider v0.35.6, service/helpers/helper.go lines 58-85
    (`GetLoadBalancerSourceRanges`, which cloud-provider-aws's EnsureLoadBalancer reads): the spec
    field, else the `service.beta.kubernetes.io/load-balancer-source-ranges` annotation, else 0.0.0.0/0."""
    specs = (service.get("spec") or {}).get("loadBalancerSourceRanges") or []
    if specs:
        return list(specs)
    val = (
        ((service.get("metadata") or {}).get("annotations") or {})
        .get("service.beta.kubernetes.io/load-balancer-source-ranges", "")
        .strip()
    )
    return (val or "0.0.0.0/0").split(",")


def test_the_oracle_opens_a_service_without_ranges_to_everyone():
    assert upstream_source_ranges({"spec": {"type": "LoadBalancer"}}) == ["0.0.0.0/0"]
    annotation = "service.beta.kubernetes.io/load-balancer-source-ranges"
    annotated = {"metadata": {"annotations": {annotation: " 10.1.0.0/16"}}}
    assert upstream_source_ranges(annotated) == ["10.1.0.0/16"]


def serve_service_of(run: ProgramRun) -> dict:
    return run.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["serveService"]


def test_a_public_endpoint_admits_only_its_source_ranges():
    run = run_with("dev", serving={"publicEndpoint": True, "endpointSourceRanges": ["198.51.100.0/24", "192.0.2.8/32"]})
    service = serve_service_of(run)
    assert service["spec"]["type"] == "LoadBalancer"
    assert upstream_source_ranges(service) == ["198.51.100.0/24", "192.0.2.8/32"]


@pytest.mark.parametrize(
    "ranges, expected",
    [
        ([], "serving.endpointSourceRanges: publicEndpoint is true but no source ranges are set"),
        (["0.0.0.0/0"], "0.0.0.0/0 admits every address"),
    ],
)
def test_a_public_endpoint_open_to_the_internet_is_refused(ranges, expected):
    from llm_pd_eks.config import ConfigError, validate_engine_config

    config, secret_keys = load_stack_config("dev")
    key = f"{PROJECT}:serving"
    config[key] = json.dumps({**json.loads(config[key]), "publicEndpoint": True, "endpointSourceRanges": ranges})
    with pytest.raises(ConfigError) as info:
        validate_engine_config(config, secret_keys, stack="dev")
    assert expected in str(info.value)


@pytest.mark.parametrize("stack", STACKS)
def test_private_endpoints_stay_cluster_ip(programs, stack):
    service = serve_service_of(programs(stack))
    assert service["spec"]["type"] == "ClusterIP" and "loadBalancerSourceRanges" not in service["spec"]


# -- GPU root volume: what is left on it once the NVMe RAID0 holds kubelet and containerd -----------
# awslabs/amazon-eks-ami v20260724: the AL2023 AMI's root volume (templates/al2023/template.json,
# ami_block_device_mappings volume_size); the directories moved to the RAID0: helpers.MOVED_TO_RAID0.
AMI_ROOT_GIB = 20


@pytest.mark.parametrize("stack", STACKS)
def test_the_gpu_root_volume_holds_the_os_not_images_and_weights(programs, stack):
    from llm_pd_eks.catalog import GPU_INSTANCE_TYPES

    run = programs(stack)
    instance = GPU_INSTANCE_TYPES[stack_config(stack).gpu_nodes.instance_type]
    template = run.one("aws:ec2/launchTemplate:LaunchTemplate", "gpu")
    assert instance.nvme_disks > 0
    # nodeadm's NodeConfig asks for the RAID0 that takes MOVED_TO_RAID0 off the root volume
    assert "localStorage:\n      strategy: RAID0" in base64.b64decode(template.inputs["userData"]).decode()
    (bdm,) = template.inputs["blockDeviceMappings"]
    size = bdm["ebs"]["volumeSize"]
    assert AMI_ROOT_GIB < size <= 5 * AMI_ROOT_GIB, size
    raid_gb = instance.nvme_disks * instance.nvme_disk_gb
    assert raid_gb > 10 * size  # where images and weights go instead


def test_each_admin_principal_gets_a_cluster_scoped_admin_access_entry():
    from helpers import engine_config_with

    arns = ["arn:aws:iam::111122223333:role/platform-admins", "arn:aws:iam::111122223333:user/alice"]
    config, secret_keys = engine_config_with("dev", "cluster", adminPrincipalArns=arns)
    cluster = run_program("dev", config=config, secret_keys=secret_keys).one("eks:index:Cluster")
    # access entries need authentication mode API or API_AND_CONFIG_MAP (EKS user guide, access entries)
    assert cluster.inputs["authenticationMode"] == "API"
    entries = cluster.inputs["accessEntries"].values()
    assert sorted(e["principalArn"] for e in entries) == sorted(arns)
    for entry in entries:
        (policy,) = entry["accessPolicies"].values()
        assert policy["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
        assert policy["accessScope"] == {"type": "cluster"}
