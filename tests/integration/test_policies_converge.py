"""The pack closes what it can read and refuses what it cannot: each class of seam as a known-good
input and the same input changed once, through the real analyzer protocol."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from policy_fixtures import UNKNOWN, Res, gpu_stack, judge, kv_transfer, mandatory, of, ray_service, serve_config

from integration.test_policies_workloads import EFA, NIXL, SERVE, engine, manifest, ray_job, stack, workload

TYPE, VISIBLE, IMDS, EXPOSED = (
    "unjudgeable-type",
    "serving-workloads-visible",
    "launch-template-imdsv2",
    "serve-endpoint-not-internet-facing",
)
REFS, DECODE = "gpu-references-in-stack", "resource-decodable"
RELEASE = "kubernetes:helm.sh/v3:Release"


# -- carriers listed inert that are not ----------------------------------------------------------
def test_an_event_target_that_runs_commands_is_not_inert():
    target = "aws:cloudwatch/eventTarget:EventTarget"
    queue = Res(target, "to-queue", {"rule": "r", "arn": "arn:aws:sqs:us-west-2:1:q"})
    assert of(judge([queue]), TYPE) == []
    run = Res(target, "run", {"rule": "r", "arn": "arn:aws:ssm:us-west-2::document/AWS-RunShellScript"})
    run.props["runCommandTargets"] = [{"key": "tag:role", "values": ["gpu"]}]
    (found,) = of(judge([run]), TYPE)
    assert "runCommandTargets" in found.message


def test_a_limit_range_handing_out_gpus_by_default_is_refused():
    limits = {"type": "Container", "default": {"cpu": "1"}}
    quiet = Res("kubernetes:core/v1:LimitRange", "defaults", {"spec": {"limits": [limits]}})
    assert of(judge([quiet]), TYPE) == []
    gpus = copy.deepcopy(quiet)
    gpus.props["spec"]["limits"][0]["default"]["nvidia.com/gpu"] = 1
    (found,) = of(judge([gpus]), TYPE)
    assert "nvidia.com/gpu" in found.message
    allowed = f"{gpus.type}::{gpus.name}"
    assert of(judge([gpus], {TYPE: {"allowResources": [allowed]}}), TYPE) == []


@pytest.mark.parametrize("api", ["v1", "v1beta1"])
def test_a_karpenter_node_class_is_judged_for_imds(api):
    token = f"kubernetes:karpenter.k8s.aws/{api}:EC2NodeClass"
    defaults = Res(token, "gpu", {"spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}]}})
    assert mandatory(judge([defaults])) == []  # Karpenter's defaults: IMDSv2 only, hop limit 1
    open_imds = copy.deepcopy(defaults)
    open_imds.props["spec"]["metadataOptions"] = {"httpTokens": "optional", "httpPutResponseHopLimit": 2}
    (found,) = of(judge([open_imds]), IMDS)
    assert "httpTokens is 'optional'" in found.message and "HopLimit is 2" in found.message


# -- pod templates at paths a table skips ---------------------------------------------------------
def _argo(step: dict[str, Any]) -> Res:
    return Res(
        "kubernetes:argoproj.io/v1alpha1:Workflow",
        "wf",
        {"metadata": {"name": "wf", "namespace": "llm"}, "spec": {"templates": [{"name": "serve", **step}]}},
    )


def test_an_argo_step_container_beside_a_container_set_is_judged():
    cpu = {"name": "prep", "image": "busybox", "command": ["true"]}
    good = _argo({"containerSet": {"containers": [cpu]}, "container": engine()})
    assert mandatory(judge(stack(good))) == []
    bad = _argo({"containerSet": {"containers": [cpu]}, "container": engine(fi_provider="tcp")})
    (found,) = of(judge(stack(bad)), EFA)
    assert "templates[0].container" in found.message and "FI_PROVIDER" in found.message


def test_a_kserve_predictor_model_beside_a_cpu_transformer_is_judged():
    def service(efa: Any) -> Res:
        model = {"modelFormat": {"name": "huggingface"}, "resources": engine(efa=efa)["resources"]}
        model["env"] = [{"name": "FI_PROVIDER", "value": "efa"}]
        spec = {"predictor": {"model": model}, "transformer": {"containers": [{"name": "t", "image": "busybox"}]}}
        return Res("kubernetes:serving.kserve.io/v1beta1:InferenceService", "isvc", {"spec": spec})

    assert of(judge(stack(service(32))), EFA) == []
    (found,) = of(judge(stack(service(None))), EFA)
    assert "predictor.model" in found.message and "vpc.amazonaws.com/efa" in found.message


def test_a_ray_cron_job_is_judged_as_a_ray_job():
    def cron(entrypoint: str) -> Res:
        job = {"entrypoint": entrypoint, "rayClusterSpec": {"headGroupSpec": {"template": {"spec": {}}}}}
        return Res("kubernetes:ray.io/v1:RayCronJob", "nightly", {"spec": {"schedule": "@daily", "jobTemplate": job}})

    good_kv = json.dumps(kv_transfer())
    assert of(judge([cron(f"vllm serve m --kv-transfer-config '{good_kv}'")]), NIXL) == []
    bad_kv = json.dumps(kv_transfer(["UCX"]))
    (found,) = of(judge([cron(f"vllm serve m --kv-transfer-config '{bad_kv}'")]), NIXL)
    assert "RayJob spec" in found.message and "UCX" in found.message


# -- wrappers and charts ---------------------------------------------------------------------------
def test_a_list_wrapping_a_ray_service_is_judged_as_a_ray_service():
    def wrapped(config: dict) -> Res:
        items = {"apiVersion": "v1", "kind": "List", "items": [ray_service(config).props]}
        return Res("kubernetes:yaml/v2:ConfigGroup", "cg", {"yaml": [yaml.safe_dump(items)]})

    assert of(judge(stack(wrapped(serve_config(kv_transfer())))), NIXL) == []
    found = of(judge(stack(wrapped(serve_config(kv_transfer(["UCX"]))))), NIXL)
    assert len(found) == 2  # prefill and decode, each judged in the serve config
    assert all("RayService 'llm'" in v.message and "items[0]" in v.message for v in found)


def test_a_release_of_a_chart_not_known_gpu_free_is_refused_whatever_its_values():
    profile = Res(RELEASE, "stack", {"chart": "vllm-stack", "values": {"servingEngineSpec": {"profile": "h100"}}})
    (found,) = of(judge([profile]), VISIBLE)
    assert "chart 'vllm-stack'" in found.message and "defaults" in found.message
    listed = {VISIBLE: {"chartsWithoutGpuPods": ["vllm-stack"]}}
    assert of(judge([profile], listed), VISIBLE) == []
    assert of(judge([profile], {VISIBLE: {"unjudgeable": {"allow": ["stack"]}}}), VISIBLE) == []


def test_an_image_path_naming_vllm_is_no_engine():
    router = {"image": {"repository": "ghcr.io/vllm-project/semantic-router/extproc", "tag": "v0.1"}}
    values = Res(RELEASE, "router", {"chart": "semantic-router", "values": router})
    config = {VISIBLE: {"chartsWithoutGpuPods": ["semantic-router"]}}
    assert of(judge([values], config), VISIBLE) == []
    engine_values = copy.deepcopy(values)
    engine_values.props["values"]["image"]["repository"] = "docker.io/vllm/vllm-openai"
    assert of(judge([engine_values], config), VISIBLE)


def test_an_allow_list_entry_names_a_type_and_a_name():
    batch = Res("aws:batch/computeEnvironment:ComputeEnvironment", "batch", {})
    job_queue = Res("aws:batch/jobQueue:JobQueue", "batch", {})
    config = {TYPE: {"allowResources": ["aws:batch/computeEnvironment:ComputeEnvironment::batch"]}}
    verdicts = of(judge([batch, job_queue], config), TYPE)
    assert [v.urn for v in verdicts] == [job_queue.urn]


# -- values split across resources -----------------------------------------------------------------
def test_a_deployment_patch_setting_the_provider_is_judged():
    def patch(provider: str) -> Res:
        container = {"name": "vllm", "env": [{"name": "FI_PROVIDER", "value": provider}]}
        obj = manifest(container=container)
        return Res("kubernetes:apps/v1:DeploymentPatch", "vllm-env", obj)

    assert of(judge(stack(workload(), patch("efa"))), EFA) == []
    (found,) = of(judge(stack(workload(), patch("tcp"))), EFA)
    assert "patches FI_PROVIDER to 'tcp'" in found.message


# -- fabric the readers miss -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        [*SERVE, "--config", "/etc/vllm/engine.yaml"],
        ["bash", "-c", ". /etc/fabric.env && exec vllm serve m"],
        ["bash", "-c", "curl -s http://cfg/start.sh | bash"],
        ["bash", "/opt/start.sh"],
        ["python", "-m", "sglang.launch_server", "--disaggregation-transfer-backend", "nixl"],
    ],
    ids=["vllm-config-file", "sourced-env-file", "piped-script", "script-file", "sglang-nixl"],
)
def test_an_engine_whose_fabric_comes_from_unread_text_is_refused(command):
    (found,) = of(judge(stack(workload(container=engine(command=command)))), EFA)
    assert "which the pack cannot read" in found.message


@pytest.mark.parametrize(
    "script",
    ["printf -v FI_PROVIDER tcp; exec vllm serve m", "FI_PROVIDER+=,tcp; exec vllm serve m"],
    ids=["printf-v", "append"],
)
def test_shell_builtins_that_set_the_provider_are_read(script):
    assert of(judge(stack(workload(container=engine(command=["bash", "-c", "exec vllm serve m"])))), EFA) == []
    (found,) = of(judge(stack(workload(container=engine(command=["bash", "-c", script])))), EFA)
    assert "FI_PROVIDER" in found.message and "shell expansion" in found.message


def _python_path_case(files: dict[str, str]) -> list[Res]:
    """An engine whose PYTHONPATH is a directory mounted from a ConfigMap holding `files`."""
    container = engine(env=({"name": "PYTHONPATH", "value": "/opt/modules"},))
    container["volumeMounts"] = [{"name": "modules", "mountPath": "/opt/modules"}]
    res = workload(container=container, volumes=[{"name": "modules", "configMap": {"name": "modules"}}])
    config_map = Res(
        "kubernetes:core/v1:ConfigMap", "modules", {"metadata": {"name": "modules", "namespace": "llm"}, "data": files}
    )
    return stack(res, config_map)


def test_code_loaded_before_the_engine_is_refused():
    assert of(judge(_python_path_case({"builder.py": "def app(): ..."})), EFA) == []
    (found,) = of(judge(_python_path_case({"sitecustomize.py": "import os"})), EFA)
    assert "PYTHONPATH ['/opt/modules']" in found.message and "sitecustomize" in found.message
    env = ({"name": "PYTHONPATH", "value": "/etc/site"},)  # a directory of the image: not readable
    (found,) = of(judge(stack(workload(container=engine(env=env)))), EFA)
    assert "PYTHONPATH ['/etc/site']" in found.message
    preload = ({"name": "LD_PRELOAD", "value": "/opt/libshim.so"},)
    (found,) = of(judge(stack(workload(container=engine(env=preload)))), EFA)
    assert "env LD_PRELOAD" in found.message


@pytest.mark.parametrize("flag", ["--kv-transfer", "--kv-t", "--kv_transfer_conf"])
def test_argparse_abbreviations_of_the_kv_flag_are_read(flag):
    bad = json.dumps({**kv_transfer(), "kv_connector_extra_config": {"backends": ["UCX"]}})
    (found,) = of(judge(stack(workload(container=engine(command=[*SERVE, flag, bad])))), NIXL)
    assert "--kv-transfer-config" in found.message and "UCX" in found.message


def test_a_kv_config_given_through_a_kubernetes_variable_is_read():
    env = ({"name": "KV", "value": json.dumps(kv_transfer())},)
    good = engine(command=[*SERVE, "--kv-transfer-config", "$(KV)"], env=env)
    assert mandatory(judge(stack(workload(container=good)))) == []
    env = ({"name": "KV", "value": json.dumps(kv_transfer(["UCX"]))},)
    bad = engine(command=[*SERVE, "--kv-transfer-config", "$(KV)"], env=env)
    (found,) = of(judge(stack(workload(container=bad))), NIXL)
    assert "UCX" in found.message


def test_a_serve_config_from_a_file_in_a_ray_job_is_refused():
    assert of(judge(stack(ray_job("serve run --address auto pd.py:app"))), EFA) == []
    (found,) = of(judge(stack(ray_job("serve run /etc/serve/pd.yaml"))), EFA)
    assert "a serve config from a file" in found.message


def test_a_custom_serve_builder_is_refused_unless_listed():
    config = serve_config(kv_transfer())
    config["applications"][0]["import_path"] = "my_app.builders:pd_with_connector"
    (found,) = of(judge(stack(ray_service(config))), NIXL)
    assert "my_app.builders:pd_with_connector" in found.message and "knownServeBuilders" in found.message
    listed = {NIXL: {"knownServeBuilders": ["my_app.builders:pd_with_connector"]}}
    assert of(judge(stack(ray_service(config)), listed), NIXL) == []


# -- unknown at a first preview ------------------------------------------------------------------------
def test_a_serve_config_not_known_at_preview_is_refused():
    (found,) = of(judge(stack(ray_service(UNKNOWN))), NIXL)
    assert "not known at preview" in found.message


def test_a_provider_from_a_config_map_not_known_at_preview_is_refused():
    config_map = Res("kubernetes:core/v1:ConfigMap", "fabric", {"metadata": {"name": "fabric", "namespace": "llm"}})
    config_map.props["data"] = UNKNOWN
    container = engine(fi_provider=None)
    container["envFrom"] = [{"configMapRef": {"name": "fabric"}}]
    (found,) = of(judge(stack(workload(container=container), config_map)), EFA)
    assert "not known at preview" in found.message


# -- false refusals of realistic stacks ----------------------------------------------------------------
def test_supporting_resources_of_a_realistic_stack_are_inert():
    resources = [
        Res("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "weights-block", {"bucket": "b"}),
        Res("aws:s3/bucketVersioning:BucketVersioning", "weights-versions", {"bucket": "b"}),
        Res("aws:route53/record:Record", "api", {"name": "api", "type": "CNAME", "zoneId": "z"}),
        Res("random:index/randomString:RandomString", "suffix", {"length": 6}),
        Res("time:index/sleep:Sleep", "wait", {"createDuration": "30s"}),
    ]
    assert of(judge(resources), TYPE) == []


def test_an_nlb_of_the_load_balancer_controller_is_internal_by_default():
    def service(**spec: Any) -> Res:
        return Res(
            "kubernetes:core/v1:Service",
            "api",
            {"metadata": {"name": "api", "annotations": {}}, "spec": {"type": "LoadBalancer", **spec}},
        )

    assert of(judge([service(loadBalancerClass="service.k8s.aws/nlb")]), EXPOSED) == []
    assert of(judge([service()]), EXPOSED)  # the in-tree controller's default: internet-facing


def test_a_karpenter_pool_capped_at_zero_gpus_may_launch_none():
    def pool(limits: dict) -> Res:
        requirements = [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["p5"]}]
        spec = {"template": {"spec": {"requirements": requirements}}, "limits": limits}
        return Res("kubernetes:karpenter.sh/v1:NodePool", "cpu", {"spec": spec})

    assert of(judge([pool({"cpu": "1000", "nvidia.com/gpu": 0})]), REFS) == []
    assert of(judge([pool({"cpu": "1000"})]), REFS)


def test_a_config_group_of_large_crds_is_read():
    """Size alone is no reason to refuse text: only what aliases add is bounded."""
    properties = {f"field{i}": {"type": "string", "description": "x"} for i in range(40_000)}
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "rayclusters.ray.io"},
        "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"properties": properties}}}]},
    }
    group = Res("kubernetes:yaml/v2:ConfigGroup", "crds", {"yaml": [yaml.safe_dump(crd)]})
    assert of(judge([group]), DECODE) == []
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcde", "bcdef")
    )
    (found,) = of(judge([Res("kubernetes:yaml/v2:ConfigGroup", "bomb", {"yaml": [bomb]})]), DECODE)
    assert "aliases expand" in found.message


def test_the_project_gpu_stack_still_passes():
    assert mandatory(judge(stack(workload()))) == []
    assert mandatory(judge(gpu_stack())) == []


# -- plain-text secrets -----------------------------------------------------------------------------
SECRETS = "no-literal-secrets-in-pods"


def test_a_redis_password_given_as_a_literal_is_refused():
    def service(password: dict) -> Res:
        res = ray_service()
        res.props["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"] = {
            "redisAddress": "rediss://gcs:6379",
            "redisPassword": password,
        }
        return res

    by_reference = {"valueFrom": {"secretKeyRef": {"name": "gcs", "key": "password"}}}
    assert of(judge([service(by_reference)]), SECRETS) == []
    (found,) = of(judge([service({"value": "hunter22"})]), SECRETS)
    assert "redisPassword" in found.message and "hunter22" not in found.message


def test_passwords_in_helm_values_are_refused():
    values = {"grafana": {"admin": {"existingSecret": "grafana", "passwordKey": "admin-password"}}}
    release = Res(RELEASE, "prometheus", {"chart": "kube-prometheus-stack", "values": values})
    assert of(judge([release]), SECRETS) == []
    release.props["values"]["grafana"]["adminPassword"] = "prom-operator"
    (found,) = of(judge([release]), SECRETS)
    assert "grafana.adminPassword" in found.message


# -- pods selected by their node group ------------------------------------------------------------
def _group(instance_type: str, name: str, az: str = "us-west-2a") -> dict[str, Res]:
    """A compliant GPU node group whose resources are prefixed with `name` and whose EKS node group
    name is `name`."""
    group = copy.deepcopy(gpu_stack(instance_type, (az,)))
    for res in group.values():
        res.name = f"{name}-{res.name}"
    group["ng"].props["nodeGroupName"] = name
    return group


def _selected(name: str, gpus: int, efa: int, group: str, model: str = "Qwen/Qwen2.5-7B-Instruct") -> Res:
    container = engine(gpus=gpus, efa=efa)
    container["command"][2] = model
    res = workload(container=container, nodeSelector={"eks.amazonaws.com/nodegroup": group})
    res.name = name
    res.props["metadata"]["name"] = name
    return res


def test_a_pod_selected_by_its_node_group_is_judged_for_that_groups_type():
    groups = [*_group("p5.48xlarge", "p5").values(), *_group("g6e.48xlarge", "g6e").values()]
    assert of(judge([*groups, _selected("small", 8, 4, "g6e")]), EFA) == []  # g6e: 4 EFA for 8 GPUs
    (found,) = of(judge([*groups, _selected("small", 8, 4, "p5")]), EFA)  # p5 wants all 32
    assert "32" in found.message


def test_two_models_in_two_azs_each_selected_by_its_node_group_pass():
    groups = [*_group("p5.48xlarge", "a", "us-west-2a").values(), *_group("p5.48xlarge", "b", "us-west-2b").values()]
    models = [_selected("model-a", 8, 32, "a", "Qwen/Qwen3-8B"), _selected("model-b", 8, 32, "b", "meta/Llama-3-8B")]
    assert of(judge([*groups, *models]), "gpu-node-group-single-az") == []
    spread = workload()  # selects nothing: may land in either AZ
    assert of(judge([*groups, spread]), "gpu-node-group-single-az")


# -- AZ, placement, network ---------------------------------------------------------------------------
SINGLE_AZ, SG = "gpu-node-group-single-az", "efa-security-group"


def test_an_odcr_of_another_instance_type_is_refused():
    from integration.test_policies_capacity import with_reservation

    assert of(judge(with_reservation("us-west-2a")), "capacity-reservation-in-gpu-az") == []
    other = with_reservation("us-west-2a")
    other["cr"].props["instanceType"] = "p4d.24xlarge"
    (found,) = of(judge(other), "capacity-reservation-in-gpu-az")
    assert "p4d.24xlarge" in found.message and "p5.48xlarge" in found.message


def test_a_gpu_subnet_without_an_az_is_refused():
    stack = gpu_stack()
    assert of(judge(stack), SINGLE_AZ) == []
    del stack["subnet-us-west-2a"].props["availabilityZone"]
    (found,) = of(judge(stack), SINGLE_AZ)
    assert "name no availability zone" in found.message


def test_efa_ingress_from_a_prefix_list_is_refused():
    stack = gpu_stack()
    stack["sg"].props["ingress"].append({"protocol": "tcp", "fromPort": 22, "toPort": 22, "prefixListIds": ["pl-1"]})
    (found,) = of(judge(stack), SG)
    assert "prefix list" in found.message


def test_inline_ingress_drops_the_separate_self_rule():
    rule_type = "aws:ec2/securityGroupRule:SecurityGroupRule"

    def separate(inline_ingress: Any) -> dict[str, Res]:
        stack = gpu_stack()
        if inline_ingress is None:
            del stack["sg"].props["ingress"]
        else:
            stack["sg"].props["ingress"] = inline_ingress
        rule = Res(rule_type, "efa-self-in", {"type": "ingress", "protocol": "-1", "fromPort": 0, "toPort": 0})
        rule.props["self"] = True
        rule.deps["securityGroupId"] = [stack["sg"]]
        stack["rule"] = rule
        return stack

    assert of(judge(separate(None)), SG) == []
    (found,) = of(judge(separate([])), SG)
    assert "allows all traffic to and from itself" in found.message and "even []" in found.message


def test_prefill_and_decode_deployments_of_one_model_in_two_azs_are_refused():
    groups = [*_group("p5.48xlarge", "a", "us-west-2a").values(), *_group("p5.48xlarge", "b", "us-west-2b").values()]
    prefill, decode = _selected("prefill", 8, 32, "a"), _selected("decode", 8, 32, "b")
    (found,) = of(judge([*groups, prefill, decode]), SINGLE_AZ)
    assert "P/D workloads of model" in found.message
    together = _selected("decode", 8, 32, "a")
    assert of(judge([*groups, prefill, together]), SINGLE_AZ) == []


def test_a_ray_service_over_two_placement_groups_is_refused():
    groups = [*_group("p5.48xlarge", "a").values(), *_group("p5.48xlarge", "b").values()]
    service = ray_service()
    (found,) = of(judge([*groups, service]), SINGLE_AZ)
    assert "2 placement groups" in found.message
    selected = ray_service()
    pod = selected.props["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    pod["nodeSelector"] = {"eks.amazonaws.com/nodegroup": "a"}
    assert of(judge([*groups, selected]), SINGLE_AZ) == []


def test_a_dra_device_class_selecting_gpus_counts_whatever_its_name():
    from integration.test_policies_workloads import _claim_template, _dra_workload

    def device_class(driver: str) -> Res:
        selectors = [{"cel": {"expression": f"device.driver == '{driver}'"}}]
        return Res(
            "kubernetes:resource.k8s.io/v1:DeviceClass",
            "accel",
            {"metadata": {"name": "accel.example.com"}, "spec": {"selectors": selectors}},
        )

    claim = _claim_template(device_class="accel.example.com")
    assert of(judge(stack(_dra_workload(None), claim, device_class("fpga.example.com"))), EFA) == []
    (found,) = of(judge(stack(_dra_workload(None), claim, device_class("gpu.nvidia.com"))), EFA)
    assert "DRA" in found.message
    assert of(judge([device_class("gpu.nvidia.com")]), TYPE) == []  # judged, not an unknown type


def test_launch_template_interfaces_not_known_at_preview_are_refused():
    stack = gpu_stack(unknown_ids=True)
    assert of(judge(stack), "efa-on-gpu-nodes") == []  # unknown IDs inside a literal list: judged
    stack["lt"].props["networkInterfaces"] = UNKNOWN
    (found,) = of(judge(stack), "efa-on-gpu-nodes")
    assert "not known at preview" in found.message
