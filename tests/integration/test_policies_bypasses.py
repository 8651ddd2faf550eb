"""The bypasses found by attacking the pack, each as a failing-then-passing pair over the
real analyzer protocol (first-preview variants with unknown IDs where IDs matter), plus malformed
properties that must give a verdict, never a crashed gRPC call."""

from __future__ import annotations

import copy

import pytest
import yaml
from helpers import NODE_GROUP
from policy_fixtures import (
    SELF_ALL,
    UNKNOWN,
    Res,
    efa_interfaces,
    gpu_container,
    gpu_stack,
    judge,
    kv_transfer,
    mandatory,
    of,
    ray_service,
    serve_config,
)

TWO_AZS = ("us-west-2a", "us-west-2b")
REFS = "gpu-references-in-stack"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"


def _policies(verdicts) -> set[str]:
    return {v.policy for v in mandatory(verdicts)}


# -- unknown vs known-external ------------------------------------------------------------------
@pytest.mark.parametrize("unknown_ids", [False, True], ids=["literal-id", "first-preview"])
def test_launch_template_outside_the_stack(unknown_ids):
    """A literal launch template ID no resource carries is judged (external); an unknown one that no
    resource of the stack feeds (an invoke's result) cannot be judged and is refused too."""
    stack = gpu_stack()
    del stack["lt"]
    stack["ng"].deps.pop("launchTemplate")
    stack["ng"].props["instanceTypes"] = ["p5.48xlarge"]
    stack["ng"].props["launchTemplate"] = {"id": UNKNOWN if unknown_ids else "lt-0elsewhere", "version": "1"}
    verdicts = judge(stack)
    if unknown_ids:
        (found,) = of(verdicts, REFS)
        assert "launch template from a value no resource of this stack feeds" in found.message
        assert _policies(verdicts) == {REFS}
    else:
        (found,) = of(verdicts, REFS)
        assert found.urn == stack["ng"].urn and "launch template 'lt-0elsewhere'" in found.message
        assert _policies(verdicts) == {REFS}


@pytest.mark.parametrize("unknown_ids", [False, True], ids=["literal-id", "first-preview"])
def test_subnets_outside_the_stack(unknown_ids):
    stack = gpu_stack()
    stack["ng"].deps.pop("subnetIds")
    stack["ng"].props["subnetIds"] = [UNKNOWN if unknown_ids else "subnet-0other"]
    found = of(judge(stack), REFS)
    assert [v.urn for v in found] == [stack["ng"].urn]
    assert ("subnet IDs from a value no resource" if unknown_ids else "subnet-0other") in found[0].message


def test_external_references_level_is_policy_config():
    stack = gpu_stack()
    stack["ng"].deps.pop("subnetIds")
    stack["ng"].props["subnetIds"] = ["subnet-0other"]
    verdicts = judge(stack, {REFS: "advisory"})
    assert mandatory(verdicts) == [] and of(verdicts, REFS, "advisory")


# -- EFA share of a pod --------------------------------------------------------------------------
def _stack_with_ray(worker: dict, instance_type: str = "p5.48xlarge") -> list[Res]:
    return [*gpu_stack(instance_type).values(), ray_service(worker=worker)]


@pytest.mark.parametrize("efa, violation", [(1, True), (16, True), (32, False)])
def test_pod_requesting_part_of_the_nodes_efa_devices(efa, violation):
    """8 GPUs of a p5.48xlarge (the stack's only GPU type) need all 32 EFA devices."""
    found = of(judge(_stack_with_ray(gpu_container(gpus=8, efa=efa))), "ray-gpu-pods-efa")
    assert bool(found) == violation
    if violation:
        assert "request 32 'vpc.amazonaws.com/efa' device(s)" in found[0].message and f"not {efa}" in found[0].message


