"""What the program registers for serving, judged on the rendered stacks (mock runtime) and by Ray 2.58's
own schemas and builders:
- the runtime modules' ConfigMap is immutable and named by its content, and every Ray pod mounts it by
  that name;
- Serve has an end-to-end request timeout above the longest generation the stack admits, and the
  OpenAI ingress's own limit agrees;
- the OpenAI ingress runs at least two replicas with a sized autoscaling target (not Ray's 1e9);
- GPU workers drain their node before Ray stops (the hook's shell is run in test_ray_worker_stop.py);
- the endpoint Service's user-set fields are patched on the live Service (server-side apply);
- `serving.mode: aggregated` renders Ray Serve LLM's `build_openai_app` with no KV transfer, one worker
  group, and Serve's own build of it binds Ray's LLMServer behind the OpenAI ingress; the pack accepts it.
Placement of the aggregated group under Ray's scheduler: tests/integration/test_ray_placement.py.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterator

import pytest
import yaml
from helpers import RAY_SERVICE, ray_engine_standins, run_with, runtime_module_on_path, serve_build
from policy_fixtures import mandatory, pack

from llm_pd_eks import serve_limits, serve_routing
from llm_pd_eks.config.serving import AGGREGATED_ROLE
from llm_pd_eks.serve_app import AGGREGATED_IMPORT_PATH
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.analyzer import analyze_run
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SERVICE_PATCH = "kubernetes:core/v1:ServicePatch"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
RENDERED = ["staging", "prod"]

# Ray 2.58's LLMServer defines an async __del__; servers built here are dropped unawaited.
pytestmark = pytest.mark.filterwarnings("ignore:coroutine .LLMServer.__del__. was never awaited")


@pytest.fixture(scope="module", autouse=True)
def standins() -> Iterator[None]:
    with ray_engine_standins():
        yield


def spec_of(run: ProgramRun) -> dict[str, Any]:
    return run.one(RAY_SERVICE).inputs["spec"]


def serve_config(run: ProgramRun) -> dict[str, Any]:
    return yaml.safe_load(spec_of(run)["serveConfigV2"])


def ray_pods(spec: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = spec["rayClusterConfig"]
    return [g["template"] for g in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"])]


# --- runtime code that upgrades cleanly ------------------------------------------------------------


@pytest.mark.parametrize("stack", RENDERED)
def test_the_runtime_configmap_is_immutable_named_by_its_content_and_mounted_by_that_name(stack, programs):
    run = programs(stack)
    (config_map,) = [r for r in run.of_type(CONFIG_MAP) if r.name.endswith("-runtime")]
    data = config_map.inputs["data"]
    assert config_map.inputs["immutable"] is True
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    name = config_map.inputs["metadata"]["name"]
    assert name == f"{serve_routing.RUNTIME_CONFIGMAP_PREFIX}-{digest}"
    assert sorted(data) == sorted(f"{module}.py" for module in serve_routing.RUNTIME_SOURCES)
    for pod in ray_pods(spec_of(run)):
        volume = {"name": serve_routing.RUNTIME_VOLUME, "configMap": {"name": name}}
        assert volume in pod["spec"]["volumes"]


def test_a_changed_module_is_a_new_configmap_name() -> None:
    before = serve_routing.runtime_configmap_name()
    data = serve_routing.runtime_configmap_data()
    changed = {**data, next(iter(data)): data[next(iter(data))] + "\n# changed\n"}
    digest = hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:16]
    assert f"{serve_routing.RUNTIME_CONFIGMAP_PREFIX}-{digest}" != before


# --- serve hardened --------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", RENDERED)
def test_serve_has_a_request_timeout_above_the_longest_generation(stack, programs):
    from ray.serve.schema import ServeDeploySchema

    run = programs(stack)
    config = serve_config(run)
    schema = ServeDeploySchema.model_validate(config)
    serving = stack_config(stack).serving
    assert serving is not None
    timeout = schema.http_options.request_timeout_s
    assert timeout is not None and timeout > serve_limits.longest_generation_s(serving)
    assert timeout > serving.max_model_len * serve_limits.TOKEN_BOUND_S
    # Ray Serve LLM's ingress limit (600 s by default) raised to the same value through its runtime env
    (app,) = config["applications"]
    env = app["args"]["ingress_deployment_config"]["ray_actor_options"]["runtime_env"]["env_vars"]
    assert float(env[serve_limits.ROUTER_TIMEOUT_ENV]) == timeout


def built_ingress(app: dict[str, Any]) -> Any:
    """The OpenAI ingress deployment as Ray Serve's own build makes it (Ray's defaults merged with the
    rendered `ingress_deployment_config`, the config round-tripped as the controller receives it)."""
    built = serve_build(app)
    (ingress,) = [d for d in built.deployments if d.name == built.ingress_deployment_name]
    return ingress


@pytest.mark.parametrize("stack", RENDERED)
def test_the_openai_ingress_runs_two_replicas_with_a_sized_target(stack, programs):
    from ray.llm._internal.serve.constants import DEFAULT_MAX_TARGET_ONGOING_REQUESTS

    (app,) = serve_config(programs(stack))["applications"]
    config = built_ingress(app)._deployment_config
    auto = config.autoscaling_config
    assert auto.min_replicas >= 2 and auto.max_replicas >= auto.min_replicas
    assert auto.target_ongoing_requests < DEFAULT_MAX_TARGET_ONGOING_REQUESTS  # Ray's 1e9 would never scale
    serving = stack_config(stack).serving
    assert serving is not None
    decode = serving.decode
    # the minimum at its target carries the decode side at its scale target; one replica its most
    assert auto.target_ongoing_requests * auto.min_replicas >= decode.max_replicas * decode.target_ongoing_requests
    assert config.max_ongoing_requests >= decode.max_replicas * decode.max_ongoing_requests


@pytest.mark.parametrize("stack", RENDERED)
def test_gpu_workers_drain_before_ray_stops_within_the_pod_grace(stack, programs):
    for group in spec_of(programs(stack))["rayClusterConfig"]["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        script = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][2]
        assert script.index("ray drain-node") < script.index("ray stop")
        assert f"--deadline-remaining-seconds {serve_limits.DRAIN_DEADLINE_S}" in script
        assert pod["terminationGracePeriodSeconds"] >= serve_limits.DRAIN_DEADLINE_S + 2 * serve_limits.RAY_STOP_GRACE_S


# --- endpoint changes without an outage ------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_endpoint_fields_are_patched_on_the_service_kuberay_made(stack, programs):
    run = programs(stack)
    (patch,) = run.of_type(SERVICE_PATCH)
    service = spec_of(run)["serveService"]
    assert patch.inputs["metadata"]["name"] == service["metadata"]["name"]
    annotations = patch.inputs["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if not k.startswith("pulumi.com/")} == service["metadata"][
        "annotations"
    ]
    assert annotations["pulumi.com/patchForce"] == "true"
    assert patch.inputs["spec"]["type"] == service["spec"]["type"]
    assert patch.inputs["spec"].get("loadBalancerSourceRanges") == service["spec"].get("loadBalancerSourceRanges")
    assert run.one(RAY_SERVICE).urn in patch.dependencies  # the Service exists once the RayService is Ready


# --- aggregated serving ----------------------------------------------------------------------------


def aggregated_run(stack: str) -> ProgramRun:
    serving = stack_config(stack).serving
    assert serving is not None
    decode = serving.decode.model_dump(by_alias=True)
    return run_with(stack, serving={"mode": "aggregated", "aggregated": decode})


@pytest.fixture(scope="module", params=RENDERED)
def aggregated(request) -> tuple[str, ProgramRun]:
    return request.param, aggregated_run(request.param)


def test_aggregated_renders_build_openai_app_accepted_by_rays_schemas(aggregated):
    from ray.llm._internal.serve.core.ingress.builder import LLMServingArgs
    from ray.serve.schema import ServeDeploySchema

    _, run = aggregated
    config = serve_config(run)
    ServeDeploySchema.model_validate(config)
    (app,) = config["applications"]
    assert app["import_path"] == AGGREGATED_IMPORT_PATH
    with runtime_module_on_path():  # the router class the deployment config names
        (llm,) = LLMServingArgs.model_validate(app["args"]).llm_configs
    assert "kv_transfer_config" not in llm.engine_kwargs
    assert llm.placement_group_config["bundle_per_worker"][f"{AGGREGATED_ROLE}_slot"] == 1


def test_aggregated_builds_rays_llm_server_behind_the_openai_ingress(aggregated):
    from ray.llm._internal.serve.core.ingress.ingress import OpenAiIngress
    from ray.llm._internal.serve.core.server.llm_server import LLMServer

    _, run = aggregated
    (app,) = serve_config(run)["applications"]
    built = serve_build(app)
    classes = [d.func_or_class for d in built.deployments]
    assert sum(1 for c in classes if issubclass(c, LLMServer)) == 1
    assert issubclass(built_ingress(app).func_or_class, OpenAiIngress)
    assert built_ingress(app)._deployment_config.autoscaling_config.min_replicas >= 2


def test_aggregated_has_one_worker_group_its_budget_and_no_role_anti_affinity(aggregated):
    _, run = aggregated
    groups = spec_of(run)["rayClusterConfig"]["workerGroupSpecs"]
    assert [g["groupName"] for g in groups] == [AGGREGATED_ROLE]
    assert "affinity" not in groups[0]["template"]["spec"]
    budgets = [r.inputs["metadata"]["name"] for r in run.of_type(PDB)]
    assert any(name.endswith(f"-{AGGREGATED_ROLE}") for name in budgets)
    assert not any(name.endswith(("-prefill", "-decode")) for name in budgets)


def test_the_pack_accepts_an_aggregated_stack(aggregated):
    _, run = aggregated
    verdicts = analyze_run(run, server=pack())
    assert mandatory(verdicts) == [], "\n".join(v.message for v in mandatory(verdicts))


PROMETHEUS_RULE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"


def alert_rules_of(run: ProgramRun) -> dict[str, dict[str, Any]]:
    (rule,) = run.of_type(PROMETHEUS_RULE)
    return {r["alert"]: r for group in rule.inputs["spec"]["groups"] for r in group["rules"] if "alert" in r}


def test_aggregated_alerts_expect_its_one_phase_and_carry_no_kv_transfer_alerts(aggregated):
    from llm_pd_eks.alerts import KV_PATH_ALERTS

    _, run = aggregated
    rules = alert_rules_of(run)
    assert not set(KV_PATH_ALERTS) & set(rules)
    missing = rules["ServingTargetsMissing"]["expr"]
    assert f'phase="{AGGREGATED_ROLE}"' in missing and 'phase="decode"' not in missing
    assert "TTFTBudgetBurn" in rules  # the latency SLOs are judged per phase whatever the mode


@pytest.mark.parametrize("stack", RENDERED)
def test_disaggregated_alerts_keep_the_kv_transfer_alerts_and_both_phases(stack, programs):
    from llm_pd_eks.alerts import KV_PATH_ALERTS

    rules = alert_rules_of(programs(stack))
    assert set(KV_PATH_ALERTS) <= set(rules)
    missing = rules["ServingTargetsMissing"]["expr"]
    assert 'phase="prefill"' in missing and 'phase="decode"' in missing


def dashboard_of(run: ProgramRun) -> dict[str, Any]:
    (board,) = [r for r in run.of_type(CONFIG_MAP) if r.name.endswith("-dashboard") or "dashboard" in r.name]
    (text,) = board.inputs["data"].values()
    return json.loads(text)


def test_aggregated_dashboard_has_no_kv_path_panels(aggregated):
    from llm_pd_eks.dashboards import KV_PATH_PANELS

    _, run = aggregated
    titles = {p["title"] for p in dashboard_of(run)["panels"]}
    assert not titles & set(KV_PATH_PANELS) and "Time to first token by phase" in titles
    assert dashboard_of(run)["title"] == "LLM aggregated serving"


@pytest.mark.parametrize("stack", RENDERED)
def test_disaggregated_dashboard_keeps_the_kv_path_panels(stack, programs):
    from llm_pd_eks.dashboards import KV_PATH_PANELS

    titles = {p["title"] for p in dashboard_of(programs(stack))["panels"]}
    assert set(KV_PATH_PANELS) <= titles


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_the_prefix_tree_cap_is_one_replicas_kv_cache_in_characters(stack):
    from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
    from llm_pd_eks.config.serving import GPU_MEMORY_BUDGET
    from llm_pd_eks.models import MODELS

    config = stack_config(stack)
    serving, instance = config.serving, GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type]
    assert serving is not None
    for role, group in serving.groups().items():
        kwargs = serve_routing.request_router_config(serving, role, instance)["request_router_kwargs"]
        model = MODELS[serving.model_id]
        budget = group.tensor_parallel_size * instance.gpu_memory_gib * 2**30 * GPU_MEMORY_BUDGET
        tokens = (budget - model.weight_bytes(2)) / model.kv_bytes_per_token(serving.kv_cache_dtype_bytes)
        assert kwargs["eviction_threshold_chars"] == pytest.approx(serve_routing.CHARS_PER_TOKEN * tokens, abs=8)
        assert kwargs["eviction_threshold_chars"] > 400_000  # above Ray's default on every stack
        assert kwargs["eviction_target_chars"] < kwargs["eviction_threshold_chars"] and kwargs["do_eviction"] is True


def test_serving_mode_is_strict_and_aggregated_refuses_a_decode_only_threshold() -> None:
    from pydantic import ValidationError

    from llm_pd_eks.config import ServingConfig

    serving = stack_config("dev").serving
    assert serving is not None and serving.mode == "disaggregated"  # the default
    data = serving.model_dump(by_alias=True)
    with pytest.raises(ValidationError, match="mode"):
        ServingConfig.model_validate({**data, "mode": "colocated"})
    with pytest.raises(ValidationError, match="decodeOnlyBelowTokens is set but mode is aggregated"):
        ServingConfig.model_validate({**data, "mode": "aggregated", "routing": {"decodeOnlyBelowTokens": 256}})
    aggregated = ServingConfig.model_validate({**data, "mode": "aggregated"})
    assert list(aggregated.groups()) == [AGGREGATED_ROLE]
