"""serving.routing: prefix-cache-aware routing per role and the decode-only path, judged by Ray 2.58's
own code (RequestRouterConfig, PrefixCacheAffinityRouter, the P/D builder, ServeDeploySchema) and the
KubeRay CRD, and the runtime module's decision logic run against Ray's own decode server class."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from helpers import ray_engine_standins, run_async

from llm_pd_eks import serve_routing
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import ServingConfig
from llm_pd_eks.ray_service import ray_service_spec
from llm_pd_eks_tools.preview.mockrun import stack_config

DATA = Path(__file__).resolve().parent / "data"
# Ray 2.58's LLMServer defines an async __del__; the servers built here without __init__ are dropped unawaited.
pytestmark = pytest.mark.filterwarnings("ignore:coroutine .LLMServer.__del__. was never awaited")
CRD = DATA / "kuberay" / "ray.io_rayservices.yaml"


@pytest.fixture(scope="module", autouse=True)
def standins() -> Iterator[None]:
    """Ray Serve LLM's modules import a few vLLM names (helpers.ray_engine_standins)."""
    with ray_engine_standins():
        yield


def serving(**routing: Any) -> tuple[ServingConfig, Any]:
    cfg = stack_config("dev")
    assert cfg.serving is not None
    data = cfg.serving.model_dump(by_alias=True)
    data["routing"] = {**data["routing"], **routing}
    return ServingConfig.model_validate(data), GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type]


def app(spec: dict[str, Any]) -> dict[str, Any]:
    (application,) = yaml.safe_load(spec["serveConfigV2"])["applications"]
    return application


def test_by_default_ray_serve_llms_own_builder_routes_both_roles_by_prefix_from_the_mounted_module() -> None:
    spec = ray_service_spec(*serving())
    application = app(spec)
    assert application["import_path"] == "ray.serve.llm:build_pd_openai_app"
    for role in ("prefill_config", "decode_config"):
        llm = application["args"][role]
        router = llm["deployment_config"]["request_router_config"]
        assert router["request_router_class"] == serve_routing.PREFIX_ROUTER_CLASS
        assert llm["engine_kwargs"]["enable_prefix_caching"] is True and "experimental_configs" not in llm
    pods = [spec["rayClusterConfig"]["headGroupSpec"], *spec["rayClusterConfig"]["workerGroupSpecs"]]
    assert all(serve_routing.RUNTIME_VOLUME in json.dumps(p) for p in pods)


def test_with_both_roles_off_the_app_is_ray_serve_llms_own_with_serves_default_routing() -> None:
    spec = ray_service_spec(*serving(prefixAware={"prefill": False, "decode": False}))
    application = app(spec)
    assert application["import_path"] == "ray.serve.llm:build_pd_openai_app"
    for role in ("prefill_config", "decode_config"):
        llm = application["args"][role]
        assert "request_router_config" not in llm["deployment_config"]
        assert "enable_prefix_caching" not in llm["engine_kwargs"] and "experimental_configs" not in llm
    pods = [spec["rayClusterConfig"]["headGroupSpec"], *spec["rayClusterConfig"]["workerGroupSpecs"]]
    assert not any(serve_routing.RUNTIME_VOLUME in json.dumps(p) for p in pods)


def test_prefix_aware_roles_name_ray_serve_llms_router_with_its_own_arguments() -> None:
    from helpers import runtime_module_on_path
    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import PrefixCacheAffinityRouter
    from ray.serve.config import RequestRouterConfig

    config, instance = serving(prefixAware={"prefill": True, "decode": False})
    args = app(ray_service_spec(config, instance))["args"]
    router = args["prefill_config"]["deployment_config"]["request_router_config"]
    with runtime_module_on_path():  # as the pods mount the runtime ConfigMap
        parsed = RequestRouterConfig(**router)  # Ray imports the class the path names
        assert issubclass(parsed.get_request_router_class(), PrefixCacheAffinityRouter)
    accepted = set(inspect.signature(PrefixCacheAffinityRouter.initialize_state).parameters) - {"self"}
    assert set(router["request_router_kwargs"]) <= accepted
    assert args["prefill_config"]["engine_kwargs"]["enable_prefix_caching"] is True
    assert "request_router_config" not in args["decode_config"]["deployment_config"]


