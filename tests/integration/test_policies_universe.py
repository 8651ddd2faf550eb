"""The closed universe and the bypass classes it closes, through the analyzer protocol: each test takes
a compliant input, changes one thing, and asserts the verdict (and that the compliant input passes).

Types: tests/unit/test_policy_command_lines.py covers the readers in-process; this file the rules.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from helpers import LAUNCH_TEMPLATE, NODE_GROUP, SUBNET
from policy_fixtures import (
    SECURITY_GROUP,
    Res,
    gpu_container,
    gpu_stack,
    judge,
    mandatory,
    of,
    ray_service,
)

from llm_pd_eks_policy.efa_table import EFA_NETWORK_CARDS
from llm_pd_eks_policy.universe import INERT, JUDGED
from llm_pd_eks_tools.maint import gen_resource_types
from llm_pd_eks_tools.plan.preview.analyzer import UNKNOWN

TYPE = "unjudgeable-type"
REFS = "gpu-references-in-stack"
NIXL = "nixl-libfabric-backend"
POD_EFA = "ray-gpu-pods-efa"
VISIBLE = "serving-workloads-visible"
SINGLE_AZ = "gpu-node-group-single-az"


def _clean(resources, config=None) -> list:
    return mandatory(judge(resources, config))


# -- the universe's data ----------------------------------------------------------------------------
def test_inert_list_is_what_the_generator_produces_from_the_installed_providers():
    assert gen_resource_types.OUTPUT.read_text() == gen_resource_types.generate(), "run `make facts`"
    assert not set(INERT) & set(JUDGED)
    assert all(reason for _, reason in INERT.values())  # one reason a line


def test_a_new_provider_token_is_not_inert_until_a_line_names_it():
    tokens = {"pulumi_aws": ["aws:iam/role:Role", "aws:gpufarm/cluster:Cluster"]}
    text = gen_resource_types.generate(tokens)
    assert "aws:iam/role:Role\t" in text and "gpufarm" not in text


# -- types the pack does not know --------------------------------------------------------------------
@pytest.mark.parametrize(
    "resource",
    [
        Res("aws:cloudformation/stack:Stack", "gpus", {"templateBody": json.dumps({"Resources": {"I": {}}})}),
        Res("aws:batch/computeEnvironment:ComputeEnvironment", "ce", {"computeResources": {"instanceTypes": ["p5"]}}),
        Res("aws-native:ec2:SecurityGroupIngress", "open", {"groupId": "sg-efa", "cidrIp": "0.0.0.0/0"}),
        Res("aws-native:ec2:LaunchTemplate", "imdsv1", {"launchTemplateData": {"metadataOptions": {}}}),
        Res("kubernetes:example.com/v1:GpuJob", "crd", {"spec": {"gpus": 8}}),
    ],
    ids=["cloudformation", "batch", "aws-native-sg-ingress", "aws-native-lt", "crd-without-pods"],
)
def test_a_type_no_rule_judges_is_refused_unless_allowed(resource):
    (found,) = of(judge([resource]), TYPE)
    assert resource.type in found.message and "allowTypes" in found.message
    assert of(judge([resource], {TYPE: {"allowTypes": [resource.type.split(":")[0] + ":*"]}}), TYPE) == []
    assert of(judge([resource], {TYPE: {"allowResources": [f"{resource.type}::{resource.name}"]}}), TYPE) == []
    assert of(judge([resource], {TYPE: {"allowResources": [resource.name]}}), TYPE)  # a name alone: any type


def test_inert_and_judged_types_pass_and_inertness_ends_with_its_inputs():
    nat = Res("aws:ec2/eip:Eip", "nat", {"domain": "vpc"})
    assert of(judge([nat, Res("aws:iam/role:Role", "r", {}), Res("llm-pd-eks:index:Network", "n", {})]), TYPE) == []
    attached = Res("aws:ec2/eip:Eip", "node-ip", {"domain": "vpc", "instance": "i-0abc"})
    (found,) = of(judge([attached]), TYPE)
    assert "sets instance" in found.message


def _lws(args: list[str]) -> Res:
    worker = {**gpu_container(), "args": args}
    return Res(
        "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet",
        "lws",
        {
            "metadata": {"name": "vllm", "namespace": "llm"},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [worker]}}}},
        },
    )


def test_a_kind_with_a_pod_template_is_judged_as_a_workload():
    good = ["vllm", "serve", "q", "--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector",
            "kv_connector_extra_config": {"backends": ["LIBFABRIC"]}})]  # fmt: skip
    assert _clean([_lws(good)]) == []
    default_ucx = ["vllm", "serve", "q", "--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector"})]
    (found,) = of(judge([_lws(default_ucx)]), NIXL)
    assert "LeaderWorkerSet 'vllm'" in found.message and "unset" in found.message


def _env_from_stack(patch: dict | None) -> list[Res]:
    worker = gpu_container(fi_provider=None)
    worker["envFrom"] = [{"configMapRef": {"name": "fabric"}}]
    cm = Res(
        "kubernetes:core/v1:ConfigMap",
        "fabric",
        {"metadata": {"name": "fabric", "namespace": "llm"}, "data": {"FI_PROVIDER": "efa"}},
    )
    out = [*gpu_stack().values(), cm, ray_service(worker=worker)]
    if patch is not None:
        out.append(
            Res(
                "kubernetes:core/v1:ConfigMapPatch",
                "fabric-patch",
                {"metadata": {"name": "fabric", "namespace": "llm"}, "data": patch},
            )
        )
    return out


def test_a_config_map_patch_rewriting_the_provider_is_judged():
    assert of(judge(_env_from_stack(None)), POD_EFA) == []
    assert of(judge(_env_from_stack({"OTHER": "x"})), POD_EFA) == []
    (found,) = of(judge(_env_from_stack({"FI_PROVIDER": "tcp"})), POD_EFA)
    assert "'tcp'" in found.message


def _release(chart: str, values: dict) -> Res:
    return Res("kubernetes:helm.sh/v3:Release", chart, {"chart": chart, "values": values})


def test_vllm_production_stack_release_is_refused():
    # vllm-project/production-stack helm/values.yaml: servingEngineSpec.modelSpec[] with repository and requestGPU
    spec = {"name": "qwen", "repository": "lmcache/lmstack-router", "requestCPU": 8, "requestGPU": 0}
    release = _release("vllm-stack", {"servingEngineSpec": {"modelSpec": [spec]}})
    (found,) = of(judge([release]), VISIBLE)  # its defaults may run GPU pods whatever the values show
    assert "chart 'vllm-stack'" in found.message
    listed = {VISIBLE: {"chartsWithoutGpuPods": ["vllm-stack"]}}
    assert of(judge([release], listed), VISIBLE) == []
    spec["requestGPU"] = 1
    (found,) = of(judge([_release("vllm-stack", {"servingEngineSpec": {"modelSpec": [spec]}})], listed), VISIBLE)
    assert "requestGPU" in found.message


def _node_pool(families: list[str]) -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": families}]
                }
            }
        },
    }


def test_karpenter_node_pools_carried_in_helm_values_are_judged():
    assert of(judge([_release("pools", {"extraObjects": [_node_pool(["m7i"])]})]), REFS) == []
    (found,) = of(judge([_release("pools", {"extraObjects": [_node_pool(["p5"])]})]), REFS)
    assert "NodePool 'gpu' (in Release 'pools'" in found.message
    text = yaml.safe_dump(_node_pool(["p5"]))  # as YAML text too
    assert of(judge([_release("pools", {"manifest": text})]), REFS)


# -- judged paths that stop early --------------------------------------------------------------------
def test_a_template_unknown_as_a_whole_is_judged_through_its_dependency():
    stack = gpu_stack(unknown_ids=True)
    stack["ng"].props["launchTemplate"] = UNKNOWN
    assert _clean(stack) == []
    stack["lt"].props["networkInterfaces"] = [{"deviceIndex": 0, "interfaceType": "interface"}]
    assert of(judge(stack), "efa-on-gpu-nodes")


def test_a_template_unknown_with_no_dependency_is_unjudgeable():
    stack = gpu_stack(unknown_ids=True)
    stack["ng"].props["launchTemplate"] = UNKNOWN
    stack["ng"].deps["launchTemplate"] = []
    (found,) = of(judge(stack), REFS)
    assert "launch template from" in found.message


def test_each_of_two_templates_feeding_one_group_is_judged():
    stack = gpu_stack(unknown_ids=True)
    other = copy.deepcopy(stack["lt"])
    other.name = "gpu-nodes-lt-b"
    stack["lt-b"] = other
    stack["ng"].deps["launchTemplate"] = [stack["lt"], other]
    assert _clean(stack) == []
    other.props["networkInterfaces"] = [{"deviceIndex": 0, "interfaceType": "interface"}]
    (found,) = of(judge(stack), "efa-on-gpu-nodes")
    assert "gpu-nodes-lt-b" in found.message


def test_an_unknown_subnet_beyond_the_recorded_ones_is_unjudgeable():
    stack = gpu_stack(unknown_ids=True)
    assert of(judge(stack), REFS) == []
    stack["ng"].props["subnetIds"] = [UNKNOWN, UNKNOWN]  # the stack's subnet and an invoke's result
    (found,) = of(judge(stack), REFS)
    assert "subnet IDs from" in found.message


def _with_vpc(route_on_main: bool) -> dict[str, Res]:
    stack = gpu_stack()
    vpc = Res("aws:ec2/vpc:Vpc", "vpc", {"cidrBlock": "10.0.0.0/16"})
    igw = Res("aws:ec2/internetGateway:InternetGateway", "igw", {}, deps={"vpcId": [vpc]})
    stack.update(vpc=vpc, igw=igw)
    stack["subnet-us-west-2a"].deps["vpcId"] = [vpc]
    if route_on_main:
        stack["route"] = Res(
            "aws:ec2/route:Route",
            "main-default",
            {"routeTableId": UNKNOWN, "destinationCidrBlock": "0.0.0.0/0", "gatewayId": UNKNOWN},
            deps={"routeTableId": [vpc], "gatewayId": [igw]},
        )
    return stack


def test_an_internet_route_on_the_vpcs_main_route_table_makes_gpu_subnets_public():
    assert _clean(_with_vpc(False)) == []
    (found,) = of(judge(_with_vpc(True)), "gpu-nodes-private")
    assert "main route table" in found.message


def _instance_with_eni(sg_ingress: list[dict], subnet_public: bool = False) -> dict[str, Res]:
    stack = gpu_stack("p4d.24xlarge")
    sg, subnet = stack["sg"], stack["subnet-us-west-2a"]
    sg.props["ingress"] = [*sg.props["ingress"], *sg_ingress]
    subnet.props["mapPublicIpOnLaunch"] = subnet_public
    enis = [
        Res(
            "aws:ec2/networkInterface:NetworkInterface",
            f"efa-{card}",
            {"interfaceType": "efa", "subnetId": UNKNOWN, "securityGroups": [UNKNOWN]},
            deps={"subnetId": [subnet], "securityGroups": [sg]},
        )
        for card in range(4)
    ]
    inst = Res(
        "aws:ec2/instance:Instance",
        "gpu-box",
        {
            "instanceType": "p4d.24xlarge",
            "placementGroup": UNKNOWN,
            "metadataOptions": {"httpTokens": "required", "httpEndpoint": "enabled", "httpPutResponseHopLimit": 1},
            "networkInterfaces": [
                {"networkInterfaceId": UNKNOWN, "deviceIndex": 0 if c == 0 else 1, "networkCardIndex": c}
                for c in range(4)
            ],
        },
        deps={"networkInterfaces": enis, "placementGroup": [stack["pg"]]},
    )
    del stack["ng"], stack["lt"]
    return {**stack, **{e.name: e for e in enis}, "inst": inst}


def test_efa_enis_attached_to_an_instance_are_judged_for_their_group_and_subnet():
    assert _clean(_instance_with_eni([])) == []
    open_sg = _instance_with_eni([{"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}])
    (found,) = of(judge(open_sg), "efa-security-group")
    assert "EFA network interface" in found.message
    assert of(judge(_instance_with_eni([], subnet_public=True)), "gpu-nodes-private")


def test_a_subnet_on_a_templates_interfaces_is_judged_with_the_groups():
    stack = gpu_stack()
    other = Res(SUBNET, "network-private-us-west-2b", {"availabilityZone": "us-west-2b", "mapPublicIpOnLaunch": False})
    stack["other"] = other
    stack["lt"].deps["networkInterfaces"] = [stack["sg"], other]
    for nic in stack["lt"].props["networkInterfaces"]:
        nic["subnetId"] = UNKNOWN
    (found,) = of(judge(stack), SINGLE_AZ)
    assert "us-west-2b" in found.message


def test_a_shared_template_is_judged_for_every_group_using_it():
    stack = gpu_stack("p4d.24xlarge")
    del stack["lt"].props["instanceType"]
    stack["ng"].props["instanceTypes"] = ["p4d.24xlarge"]
    assert _clean(stack) == []
    second = copy.deepcopy(stack["ng"])
    second.name, second.props["instanceTypes"] = "gpu-nodes-ng-p5", ["p5.48xlarge"]
    second.deps = {"subnetIds": stack["ng"].deps["subnetIds"], "launchTemplate": [stack["lt"]]}
    stack["ng2"] = second
    (found,) = of(judge(stack), "efa-interface-count")
    assert "p5.48xlarge" in found.message


def _pinned(types: list[str]) -> list[Res]:
    worker = gpu_container(efa=EFA_NETWORK_CARDS["p4d.24xlarge"].__len__())
    svc = ray_service(worker=worker)
    pod = svc.props["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    term = {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}]}
    pod["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    return [*gpu_stack("p4d.24xlarge").values(), svc]


def test_an_instance_type_pin_with_two_values_holds_the_strictest():
    assert of(judge(_pinned(["p4d.24xlarge"])), POD_EFA) == []
    (found,) = of(judge(_pinned(["p4d.24xlarge", "p5.48xlarge"])), POD_EFA)
    assert "p5.48xlarge" in found.message


def test_a_fleet_whose_gpu_type_is_on_its_template_is_refused():
    stack = gpu_stack()
    cpu_lt = Res(LAUNCH_TEMPLATE, "cpu-lt", {"instanceType": "m7i.large"})
    fleet = Res(
        "aws:ec2/fleet:Fleet",
        "fleet",
        {"launchTemplateConfigs": [{"launchTemplateSpecification": {"launchTemplateId": UNKNOWN}}]},
        deps={"launchTemplateConfigs": [cpu_lt]},
    )
    assert of(judge([*stack.values(), cpu_lt, fleet]), REFS) == []
    fleet.deps = {"launchTemplateConfigs": [stack["lt"]]}
    (found,) = of(judge([*stack.values(), fleet]), REFS)
    assert "Fleet 'fleet'" in found.message and "p5.48xlarge" in found.message


def test_groups_sharing_a_placement_group_stay_in_one_az():
    stack = gpu_stack(azs=("us-west-2a", "us-west-2b"))
    a, b = stack["subnet-us-west-2a"], stack["subnet-us-west-2b"]
    stack["ng"].deps["subnetIds"], stack["ng"].props["subnetIds"] = [a], ["subnet-us-west-2a-id"]
    decode = copy.deepcopy(stack["ng"])
    decode.name = "decode-ng"
    decode.deps = {"subnetIds": [a], "launchTemplate": [stack["lt"]]}
    stack["decode"] = decode
    assert of(judge(stack), SINGLE_AZ) == []
    decode.deps["subnetIds"], decode.props["subnetIds"] = [b], ["subnet-us-west-2b-id"]
    (found,) = of(judge(stack), SINGLE_AZ)
    assert "placement group 'gpu-nodes-pg'" in found.message and found.urn == stack["pg"].urn


def test_an_odcrs_placement_group_comes_from_the_plan():
    stack = gpu_stack()
    theirs = Res("aws:ec2/placementGroup:PlacementGroup", "odcr-pg", {"strategy": "cluster"})
    cr = Res(
        "aws:ec2/capacityReservation:CapacityReservation",
        "odcr",
        {"availabilityZone": "us-west-2a", "instanceType": "p5.48xlarge", "placementGroupArn": UNKNOWN},
        deps={"placementGroupArn": [stack["pg"]]},
    )
    stack["lt"].props["capacityReservationSpecification"] = {
        "capacityReservationTarget": {"capacityReservationId": UNKNOWN}
    }
    stack["lt"].deps["capacityReservationSpecification"] = [cr]
    assert of(judge([*stack.values(), cr]), "capacity-reservation-in-gpu-az") == []
    cr.deps = {"placementGroupArn": [theirs]}
    (found,) = of(judge([*stack.values(), cr, theirs]), "capacity-reservation-in-gpu-az")
    assert "'odcr-pg'" in found.message


# -- workload text -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [["bash", "-lc"], ["tini", "--", "sh", "-c"], ["dumb-init", "--", "/bin/bash", "-ec"]],
    ids=["bash-lc", "tini-sh-c", "dumb-init"],
)
def test_wrapped_shell_scripts_are_read(command):
    worker = gpu_container()
    worker["command"] = [*command, "ray start --block"]
    assert of(judge([*gpu_stack().values(), ray_service(worker=worker)]), POD_EFA) == []
    worker["command"] = [*command, "export FI_PROVIDER=tcp; ray start --block"]
    (found,) = of(judge([*gpu_stack().values(), ray_service(worker=worker)]), POD_EFA)
    assert "FI_PROVIDER='tcp'" in found.message


def test_an_unreadable_line_that_sets_fabric_variables_is_refused():
    worker = gpu_container()
    worker["command"] = ["sh", "-c", 'eval "export FI_PROVIDER=$X"; ray start --block']
    (found,) = of(judge([*gpu_stack().values(), ray_service(worker=worker)]), POD_EFA)
    assert "cannot read" in found.message


def test_a_secret_exported_in_an_init_container_script_is_refused():
    svc = ray_service()
    pod = svc.props["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    pod["initContainers"] = [{"name": "fetch", "image": "busybox", "command": ["sh", "-c", "export X=1; ./fetch"]}]
    assert of(judge([svc]), "no-literal-secrets-in-pods") == []
    pod["initContainers"][0]["command"][2] = "export HF_TOKEN=abc123notatokenshape; ./fetch"
    (found,) = of(judge([svc]), "no-literal-secrets-in-pods")
    assert "sets HF_TOKEN" in found.message and "abc123" not in found.message


def test_serve_configs_given_as_file_paths_are_refused():
    from policy_fixtures import kv_transfer, serve_config

    config = serve_config(kv_transfer())
    assert of(judge([ray_service(config)]), NIXL) == []
    config["applications"][0]["args"] = {"prefill_config": "/configs/prefill.yaml", "decode_config": "/configs/d.yaml"}
    found = of(judge([ray_service(config)]), NIXL)
    assert found and "file path '/configs/prefill.yaml'" in found[0].message


def test_a_load_balancer_head_service_is_refused():
    svc = ray_service()
    head = svc.props["spec"]["rayClusterConfig"]["headGroupSpec"]
    head["serviceType"] = "ClusterIP"
    assert of(judge([svc]), "serve-endpoint-not-internet-facing") == []
    head["serviceType"] = "LoadBalancer"
    (found,) = of(judge([svc]), "serve-endpoint-not-internet-facing")
    assert "head service" in found.message
    head["headService"] = {
        "metadata": {"annotations": {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal"}}
    }
    assert of(judge([svc]), "serve-endpoint-not-internet-facing") == []


# -- no false refusals ----------------------------------------------------------------------------------
def test_vllms_dotted_list_flag_passes():
    worker = gpu_container()
    worker["args"] = ["vllm", "serve", "q", "--kv-transfer-config.kv_connector", "NixlConnector",
                      "--kv-transfer-config.kv_connector_extra_config.backends+", "LIBFABRIC"]  # fmt: skip
    assert of(judge([_lws(worker["args"])]), NIXL) == []
    worker["args"][-1] = "UCX,LIBFABRIC"
    assert of(judge([_lws(worker["args"])]), NIXL)


def test_alert_rules_inside_a_prometheus_release_pass():
    rules = {"groups": [{"name": "vllm", "rules": [{"alert": "VllmQueue", "expr": "vllm:num_requests_waiting > 10"}]}]}
    values = {"additionalPrometheusRulesMap": {"llm": rules}, "prometheus": {"prometheusSpec": {"replicas": 1}}}
    assert of(judge([_release("kube-prometheus-stack", values)]), VISIBLE) == []
    values["prometheus"]["prometheusSpec"]["containers"] = [{"name": "x", "image": "vllm/vllm-openai:v0.26.0"}]
    assert of(judge([_release("kube-prometheus-stack", values)]), VISIBLE)


# -- bounded -------------------------------------------------------------------------------------------
def test_a_billion_laughs_values_string_gets_a_verdict():
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(8):
        text += f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
    release = _release("bomb", {"extra": text + "kind: Deployment\napiVersion: apps/v1\n"})
    (found,) = of(judge([release]), "resource-decodable")
    assert "values.extra" in found.message
    assert of(judge([_release("bomb", {"extra": yaml.safe_dump({"a": [1, 2]})})]), "resource-decodable") == []


def test_the_fixtures_baseline_types_are_judged():
    # the baseline every test bends is judged, never merely allowed, so a refusal above is the change's
    for token in (NODE_GROUP, LAUNCH_TEMPLATE, SUBNET, SECURITY_GROUP):
        assert token in JUDGED
    assert of(judge(gpu_stack()), TYPE) == []


def _two_groups_serving(selector: dict | None) -> list[Res]:
    stack = gpu_stack(azs=("us-west-2a", "us-west-2b"))
    a, b = stack["subnet-us-west-2a"], stack["subnet-us-west-2b"]
    stack["ng"].deps["subnetIds"], stack["ng"].props["subnetIds"] = [a], ["subnet-us-west-2a-id"]
    stack["ng"].props["labels"] = {"role": "prefill"}
    pg2 = copy.deepcopy(stack["pg"])
    pg2.name = "decode-pg"
    lt2 = copy.deepcopy(stack["lt"])
    lt2.name, lt2.deps = "decode-lt", {"placement": [pg2], "networkInterfaces": [stack["sg"]]}
    decode = copy.deepcopy(stack["ng"])
    decode.name, decode.props["labels"] = "decode-ng", {"role": "decode"}
    decode.deps, decode.props["subnetIds"] = {"subnetIds": [b], "launchTemplate": [lt2]}, ["subnet-us-west-2b-id"]
    svc = ray_service()
    if selector is not None:
        pod = svc.props["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
        pod["nodeSelector"] = selector
    return [*stack.values(), pg2, lt2, decode, svc]


def test_a_serving_deployment_keeps_its_gpu_groups_in_one_az():
    assert of(judge(_two_groups_serving({"role": "prefill"})), SINGLE_AZ) == []
    (found,) = of(judge(_two_groups_serving(None)), SINGLE_AZ)
    assert "RayService 'llm'" in found.message and "us-west-2b" in found.message