def test_pod_efa_share_follows_its_gpu_share_and_node_selector():
    half = gpu_container(gpus=4, efa=16)
    assert of(judge(_stack_with_ray(half)), "ray-gpu-pods-efa") == []
    svc = ray_service(worker=gpu_container(gpus=8, efa=4))
    pod = yaml.safe_load(yaml.safe_dump(svc.props))["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]
    pod["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "p4d.24xlarge"}  # 4 EFA, 8 GPUs
    svc.props["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"] = pod
    assert of(judge([svc]), "ray-gpu-pods-efa") == []
    pod["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "P5.48XLARGE"}
    assert "request 32" in of(judge([svc]), "ray-gpu-pods-efa")[0].message


# -- environment overrides --------------------------------------------------------------------------
def _env_case(env: tuple, extra: tuple = (), env_from: list | None = None) -> list[Res]:
    container = gpu_container(fi_provider=None, env=env)
    if env_from is not None:
        container["envFrom"] = env_from
    return [ray_service(worker=container), *extra]


def _configmap(name: str, data) -> Res:
    return Res(CONFIG_MAP, name, {"metadata": {"name": name, "namespace": "llm"}, "data": data})


@pytest.mark.parametrize(
    "case, violation",
    [
        (({"name": "FI_PROVIDER", "value": "efa"}, {"name": "FI_PROVIDER", "value": "tcp"}), True),  # last wins
        (({"name": "FI_PROVIDER", "value": "tcp"}, {"name": "FI_PROVIDER", "value": "efa"}), False),
    ],
)
def test_duplicated_env_entry_last_one_wins(case, violation):
    assert bool(of(judge(_env_case(case)), "ray-gpu-pods-efa")) == violation


REF = ({"name": "FI_PROVIDER", "valueFrom": {"configMapKeyRef": {"name": "fabric", "key": "provider"}}},)


@pytest.mark.parametrize(
    "extra, violation",
    [
        ((), True),  # the ConfigMap is not in the stack: cannot be judged, fail closed
        ((_configmap("fabric", {"provider": "tcp"}),), True),
        ((_configmap("fabric", {"provider": "efa"}),), False),
        ((_configmap("fabric", UNKNOWN),), True),  # first preview: not readable, so refused
    ],
)
def test_fi_provider_from_a_configmap_is_resolved(extra, violation):
    found = of(judge(_env_case(REF, extra)), "ray-gpu-pods-efa")
    assert bool(found) == violation
    if violation and not extra:
        assert "ConfigMap 'fabric'" in found[0].message


@pytest.mark.parametrize(
    "extra, violation",
    [
        ((_configmap("fabric-env", {"FI_PROVIDER": "efa"}),), False),  # was a false positive
        ((_configmap("fabric-env", {"FI_PROVIDER": "sockets"}),), True),
        ((), True),
    ],
)
def test_fi_provider_through_env_from(extra, violation):
    cases = _env_case((), extra, env_from=[{"configMapRef": {"name": "fabric-env"}}])
    assert bool(of(judge(cases), "ray-gpu-pods-efa")) == violation


def test_env_overrides_env_from():
    cases = _env_case(
        ({"name": "FI_PROVIDER", "value": "efa"},),
        (_configmap("fabric-env", {"FI_PROVIDER": "tcp"}),),
        env_from=[{"configMapRef": {"name": "fabric-env"}}],
    )
    assert of(judge(cases), "ray-gpu-pods-efa") == []


@pytest.mark.parametrize("value, violation", [("tcp", True), ("efa", False)])
def test_fi_provider_in_the_serve_configs_runtime_env(value, violation):
    config = serve_config(kv_transfer())
    config["applications"][0]["args"]["decode_config"]["runtime_env"]["env_vars"]["FI_PROVIDER"] = value
    found = of(judge([ray_service(config)]), "ray-gpu-pods-efa")
    assert bool(found) == violation
    if violation:
        assert "runtime_env.env_vars" in found[0].message and "decode_config" in found[0].message


# -- the type table ---------------------------------------------------------------------------------
@pytest.mark.parametrize("spelling", ["P5.48XLARGE", " p5.48xlarge "])
def test_type_names_are_normalised(spelling):
    """A node group without launch template across two AZs, the type spelled in capitals."""
    stack = gpu_stack(azs=TWO_AZS)
    del stack["lt"]
    stack["ng"].deps.pop("launchTemplate")
    del stack["ng"].props["launchTemplate"]
    stack["ng"].props["instanceTypes"] = [spelling]
    assert {"gpu-node-group-single-az", "efa-on-gpu-nodes", "gpu-cluster-placement-group"} <= _policies(judge(stack))
    stack["ng"].props["instanceTypes"] = ["m7i.2xlarge"]
    assert mandatory(judge(stack)) == []


def _ng_of(instance_type: str) -> list[Res]:
    subnet = Res("aws:ec2/subnet:Subnet", "private-a", {"availabilityZone": "us-west-2a", "vpcId": "vpc-1"})
    return [
        subnet,
        Res(
            NODE_GROUP,
            "new-gpus",
            {"instanceTypes": [instance_type], "subnetIds": [UNKNOWN]},
            deps={"subnetIds": [subnet]},
        ),
    ]


def test_gpu_type_missing_from_the_table_fails_closed():
    found = of(judge(_ng_of("p6e-gb200.36xlarge")), REFS)
    assert len(found) == 1 and "p6e-gb200.36xlarge" in found[0].message and "extraEfaGpuTypes" in found[0].message
    assert of(judge(_ng_of("m7i.large")), REFS) == []


def test_table_extension_and_decisions_come_from_policy_config():
    extended = judge(
        _ng_of("p6e-gb200.36xlarge"),
        {
            name: {"extraEfaGpuTypes": {"p6e-gb200.36xlarge": 8}}
            for name in (
                "gpu-node-group-single-az",
                "efa-on-gpu-nodes",
                "efa-interface-count",
                "gpu-cluster-placement-group",
                "gpu-nodes-private",
                "efa-security-group",
                REFS,
            )
        },
    )
    assert of(extended, REFS) == []
    assert of(extended, "efa-on-gpu-nodes")  # now judged as an EFA type: it has no launch template
    assert of(judge(_ng_of("g5.xlarge"), {REFS: {"nonEfaGpuTypes": ["G5.xlarge"]}}), REFS) == []
    assert of(judge(_ng_of("g5.xlarge"), {REFS: {"unlistedGpuTypes": "allow"}}), REFS) == []
    assert of(judge(_ng_of("g5.xlarge")), REFS)


# -- other paths to GPU capacity --------------------------------------------------------------------
def _path(kind: str, props: dict, deps: dict | None = None) -> Res:
    return Res(kind, "other-path", props, deps=deps or {})


def test_ec2_instance_is_judged_like_a_node_group():
    base = gpu_stack()
    bare = _path(
        "aws:ec2/instance:Instance",
        {"instanceType": "p5.48xlarge", "subnetId": UNKNOWN},
        {"subnetId": [base["subnet-us-west-2a"]]},
    )
    assert {"efa-on-gpu-nodes", "gpu-cluster-placement-group"} <= _policies(judge([base["subnet-us-west-2a"], bare]))
    good = _path(
        "aws:ec2/instance:Instance",
        {
            "subnetId": UNKNOWN,
            "launchTemplate": {"id": UNKNOWN},
            "metadataOptions": base["lt"].props["metadataOptions"],
        },
        {"subnetId": [base["subnet-us-west-2a"]], "launchTemplate": [base["lt"]]},
    )
    del base["ng"]
    assert mandatory(judge([*base.values(), good])) == []


def test_launch_configuration_cannot_carry_efa():
    lc = _path(
        "aws:ec2/launchConfiguration:LaunchConfiguration",
        {"instanceType": "p5.48xlarge", "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1}},
    )
    found = of(judge([lc]), "efa-on-gpu-nodes")
    assert [v.urn for v in found] == [lc.urn] and "launch configuration" in found[0].message
    lc.props["instanceType"] = "m7i.large"
    assert mandatory(judge([lc])) == []


@pytest.mark.parametrize("unknown_ids", [False, True], ids=["known-ids", "first-preview"])
def test_auto_scaling_group_with_instance_overrides(unknown_ids):
    stack = gpu_stack(azs=TWO_AZS, unknown_ids=unknown_ids)
    del stack["ng"]
    cpu_lt = stack["lt"]
    cpu_lt.props.pop("instanceType")
    cpu_lt.props["networkInterfaces"] = [{"networkCardIndex": 0, "deviceIndex": 0}]
    subnets = [stack["subnet-us-west-2a"]]
    asg = _path(
        "aws:autoscaling/group:Group",
        {
            "vpcZoneIdentifiers": [UNKNOWN],
            "mixedInstancesPolicy": {
                "launchTemplate": {
                    "launchTemplateSpecification": {"launchTemplateId": UNKNOWN if unknown_ids else "lt-0123"},
                    "overrides": [{"instanceType": "m7i.large"}, {"instanceType": "p5.48xlarge"}],
                }
            },
        },
        {"vpcZoneIdentifiers": subnets, "mixedInstancesPolicy": [cpu_lt]},
    )
    found = of(judge([*stack.values(), asg]), "efa-on-gpu-nodes")
    assert [v.urn for v in found] == [cpu_lt.urn] and "Auto Scaling group 'other-path'" in found[0].message
    cpu_lt.props["networkInterfaces"] = efa_interfaces(32, UNKNOWN if unknown_ids else "sg-efa")
    assert mandatory(judge([*stack.values(), asg])) == []
    asg.deps["vpcZoneIdentifiers"] = [stack[f"subnet-{az}"] for az in TWO_AZS]
    assert of(judge([*stack.values(), asg]), "gpu-node-group-single-az")


def test_pulumi_eks_managed_node_group_with_efa_support():
    """pulumi-eks ManagedNodeGroup `enableEfaSupport` builds the EFA launch template and a cluster
    placement group in `placementGroupAvailabilityZone` (pulumi/pulumi-eks#1593)."""
    subnet = gpu_stack()["subnet-us-west-2a"]
    group = _path(
        "eks:index:ManagedNodeGroup",
        {"instanceTypes": ["p5.48xlarge"], "subnetIds": [UNKNOWN]},
        {"subnetIds": [subnet]},
    )
    assert {"efa-on-gpu-nodes", "gpu-cluster-placement-group"} <= _policies(judge([subnet, group]))
    group.props.update(enableEfaSupport=True, placementGroupAvailabilityZone="us-west-2a")
    assert mandatory(judge([subnet, group])) == []
    group.props["placementGroupAvailabilityZone"] = "us-west-2b"  # not the subnet's AZ
    assert of(judge([subnet, group]), "gpu-node-group-single-az")


@pytest.mark.parametrize("kind", ["eks:index:NodeGroupV2", "eks:index:NodeGroup"])
def test_pulumi_eks_self_managed_node_groups_cannot_carry_efa(kind):
    subnet = gpu_stack()["subnet-us-west-2a"]
    group = _path(
        kind,
        {"instanceType": "p5.48xlarge", "nodeSubnetIds": [UNKNOWN], "enableEfaSupport": True},
        {"nodeSubnetIds": [subnet]},
    )
    (found,) = of(judge([subnet, group]), "efa-on-gpu-nodes")
    assert "no EFA option" in found.message
    group.props["instanceType"] = "m7i.2xlarge"
    assert mandatory(judge([subnet, group])) == []


@pytest.mark.parametrize(
    "requirement, violation",
    [
        ({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}, True),
        ({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["p5"]}, True),
        ({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large", "c7i.large"]}, False),
        ({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}, True),  # unrestricted type
        ({"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}, False),
        # Karpenter's category is the type's leading letters (aws/karpenter-provider-aws
        # pkg/providers/instancetype/types.go, instanceTypeScheme): gr6 is "gr", so p and g leave it.
        ({"key": "karpenter.k8s.aws/instance-category", "operator": "NotIn", "values": ["p", "g"]}, True),
        ({"key": "karpenter.k8s.aws/instance-category", "operator": "NotIn", "values": ["p", "g", "gr"]}, False),
        ({"key": "karpenter.k8s.aws/instance-category", "operator": "NotIn", "values": ["p"]}, True),  # g6e left
        ({"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"}, False),
    ],
)
def test_karpenter_node_pool_cannot_launch_efa_gpu_types(requirement, violation):
    pool = Res(
        "kubernetes:karpenter.sh/v1:NodePool",
        "gpu",
        {
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [requirement],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    }
                }
            }
        },
    )
    found = of(judge([pool]), REFS)
    assert bool(found) == violation
    if violation:
        assert "EC2NodeClass is a launch path this pack does not judge" in found[0].message


def _bad_worker_service(api: str = "ray.io/v1") -> dict:
    svc = ray_service(serve_config(kv_transfer(["UCX"])), worker=gpu_container(efa=None))
    return {**svc.props, "apiVersion": api}


@pytest.mark.parametrize(
    "resource",
    [
        Res("kubernetes:ray.io/v1alpha1:RayService", "old", _bad_worker_service("ray.io/v1alpha1")),
        Res("kubernetes:apiextensions.k8s.io:CustomResource", "generic", _bad_worker_service()),
        Res(
            "kubernetes:helm.sh/v3:Release", "chart", {"chart": "llm", "values": {"services": [_bad_worker_service()]}}
        ),
        Res("kubernetes:helm.sh/v4:Chart", "chart4", {"values": {"manifest": yaml.safe_dump(_bad_worker_service())}}),
    ],
    ids=["v1alpha1", "custom-resource", "helm-values", "yaml-in-values"],
)
def test_ray_service_declared_anywhere_is_judged(resource):
    verdicts = judge([resource])
    assert of(verdicts, "nixl-libfabric-backend") and of(verdicts, "ray-gpu-pods-efa")
    fixed = copy.deepcopy(resource)
    text = yaml.safe_dump(fixed.props).replace("- UCX", "- LIBFABRIC")
    fixed.props = yaml.safe_load(text)
    assert of(judge([fixed]), "nixl-libfabric-backend") == []


@pytest.mark.parametrize("kind, path", [("RayCluster", ("spec",)), ("RayJob", ("spec", "rayClusterSpec"))])
def test_ray_cluster_and_ray_job_workers_are_judged(kind, path):
    cluster = {
        "workerGroupSpecs": [{"groupName": "gpu", "template": {"spec": {"containers": [gpu_container(efa=None)]}}}]
    }
    props: dict = {"metadata": {"name": "x"}}
    node = props
    for step in path[:-1]:
        node = node.setdefault(step, {})
    node[path[-1]] = cluster
    res = Res(f"kubernetes:ray.io/v1:{kind}", "x", props)
    assert of(judge([res]), "ray-gpu-pods-efa")
    cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"] = [gpu_container()]
    assert of(judge([res]), "ray-gpu-pods-efa") == []


# -- missing rules ----------------------------------------------------------------------------------
@pytest.mark.parametrize("unknown_ids", [False, True], ids=["known-ids", "first-preview"])
def test_efa_security_group_needs_its_self_rule(unknown_ids):
    stack = gpu_stack(unknown_ids=unknown_ids)
    assert mandatory(judge(stack)) == []
    stack["sg"].props["ingress"] = [{"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}]
    found = of(judge(stack), "efa-security-group")
    assert {v.urn for v in found} == {stack["sg"].urn, stack["lt"].urn}
    assert any("admits the internet" in v.message for v in found)


def test_efa_self_rule_as_separate_rule_resources_passes():
    stack = gpu_stack()
    # no inline rules at all: inline ones, even [], would make the provider remove the separate rules
    del stack["sg"].props["ingress"], stack["sg"].props["egress"]
    assert of(judge(stack), "efa-security-group")
    rules = [
        Res(
            "aws:ec2/securityGroupRule:SecurityGroupRule",
            f"efa-{d}",
            {"type": d, **SELF_ALL, "securityGroupId": UNKNOWN},
            deps={"securityGroupId": [stack["sg"]]},
        )
        for d in ("ingress", "egress")
    ]
    assert of(judge([*stack.values(), *rules]), "efa-security-group") == []


@pytest.mark.parametrize("unknown_ids", [False, True], ids=["known-ids", "first-preview"])
@pytest.mark.parametrize("gateway, violation", [("igw", True), ("nat", False)])
def test_private_subnet_means_no_route_to_an_internet_gateway(unknown_ids, gateway, violation):
    stack = gpu_stack(unknown_ids=unknown_ids)
    subnet = stack["subnet-us-west-2a"]
    igw = Res("aws:ec2/internetGateway:InternetGateway", "igw", {"vpcId": "vpc-1"})
    nat = Res("aws:ec2/natGateway:NatGateway", "nat", {"subnetId": "subnet-public"})
    route = (
        {"cidrBlock": "0.0.0.0/0", "gatewayId": UNKNOWN if unknown_ids else "igw-0abc"}
        if gateway == "igw"
        else {"cidrBlock": "0.0.0.0/0", "natGatewayId": UNKNOWN if unknown_ids else "nat-0abc"}
    )
    table = Res(
        "aws:ec2/routeTable:RouteTable",
        "rt",
        {"vpcId": "vpc-1", "routes": [route]},
        deps={"routes": [igw if gateway == "igw" else nat]},
    )
    assoc = Res(
        "aws:ec2/routeTableAssociation:RouteTableAssociation",
        "rta",
        {"subnetId": UNKNOWN, "routeTableId": UNKNOWN},
        deps={"subnetId": [subnet], "routeTableId": [table]},
    )
    found = of(judge([*stack.values(), igw, nat, table, assoc]), "gpu-nodes-private")
    assert bool(found) == violation
    if violation:
        assert "route table 'rt' routes to an internet gateway" in found[0].message


def _cluster(cidrs) -> Res:
    return Res("eks:index:Cluster", "eks", {"endpointPublicAccess": True, "publicAccessCidrs": cidrs})


@pytest.mark.parametrize(
    "cidrs, violation",
    [
        (["0.0.0.0/1", "128.0.0.0/1"], True),  # together: the whole internet
        (["0.0.0.0/2", "64.0.0.0/2", "128.0.0.0/2", "192.0.0.0/2"], True),
        (["10.0.0.0/4"], True),
        (["203.0.113.0/24", "198.51.100.0/24"], False),
    ],
)
def test_public_api_cidrs_are_judged_together(cidrs, violation):
    found = of(judge([_cluster(cidrs)]), "eks-public-endpoint-restricted")
    assert bool(found) == violation
    if cidrs[0] == "0.0.0.0/1":
        assert "0.0.0.0/1 + 128.0.0.0/1 = 0.0.0.0/0" in found[0].message


@pytest.mark.parametrize(
    "resource, fixed",
    [
        (
            Res("kubernetes:elbv2.k8s.aws/v1beta1:IngressClassParams", "alb", {"spec": {"scheme": "internet-facing"}}),
            {"spec": {"scheme": "internal"}},
        ),
        (
            Res(
                "kubernetes:gateway.networking.k8s.io/v1:Gateway",
                "gw",
                {
                    "spec": {
                        "gatewayClassName": "x",
                        "infrastructure": {
                            "annotations": {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing"}
                        },
                    }
                },
            ),
            {"spec": {"gatewayClassName": "x"}},
        ),
        (
            Res(
                "kubernetes:gateway.k8s.aws/v1beta1:LoadBalancerConfiguration",
                "lbc",
                {"spec": {"scheme": "internet-facing"}},
            ),
            {"spec": {}},
        ),  # the controller's default: internal
    ],
    ids=["ingress-class-params", "gateway", "lb-configuration"],
)
def test_exposure_through_ingress_class_params_and_gateways(resource, fixed):
    assert of(judge([resource]), "serve-endpoint-not-internet-facing")
    resource.props = fixed
    assert of(judge([resource]), "serve-endpoint-not-internet-facing") == []


TOKEN = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"


@pytest.mark.parametrize(
    "where",
    ["args-equals", "args-next", "configmap", "engine-kwargs", "helm-values"],
)
def test_literal_tokens_outside_env(where):
    def build(secret: str) -> Res:
        if where in ("args-equals", "args-next"):
            worker = gpu_container()
            worker["args"] = [f"--hf-token={secret}"] if where == "args-equals" else ["--hf-token", secret]
            return ray_service(worker=worker)
        if where == "configmap":
            return _configmap("env", {"HF_TOKEN": secret, "FI_PROVIDER": "efa"})
        if where == "engine-kwargs":
            config = serve_config(kv_transfer())
            config["applications"][0]["args"]["prefill_config"]["engine_kwargs"]["hf_token"] = secret
            return ray_service(config)
        return Res("kubernetes:helm.sh/v3:Release", "chart", {"values": {"auth": {"token": secret}}})

    found = of(judge([build(TOKEN)]), "no-literal-secrets-in-pods")
    assert len(found) == 1 and TOKEN not in found[0].message  # never echoes the value
    if where != "helm-values":  # by name: any literal value counts there
        assert of(judge([build("not-a-token-shape")]), "no-literal-secrets-in-pods")
    assert (
        of(judge([build("${HF_TOKEN}" if where != "helm-values" else "placeholder")]), "no-literal-secrets-in-pods")
        == []
    )


def test_ordinary_args_and_configmaps_are_not_secrets():
    worker = gpu_container()
    worker["args"] = ["--port=8000", "--max-num-batched-tokens", "8192", "--tokenizer", "qwen"]
    resources = [ray_service(worker=worker), _configmap("env", {"FI_PROVIDER": "efa", "MAX_TOKENS": "8192"})]
    assert of(judge(resources), "no-literal-secrets-in-pods") == []


# -- malformed properties: a verdict, never a crash -------------------------------------------------
def test_serve_config_that_is_not_text_is_refused():
    svc = ray_service(123)
    (found,) = of(judge([svc]), "nixl-libfabric-backend")
    assert "is a int" in found.message or "is a float" in found.message


def test_network_card_index_that_is_not_a_number_is_refused():
    stack = gpu_stack("p4d.24xlarge")
    stack["lt"].props["networkInterfaces"][1]["networkCardIndex"] = "zero"
    verdicts = judge(stack)
    (found,) = of(verdicts, "efa-on-gpu-nodes")
    assert "networkCardIndex is 'zero'" in found.message
    assert [v for v in verdicts if "could not judge" in v.message] == []


def test_a_rule_that_cannot_judge_reports_instead_of_crashing():
    """A broken regex in the policy config would raise inside the rule: the gRPC call still answers."""
    svc = ray_service()
    (found,) = of(
        judge([svc], {"no-literal-secrets-in-pods": {"secretNamePattern": "("}}), "no-literal-secrets-in-pods"
    )
    assert "could not judge resource 'llm'" in found.message and "error" in found.message


@pytest.mark.parametrize(
    "bend",
    [
        lambda s: s["lt"].props.update(networkInterfaces="eth0"),
        lambda s: s["lt"].props.update(networkInterfaces=[17]),
        lambda s: s["ng"].props.update(subnetIds=5, instanceTypes=[{"a": 1}]),
        lambda s: s["lt"].props.update(placement="cluster", metadataOptions=[1]),
        lambda s: s["sg"].props.update(ingress="all"),
        lambda s: s["subnet-us-west-2a"].props.update(availabilityZone=7),
        lambda s: s["lt"].props["networkInterfaces"][0].update(securityGroups=[[1], {"a": 1}]),
        lambda s: s["component"].props.update(kind=[1], apiVersion={"a": 1}),
    ],
)
def test_odd_shapes_never_crash_the_pack(bend):
    """Found by replacing each property of dev's resources with 123 / "x" / [1] / {"a": 1} / null."""
    stack = gpu_stack()
    bend(stack)
    stack["component"].type = "kubernetes:core/v1:Service"  # a Kubernetes object: every K8s rule reads it
    verdicts = judge(stack)  # a crash would raise grpc.RpcError here
    assert [v for v in verdicts if "could not judge" in v.message] == []


def test_compliant_variants_pass_every_rule():
    """Shapes a real deployment uses that must not be refused: an image pinned by digest, FI_PROVIDER
    through envFrom of a ConfigMap in the stack, the EFA self rule as separate rule resources."""
    worker = gpu_container(fi_provider=None)
    worker["image"] = "rayproject/ray-llm@sha256:" + "0123456789abcdef" * 4
    worker["envFrom"] = [{"configMapRef": {"name": "fabric-env"}}]
    stack = gpu_stack()
    del stack["sg"].props["ingress"]  # no inline ingress: inline rules, even [], remove separate ones
    rule = Res(
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
        "efa-self",
        {"ipProtocol": "-1", "securityGroupId": UNKNOWN, "referencedSecurityGroupId": UNKNOWN},
        deps={"securityGroupId": [stack["sg"]], "referencedSecurityGroupId": [stack["sg"]]},
    )
    resources = [*stack.values(), rule, ray_service(worker=worker), _configmap("fabric-env", {"FI_PROVIDER": "efa"})]
    assert judge(resources) == []
    del resources[resources.index(rule)]
    assert of(judge(resources), "efa-security-group")  # the rule resource was what made it pass


def test_a_kubernetes_secret_may_hold_the_token():
    """The engine hands analyzers secret values in plaintext; a Secret is where the token belongs."""
    secret = Res(
        "kubernetes:core/v1:Secret",
        "hf",
        {"metadata": {"name": "hf", "namespace": "llm"}, "type": "Opaque", "stringData": {"token": TOKEN}},
    )
    assert judge([secret]) == []
    leaked = _configmap("hf", {"token": TOKEN})
    assert of(judge([leaked]), "no-literal-secrets-in-pods")


def test_launch_template_availability_zone_counts_for_the_single_az_rule():
    stack = gpu_stack()
    stack["lt"].props["placement"]["availabilityZone"] = "us-west-2b"  # the subnet is in us-west-2a
    (found,) = of(judge(stack), "gpu-node-group-single-az")
    assert "us-west-2a" in found.message and "us-west-2b" in found.message
    stack["lt"].props["placement"]["availabilityZone"] = "us-west-2a"
    assert mandatory(judge(stack)) == []


def test_karpenter_node_pool_naming_an_unlisted_gpu_type():
    pool = Res(
        "kubernetes:karpenter.sh/v1:NodePool",
        "new",
        {
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [
                            {
                                "key": "node.kubernetes.io/instance-type",
                                "operator": "In",
                                "values": ["P6E-GB200.36xlarge"],
                            }
                        ]
                    }
                }
            }
        },
    )
    (found,) = of(judge([pool]), REFS)
    assert "p6e-gb200.36xlarge" in found.message and "table does not list" in found.message
    assert of(judge([pool], {REFS: {"nonEfaGpuTypes": ["p6e-gb200.36xlarge"]}}), REFS) == []


def test_gpu_launch_template_no_group_uses_is_judged_on_its_own():
    """A node group in another stack (or a later change) would launch it: its own content is judged."""
    stack = gpu_stack()
    lone = {k: stack[k] for k in ("pg", "sg", "lt")}
    assert mandatory(judge(lone)) == []
    lone["lt"].props["networkInterfaces"] = [{"networkCardIndex": 0, "deviceIndex": 0}]
    (found,) = of(judge(lone), "efa-on-gpu-nodes")
    assert found.message.split("\n")[-1].startswith("launch template 'gpu-nodes-lt' (p5.48xlarge) declares no EFA")


@pytest.mark.parametrize("how", ["main-association", "default-route-table"])
def test_subnet_without_association_uses_the_vpcs_main_route_table(how):
    stack = gpu_stack(unknown_ids=True)
    vpc = Res("aws:ec2/vpc:Vpc", "vpc", {"cidrBlock": "10.0.0.0/16"})
    igw = Res("aws:ec2/internetGateway:InternetGateway", "igw", {"vpcId": UNKNOWN}, deps={"vpcId": [vpc]})
    subnet = stack["subnet-us-west-2a"]
    subnet.props["vpcId"] = UNKNOWN
    subnet.deps = {"vpcId": [vpc]}
    routes = [{"cidrBlock": "0.0.0.0/0", "gatewayId": UNKNOWN}]
    if how == "main-association":
        table = Res(
            "aws:ec2/routeTable:RouteTable",
            "main",
            {"vpcId": UNKNOWN, "routes": routes},
            deps={"vpcId": [vpc], "routes": [igw]},
        )
        main = Res(
            "aws:ec2/mainRouteTableAssociation:MainRouteTableAssociation",
            "main-assoc",
            {"vpcId": UNKNOWN, "routeTableId": UNKNOWN},
            deps={"vpcId": [vpc], "routeTableId": [table]},
        )
        extra = [table, main]
    else:
        table = Res(
            "aws:ec2/defaultRouteTable:DefaultRouteTable",
            "main",
            {"defaultRouteTableId": UNKNOWN, "routes": routes},
            deps={"defaultRouteTableId": [vpc], "routes": [igw]},
        )
        extra = [table]
    resources = [*stack.values(), vpc, igw, *extra]
    (found,) = of(judge(resources), "gpu-nodes-private")
    assert "route table 'main' routes to an internet gateway" in found.message
    table.deps["routes"] = []  # the default route goes elsewhere (NAT)
    table.props["routes"] = [{"cidrBlock": "0.0.0.0/0", "natGatewayId": "nat-1"}]
    assert of(judge(resources), "gpu-nodes-private") == []


@pytest.mark.parametrize("kind, cards, violation", [("efa", 4, False), ("efa", 1, True), ("interface", 4, True)])
def test_ec2_instance_built_from_existing_enis(kind, cards, violation):
    """aws.ec2.Instance may attach pre-created ENIs instead of a launch template: their types count."""
    base = gpu_stack("p4d.24xlarge", unknown_ids=True)
    enis = [
        Res(
            "aws:ec2/networkInterface:NetworkInterface",
            f"eni-{i}",
            {"subnetId": UNKNOWN, "interfaceType": kind if i == 0 or kind != "efa" else "efa-only"},
        )
        for i in range(cards)
    ]
    inst = _path(
        "aws:ec2/instance:Instance",
        {
            "instanceType": "p4d.24xlarge",
            "placementGroup": UNKNOWN,
            "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1},
            "networkInterfaces": [
                {"networkInterfaceId": UNKNOWN, "deviceIndex": 0 if i == 0 else 1, "networkCardIndex": i}
                for i in range(cards)
            ],
        },
        {"networkInterfaces": enis, "placementGroup": [base["pg"]]},
    )
    found = _policies(judge([base["pg"], *enis, inst]))
    assert bool(found & {"efa-on-gpu-nodes", "efa-interface-count"}) == violation, found