def test_the_router_falls_back_to_load_balancing_at_the_roles_serve_target() -> None:
    config, instance = serving(prefixAware={"prefill": True, "decode": True})
    args = app(ray_service_spec(config, instance))["args"]
    for role in ("prefill", "decode"):
        kwargs = args[f"{role}_config"]["deployment_config"]["request_router_config"]["request_router_kwargs"]
        target = config.groups()[role].target_ongoing_requests
        assert kwargs["imbalanced_threshold"] == max(1, -(-target // 1))  # never Ray's infinite default
        assert kwargs["do_eviction"] is True  # the prefix tree stays bounded
    config, instance = serving(prefixAware={"prefill": True, "decode": False}, imbalancedThreshold=3)
    kwargs = app(ray_service_spec(config, instance))["args"]["prefill_config"]["deployment_config"]
    assert kwargs["request_router_config"]["request_router_kwargs"]["imbalanced_threshold"] == 3


def test_the_routed_app_validates_under_ray_serves_and_ray_serve_llms_schemas() -> None:
    from helpers import runtime_module_on_path
    from ray.llm._internal.serve.serving_patterns.prefill_decode.builder import PDServingArgs
    from ray.serve.schema import ServeDeploySchema

    config, instance = serving(prefixAware={"prefill": True, "decode": True}, decodeOnlyBelowTokens=256)
    application = app(ray_service_spec(config, instance))
    ServeDeploySchema.model_validate({"applications": [application]})
    with runtime_module_on_path():  # Ray imports the router class the deployment config names
        pd = PDServingArgs.model_validate(application["args"])
    assert pd.decode_config.experimental_configs[serve_routing.THRESHOLD_KEY] == 256
    assert pd.prefill_config.deployment_config["request_router_config"]["request_router_class"] == (
        serve_routing.PREFIX_ROUTER_CLASS
    )


def test_enable_prefix_caching_is_an_engine_argument_of_the_images_vllm() -> None:
    facts = json.loads((DATA / "vllm" / "engine-args-0.26.0.json").read_text())
    assert "enable_prefix_caching" in facts["engine_args_fields"]


def test_decode_only_imports_the_runtime_builder_and_mounts_it_on_every_ray_pod() -> None:
    config, instance = serving(decodeOnlyBelowTokens=512)
    spec = ray_service_spec(config, instance)
    assert app(spec)["import_path"] == serve_routing.CONDITIONAL_IMPORT_PATH
    cluster = spec["rayClusterConfig"]
    for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
        template = group["template"]
        volume = {"name": serve_routing.RUNTIME_VOLUME, "configMap": {"name": serve_routing.runtime_configmap_name()}}
        assert volume in template["spec"]["volumes"]
        for container in template["spec"]["containers"]:
            assert {"name": "PYTHONPATH", "value": serve_routing.RUNTIME_MOUNT} in container["env"]
            mount = {"name": serve_routing.RUNTIME_VOLUME, "mountPath": serve_routing.RUNTIME_MOUNT, "readOnly": True}
            assert mount in container["volumeMounts"]
        annotation = template["metadata"]["annotations"][serve_routing.RUNTIME_DIGEST_ANNOTATION]
        assert annotation == serve_routing.runtime_digest()
    # the file names in the ConfigMap are the module names the import path and the router path import
    assert sorted(serve_routing.runtime_configmap_data()) == sorted(
        [serve_routing.CONDITIONAL_IMPORT_PATH.split(":")[0] + ".py", serve_routing.PREFIX_ROUTER_MODULE + ".py"]
    )
    assert serve_routing.PREFIX_ROUTER_CLASS.rsplit(".", 1)[0] == serve_routing.PREFIX_ROUTER_MODULE


def test_prefix_aware_routing_alone_mounts_the_runtime_modules_and_keeps_rays_builder() -> None:
    config, instance = serving(prefixAware={"prefill": False, "decode": True})
    spec = ray_service_spec(config, instance)
    assert app(spec)["import_path"] == "ray.serve.llm:build_pd_openai_app"
    cluster = spec["rayClusterConfig"]
    for group in (cluster["headGroupSpec"], *cluster["workerGroupSpecs"]):
        template = group["template"]
        assert {
            "name": serve_routing.RUNTIME_VOLUME,
            "configMap": {"name": serve_routing.runtime_configmap_name()},
        } in (template["spec"]["volumes"])
        for container in template["spec"]["containers"]:
            assert {"name": "PYTHONPATH", "value": serve_routing.RUNTIME_MOUNT} in container["env"]


def test_the_projects_prefix_router_is_rays_with_serves_fifo_mixin_and_guarded_tree_calls() -> None:
    """Its replica hand-off is FIFOMixin's (a replica found with no request in hand goes to the oldest
    waiting request, as in Serve's default router); every routing decision stays Ray's, and what it
    adds only guards the tree: Ray's hooks, each wrapped, and the tree kept by the project's actor."""
    from helpers import runtime_module_on_path
    from ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router import PrefixCacheAffinityRouter
    from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
    from ray.serve._private.request_router.request_router import FIFOMixin
    from ray.serve.config import RequestRouterConfig

    with runtime_module_on_path():
        routed = RequestRouterConfig(request_router_class=serve_routing.PREFIX_ROUTER_CLASS)
        cls = routed.get_request_router_class()
        module = __import__(serve_routing.PREFIX_ROUTER_MODULE)
        from ray.serve.llm.request_router import PrefixCacheAffinityRouter as Public
    # the public names, where Ray exports them (the standins give Ray's KV-aware router its vLLM names)
    assert cls.__mro__[1:4] == (FIFOMixin, Public, PrefixCacheAffinityRouter)
    assert module.FIFOMixin is FIFOMixin
    assert FIFOMixin in PowerOfTwoChoicesRequestRouter.__mro__ and FIFOMixin not in PrefixCacheAffinityRouter.__mro__
    assert cls._fulfill_next_pending_request is FIFOMixin._fulfill_next_pending_request
    assert cls._prefix_match_best_replicas is PrefixCacheAffinityRouter._prefix_match_best_replicas
    hooks = {"initialize_state", "choose_replicas", "on_request_routed", "update_replicas", "on_replica_actor_died"}
    overridden = {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}
    assert overridden == hooks
    assert {name for name in vars(cls) if name.startswith("_") and not name.startswith("__")} <= {
        "_fetch_tree",
        "_mark_down",
        "_tree_usable",
        "_wait",
        "_check_incarnation",
        "_tree_call",
        "_abc_impl",
    }
    # the tree: restartable, on the head, needing no CPU
    options = module.TREE_ACTOR_OPTIONS
    assert options["max_restarts"] == -1 and options["num_cpus"] == 0
    assert set(options["resources"]) == {"node:__internal_head__"}


def test_the_decode_only_rayservice_validates_against_the_kuberay_crd() -> None:

    from helpers import rayservice_validator

    config, instance = serving(decodeOnlyBelowTokens=512)
    spec = json.loads(json.dumps(ray_service_spec(config, instance), default=str))
    manifest = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "x"}, "spec": spec}
    rayservice_validator().validate(manifest)


