"""Ray Serve's own build of the application the program renders (tests/helpers.py `serve_build`):
the import path and args of serveConfigV2 go through the steps the Serve controller's build task
takes (Ray 2.58.0), in this process. What the build binds is what the cluster would run: the decode
class (Ray's, or the runtime module's subclass for conditional disaggregation) and each role's
request router with the arguments the stack configures."""

from __future__ import annotations

import inspect
import json
from typing import Any

import pytest
import yaml
from helpers import DATA, STANDINS, ray_engine_standins, serve_build

from llm_pd_eks import serve_routing
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import ServingConfig
from llm_pd_eks.ray_service import ray_service_spec
from llm_pd_eks_tools.core.stack import stack_config

# Ray 2.58's LLMServer defines an async __del__; classes Serve's build only inspects are dropped unawaited.
pytestmark = pytest.mark.filterwarnings("ignore:coroutine .LLMServer.__del__. was never awaited")


def application(stack: str = "dev", **routing: Any) -> tuple[dict[str, Any], ServingConfig]:
    """The stack's rendered serveConfigV2 application, `serving.routing` keys changed."""
    cfg = stack_config(stack)
    assert cfg.serving is not None
    data = cfg.serving.model_dump(by_alias=True)
    data["routing"] = {**data["routing"], **routing}
    serving = ServingConfig.model_validate(data)
    spec = ray_service_spec(serving, GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type], region=cfg.region)
    (app,) = yaml.safe_load(spec["serveConfigV2"])["applications"]
    return app, serving


def by_role(built: Any) -> dict[str, Any]:
    """prefill / decode / ingress -> the built Serve deployment (names as Ray's P/D builder gives them)."""
    out = {}
    for deployment in built.deployments:
        prefix = deployment.name.split(":")[0]
        out[{"Prefill": "prefill", "Decode": "decode"}.get(prefix, "ingress")] = deployment
    assert set(out) == {"prefill", "decode", "ingress"}
    assert built.ingress_deployment_name == out["ingress"].name
    return out


def router(deployment: Any) -> Any:
    return deployment._deployment_config.request_router_config


def test_the_build_runs_without_starting_ray() -> None:
    import ray

    serve_build(application()[0])
    assert not ray.is_initialized()


def test_the_default_app_binds_rays_own_pd_classes_and_the_projects_prefix_router() -> None:
    deployments = by_role(serve_build(application()[0]))
    with ray_engine_standins():  # the modules Serve's build imported, imported here in any test order
        from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import (
            PrefixCacheAffinityRouter,
        )
        from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import PDDecodeServer, PDPrefillServer
        from ray.serve._private.request_router.request_router import FIFOMixin
    assert deployments["decode"].func_or_class is PDDecodeServer
    assert deployments["prefill"].func_or_class is PDPrefillServer
    for role in ("prefill", "decode"):
        found = router(deployments[role]).get_request_router_class()
        assert (found.__module__, found.__name__) == tuple(serve_routing.PREFIX_ROUTER_CLASS.rsplit(".", 1))
        assert issubclass(found, PrefixCacheAffinityRouter) and found.__mro__[1] is FIFOMixin


def test_with_prefix_routing_off_the_app_routes_by_serves_default_router() -> None:
    from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter

    off = {"prefixAware": {"prefill": False, "decode": False}}
    for deployment in by_role(serve_build(application(**off)[0])).values():
        assert router(deployment).get_request_router_class() is PowerOfTwoChoicesRequestRouter


def test_conditional_disaggregation_swaps_only_the_decode_class_for_the_runtime_modules() -> None:
    from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import PDDecodeServer, PDPrefillServer

    app, _ = application(decodeOnlyBelowTokens=256)
    assert app["import_path"] == serve_routing.CONDITIONAL_IMPORT_PATH
    deployments = by_role(serve_build(app))
    decode = deployments["decode"].func_or_class
    # imported from the file the ConfigMap mounts, under the name the import path gives
    assert (decode.__module__, decode.__name__) == (serve_routing.RUNTIME_MODULE, "ConditionalPDDecodeServer")
    assert decode.__mro__[1] is PDDecodeServer
    assert deployments["prefill"].func_or_class is PDPrefillServer
    bound = deployments["decode"]._replica_config.init_kwargs
    assert bound["llm_config"].experimental_configs[serve_routing.THRESHOLD_KEY] == 256
    assert set(bound) == {"llm_config", "prefill_server"}  # the decode server still holds its prefill handle