def test_a_threshold_at_the_context_length_is_refused() -> None:
    cfg = stack_config("dev")
    assert cfg.serving is not None
    data = cfg.serving.model_dump(by_alias=True)
    data["routing"]["decodeOnlyBelowTokens"] = data["maxModelLen"]
    with pytest.raises(ValueError, match="decodeOnlyBelowTokens"):
        ServingConfig.model_validate(data)


def test_the_preview_line_says_what_routes_where() -> None:
    config, _ = serving(prefixAware={"prefill": True, "decode": False}, decodeOnlyBelowTokens=256)
    line = serve_routing.preview_line(config)
    assert "prefill prefix-aware" in line and "decode power-of-two" in line and "under 256 tokens" in line
    assert "every request through prefill" in serve_routing.preview_line(serving()[0])
    assert line.count("with FIFO fallback") == 1  # the router the role gets, not Ray's class as is


def runtime() -> Any:
    import importlib

    return importlib.import_module("llm_pd_eks.runtime.conditional_pd")


def test_rays_pd_builder_binds_the_module_level_decode_class_the_runtime_swaps() -> None:
    from ray.llm._internal.serve.serving_patterns.prefill_decode import builder

    source = inspect.getsource(builder.build_pd_openai_app)
    assert "else PDDecodeServer" in source  # the name the swap replaces for the call
    module = runtime()
    seen = []
    original = builder.build_pd_openai_app
    try:
        builder.build_pd_openai_app = lambda args: seen.append(builder.PDDecodeServer) or "app"
        assert module.build_pd_openai_app({}) == "app"
    finally:
        builder.build_pd_openai_app = original
    assert seen == [module.ConditionalPDDecodeServer]
    assert builder.PDDecodeServer is module.PDDecodeServer  # restored after the build


class FakeEngine:
    def __init__(self, count: int | None = None, error: bool = False) -> None:
        self.count, self.error = count, error
        self.asked: list[Any] = []

    async def tokenize(self, request: Any) -> Any:
        self.asked.append(request)
        if self.error:
            raise RuntimeError("tokenizer unavailable")
        yield type("Reply", (), {"count": self.count})()


class FakeCounter:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def inc(self, tags: dict[str, str]) -> None:
        self.paths.append(tags["path"])


def server(below: int, engine: Any) -> Any:
    module = runtime()
    s = object.__new__(module.ConditionalPDDecodeServer)
    s._decode_only_below, s.engine, s._paths = below, engine, FakeCounter()
    return s


def completion(prompt: Any) -> Any:
    from ray.llm._internal.serve.core.configs.openai_api_models import CompletionRequest

    return CompletionRequest.model_construct(model="m", prompt=prompt)


def test_short_prompts_stay_on_decode_and_long_ones_go_through_prefill() -> None:
    module = runtime()
    short, long = server(256, FakeEngine(count=100)), server(256, FakeEngine(count=3000))
    assert run_async(short._decode_only(completion("hello")))
    assert not run_async(long._decode_only(completion("x " * 3000)))
    assert short._paths.paths == [module.DECODE_ONLY] and long._paths.paths == [module.DISAGGREGATED]
    assert isinstance(short.engine.asked[0], module.TokenizeCompletionRequest)  # the engine's own count


class FakeTokenizer:
    """One token a word; a chat template that frames each message."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [0] * (len(text.split()) + (1 if add_special_tokens else 0))

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool, tokenize: bool) -> str:
        assert add_generation_prompt and not tokenize
        return " ".join(f"<start> {m['role']} {m['content']} <end>" for m in messages) + " <start> assistant"


class FakeClient:
    def get_tokenizer(self) -> FakeTokenizer:  # vLLM 0.26's AsyncLLM.get_tokenizer is a plain method
        return FakeTokenizer()


def vllm_engine_source() -> str:
    """Ray 2.58's VLLMEngine source, read as text (importing it needs vLLM, which the tests do not install)."""
    import importlib.util

    (root,) = importlib.util.find_spec("ray").submodule_search_locations  # type: ignore[union-attr]
    return Path(root, "llm/_internal/serve/engines/vllm/vllm_engine.py").read_text()


class ReleasedEngine:
    """Ray 2.58's VLLMEngine beside vLLM 0.26, as far as the runtime module touches it: `tokenize` yields
    Ray's ErrorResponse (no `count`) because `_oai_serving_tokenization` is None, and the engine client
    hands out its tokenizer."""

    def __init__(self) -> None:
        self._engine_client = FakeClient()

    async def tokenize(self, request: Any) -> Any:
        # Ray's ErrorResponse (which needs vLLM to import): an `error`, no `count`
        yield type("ErrorResponse", (), {"error": "This model does not support the 'tokenization' task."})()


def test_rays_engine_reads_a_tokenization_state_name_vllm_026_does_not_set() -> None:
    """Every app-state name Ray 2.58's VLLMEngine reads (`getattr(state, "<name>", None)`, from its
    source) against every name vLLM 0.26 sets (`state.<name> = ...` under vllm/entrypoints/, from the
    release wheel: tests/data/vllm): the tokenization endpoint's is the one missing, which is why the
    runtime module counts with the engine client's tokenizer."""
    import ast

    from helpers import DATA

    from llm_pd_eks import versions

    source = vllm_engine_source()
    read = {
        node.args[1].value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "getattr"
        and len(node.args) == 3
        and getattr(node.args[0], "id", None) == "state"
        and isinstance(node.args[1], ast.Constant)
    }
    facts = json.loads((DATA / "vllm" / f"engine-args-{versions.DLC_VLLM_VERSION}.json").read_text())
    vllm_sets = set(facts["app_state_attributes"])
    assert {"openai_serving_chat", "openai_serving_completion", "openai_serving_models"} <= read & vllm_sets
    assert read - vllm_sets == {"openai_serving_tokenization"}
    assert "serving_tokenization" in vllm_sets  # vLLM 0.26's name for it
    assert "if error := self._validate_openai_serving_tokenization():\n            yield error" in source