@pytest.mark.parametrize("roles", [(True, False), (False, True), (True, True)])
def test_each_prefix_aware_role_gets_ray_serve_llms_router_with_the_configured_kwargs(roles: tuple) -> None:
    from helpers import runtime_module_on_path
    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import PrefixCacheAffinityRouter
    from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter

    prefill, decode = roles
    app, serving = application(prefixAware={"prefill": prefill, "decode": decode}, imbalancedThreshold=None)
    deployments = by_role(serve_build(app))
    accepted = inspect.signature(PrefixCacheAffinityRouter.initialize_state)
    for role, on in (("prefill", prefill), ("decode", decode)):
        config = router(deployments[role])
        engine = deployments[role]._replica_config.init_kwargs["llm_config"].engine_kwargs
        if not on:
            assert config.get_request_router_class() is PowerOfTwoChoicesRequestRouter, role
            assert "enable_prefix_caching" not in engine
            continue
        with runtime_module_on_path():  # the class travels by reference: a pod imports it from the ConfigMap
            cls = config.get_request_router_class()
        assert issubclass(cls, PrefixCacheAffinityRouter) and cls.__module__ == serve_routing.PREFIX_ROUTER_MODULE
        configured = serve_routing.request_router_config(
            serving, role, GPU_INSTANCE_TYPES[stack_config("dev").gpu_nodes.instance_type]
        )
        assert configured is not None
        assert config.request_router_kwargs == configured["request_router_kwargs"], role
        accepted.bind(None, **config.request_router_kwargs)  # every kwarg is one initialize_state takes
        assert config.request_router_kwargs["imbalanced_threshold"] == serve_routing.imbalanced_threshold(
            serving, serving.groups()[role]
        )
        assert engine["enable_prefix_caching"] is True, role
    assert router(deployments["ingress"]).get_request_router_class() is PowerOfTwoChoicesRequestRouter


def test_an_explicit_imbalanced_threshold_reaches_both_routers() -> None:
    app, _ = application(prefixAware={"prefill": True, "decode": True}, imbalancedThreshold=3, matchRateThreshold=0.3)
    deployments = by_role(serve_build(app))
    for role in ("prefill", "decode"):
        kwargs = router(deployments[role]).request_router_kwargs
        assert (kwargs["imbalanced_threshold"], kwargs["match_rate_threshold"]) == (3, 0.3)


def test_routing_and_decode_only_together_build_on_every_stack() -> None:
    for stack in ("dev", "staging", "prod"):
        app, _ = application(stack, prefixAware={"prefill": True, "decode": True}, decodeOnlyBelowTokens=128)
        deployments = by_role(serve_build(app))
        assert deployments["decode"].func_or_class.__name__ == "ConditionalPDDecodeServer", stack
        assert router(deployments["decode"]).request_router_class == serve_routing.PREFIX_ROUTER_CLASS, stack


def test_a_router_class_ray_cannot_import_fails_the_build() -> None:
    """The helper judges: the build refuses what the controller's build task would refuse."""
    app, _ = application(prefixAware={"prefill": True, "decode": False})
    config = app["args"]["prefill_config"]["deployment_config"]["request_router_config"]
    config["request_router_class"] = "ray.serve.llm.request_router.NoSuchRouter"
    with pytest.raises(Exception, match="NoSuchRouter"):
        serve_build(app)


def test_the_engine_arguments_the_standins_declare_are_vllms() -> None:
    import ast

    facts = set(json.loads((DATA / "vllm" / "engine-args-0.26.0.json").read_text())["engine_args_fields"])
    tree = ast.parse((STANDINS / "vllm" / "engine" / "arg_utils.py").read_text())
    declared = {n.target.id for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert declared and declared <= facts, declared - facts