def test_without_the_endpoint_the_engine_clients_tokenizer_counts_the_prompt() -> None:
    module = runtime()
    short, long = server(256, ReleasedEngine()), server(256, ReleasedEngine())
    assert run_async(short._prompt_tokens(completion("a b c"))) == 4  # three words and a special token
    assert run_async(short._decode_only(completion("hello world")))
    assert not run_async(long._decode_only(completion("x " * 300)))
    assert short._paths.paths == [module.DECODE_ONLY] and long._paths.paths == [module.DISAGGREGATED]


def test_a_chat_request_is_counted_with_its_template_applied() -> None:
    from ray.llm._internal.serve.core.configs.openai_api_models import ChatCompletionRequest

    request = ChatCompletionRequest.model_construct(model="m", messages=[{"role": "user", "content": "one two"}])
    # "<start> user one two <end> <start> assistant": the template's framing counted, no special token added
    assert run_async(server(256, ReleasedEngine())._prompt_tokens(request)) == 7


def test_token_id_prompts_are_counted_without_the_tokenizer() -> None:
    engine = FakeEngine(count=10_000)
    s = server(256, engine)
    assert run_async(s._decode_only(completion(list(range(100)))))
    assert engine.asked == []


def test_what_cannot_be_counted_goes_through_prefill() -> None:
    assert not run_async(server(256, FakeEngine(error=True))._decode_only(completion("hello")))
    assert not run_async(server(256, FakeEngine(count=10))._decode_only(completion(["a", "b"])))
    assert not run_async(server(0, FakeEngine(count=10))._decode_only(completion("hello")))  # feature off


def test_the_decode_only_path_is_the_plain_llm_server_and_the_rest_rays_pd_path(monkeypatch: Any) -> None:
    from ray.llm._internal.serve.core.server.llm_server import LLMServer

    module = runtime()
    calls: list[str] = []

    async def plain(self: Any, request: Any, raw: Any = None) -> str:
        calls.append("local")
        return "local"

    async def pd(self: Any, request: Any, raw: Any = None) -> str:
        calls.append("pd")
        return "pd"

    monkeypatch.setattr(LLMServer, "completions", plain)
    monkeypatch.setattr(module.PDDecodeServer, "completions", pd)
    assert run_async(server(256, FakeEngine(count=10)).completions(completion("hi"))) == "local"
    assert run_async(server(256, FakeEngine(count=9000)).completions(completion("hi"))) == "pd"
    assert calls == ["local", "pd"]


def test_the_path_metric_the_dashboard_reads_is_the_one_the_runtime_module_counts() -> None:
    import ast

    from llm_pd_eks import metrics

    tree = ast.parse(serve_routing.runtime_source())
    (counted,) = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PATH_METRIC"
    ]
    assert metrics.PD_PATH_REQUESTS == metrics.RAY_PREFIX + counted + "_total"  # Ray's prefix, a counter's suffix
    (threshold,) = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "THRESHOLD_KEY"
    ]
    assert threshold == serve_routing.THRESHOLD_KEY


def test_the_preview_report_carries_the_routing_line_it_prints() -> None:
    from llm_pd_eks_tools.preview.figures import _routing
    from llm_pd_eks_tools.preview.render import figure_lines
    from llm_pd_eks_tools.preview.report import Figures

    cfg = stack_config("dev")
    line = _routing(cfg)
    assert line == serve_routing.preview_line(cfg.serving)
    figures = Figures.model_validate(
        {
            "region": "us-west-2",
            "node_groups": [],
            "nat_gateways": 0,
            "eks_clusters": 0,
            "cost": {
                "region": "us-west-2",
                "lines": [],
                "hourly": 0,
                "monthly": 0,
                "missing": ["x"],
                "at_max_size_hourly": 0,
                "prices_as_of": "2026-12-01",
                "currency": "USD",
                "hours_per_month": 730,
            },
            "kv_transfer": {"status": "n/a", "reason": "none"},
            "routing": line,
        }
    )
    assert ("Request routing", line.removeprefix("routing: ")) in figure_lines(figures)
