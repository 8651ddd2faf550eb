"""Serve autoscaling judged by Ray Serve's own policy code (the installed Ray).

Each role's deployment options are what Ray Serve LLM gives Serve: the rendered `deployment_config`
merged over Ray Serve LLM's defaults (`maybe_apply_llm_deployment_config_defaults` with
core/server/builder.py `DEFAULT_DEPLOYMENT_OPTIONS`, as `build_llm_deployment` does). The policy is
the one Serve's controller runs: `_apply_autoscaling_config(replica_queue_length_autoscaling_policy)`
(ray/serve/_private/autoscaling_state.py), its decision clipped to [min, max] as
`DeploymentAutoscalingState.apply_bounds` does. Time is a fake clock handed to the policy module (its
delays compare `time.time()` stamps), so the walk is deterministic and instant.
Sized load: `maxReplicas x targetOngoingRequests` requests in flight, the load at which the sizing
model wants every replica.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import yaml
from helpers import RAY_SERVICE, STACKS

from llm_pd_eks.config.serving import ReplicaGroupConfig
from llm_pd_eks_sizing.size import MAX_ONGOING_HEADROOM, autoscaling_values

TICK_S = 1.0


pytestmark = pytest.mark.usefixtures("ray_standins")


def effective_options(llm: dict[str, Any]) -> dict[str, Any]:
    from ray.llm._internal.common.dict_utils import maybe_apply_llm_deployment_config_defaults
    from ray.llm._internal.serve.core.server.builder import DEFAULT_DEPLOYMENT_OPTIONS

    return maybe_apply_llm_deployment_config_defaults(DEFAULT_DEPLOYMENT_OPTIONS, llm["deployment_config"])


def roles(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from ray.llm._internal.serve.serving_patterns.prefill_decode.builder import PDServingArgs

    (app,) = yaml.safe_load(spec["serveConfigV2"])["applications"]
    PDServingArgs.model_validate(app["args"])  # Ray Serve LLM accepts the config as rendered
    return {"prefill": app["args"]["prefill_config"], "decode": app["args"]["decode_config"]}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


def walk(options: dict[str, Any], load: Callable[[float], float], seconds: float, monkeypatch) -> list[int]:
    """Replica counts, one per control-loop tick, under `load(t)` requests in flight; replicas start at once."""
    import ray.serve.autoscaling_policy as policy_module
    from ray.serve._private.common import DeploymentID
    from ray.serve.autoscaling_policy import _apply_autoscaling_config, replica_queue_length_autoscaling_policy
    from ray.serve.config import AutoscalingConfig, AutoscalingContext

    clock = Clock()
    monkeypatch.setattr(policy_module, "time", clock)
    config = AutoscalingConfig(**options["autoscaling_config"])
    policy = _apply_autoscaling_config(replica_queue_length_autoscaling_policy)
    replicas, state, counts = config.min_replicas, {}, []
    for tick in range(int(seconds / TICK_S)):
        clock.now += TICK_S
        ctx = AutoscalingContext(
            deployment_id=DeploymentID(name="LLMServer", app_name="llm"),
            deployment_name="LLMServer",
            app_name="llm",
            current_num_replicas=replicas,
            target_num_replicas=replicas,
            running_replicas=[],
            total_num_requests=load(tick * TICK_S),
            total_queued_requests=0.0,
            aggregated_metrics={},
            raw_metrics={},
            capacity_adjusted_min_replicas=config.min_replicas,
            capacity_adjusted_max_replicas=config.max_replicas,
            policy_state=state,
            last_scale_up_time=None,
            last_scale_down_time=None,
            current_time=clock.now,
            config=config,
            # what the controller passes without an async-inference queue monitor
            # (ray/serve/_private/autoscaling_state.py, Ray 2.58.0: initialised to 0)
            total_pending_async_requests=0,
        )
        decision, state = policy(ctx)
        replicas = max(config.min_replicas, min(config.max_replicas, math.ceil(decision)))  # apply_bounds
        counts.append(replicas)
    return counts


@pytest.mark.parametrize("stack", STACKS)
def test_sized_load_scales_each_role_to_max_and_idle_falls_back(stack, programs, monkeypatch):
    spec = programs(stack).one(RAY_SERVICE).inputs["spec"]
    for role, llm in roles(spec).items():
        options = effective_options(llm)
        auto = options["autoscaling_config"]
        lo, hi, target = auto["min_replicas"], auto["max_replicas"], auto["target_ongoing_requests"]
        assert options["max_ongoing_requests"] >= target  # finite back-pressure a replica can reach
        assert options["max_ongoing_requests"] < 10**6
        busy_s = auto["upscale_delay_s"] + 60
        idle_s = auto["downscale_delay_s"] + 60
        sized = hi * target

        def load(t: float, sized: float = sized, busy_s: float = busy_s) -> float:
            return sized if t < busy_s else 0.0

        counts = walk(options, load, busy_s + idle_s, monkeypatch)
        up = counts[: int(busy_s / TICK_S)]
        assert up[-1] == hi, f"{stack} {role}: {up[-1]} replicas under sized load, max {hi}"
        # not before the upscale delay (Serve waits it out), and back to min only after the downscale delay
        assert all(c == lo for c in up[: int(auto["upscale_delay_s"] / TICK_S) - 1])
        assert counts[-1] == lo
        assert all(c == hi for c in counts[len(up) : len(up) + int(auto["downscale_delay_s"] / TICK_S) - 1])


@pytest.mark.parametrize("stack", STACKS)
def test_without_a_target_ray_serve_llm_never_scales_up(stack, programs, monkeypatch):
    # Ray Serve LLM's own default target (1e9 ongoing requests per replica): the sized load never
    # moves the count off the minimum, which is why the program sets one per role.
    spec = programs(stack).one(RAY_SERVICE).inputs["spec"]
    for llm in roles(spec).values():
        config = dict(llm["deployment_config"])
        auto = {k: v for k, v in config["autoscaling_config"].items() if k != "target_ongoing_requests"}
        options = effective_options({"deployment_config": {**config, "autoscaling_config": auto}})
        assert options["autoscaling_config"]["target_ongoing_requests"] >= 10**9
        sized = auto["max_replicas"] * llm["deployment_config"]["autoscaling_config"]["target_ongoing_requests"]
        counts = walk(options, lambda t, sized=sized: sized, auto["upscale_delay_s"] + 120, monkeypatch)
        assert max(counts) == auto["min_replicas"]


def test_settings_from_a_per_replica_concurrency():
    """What `make size WRITE=1` writes: the target is the sized concurrency (whole requests, rounded
    up), the cap 20-50 % above it (Ray Serve's advanced-autoscaling guide), at least one more."""
    assert autoscaling_values(24.7) == {"targetOngoingRequests": 25, "maxOngoingRequests": 32}
    assert 1.2 <= MAX_ONGOING_HEADROOM <= 1.5
    assert autoscaling_values(0.4) == {"targetOngoingRequests": 1, "maxOngoingRequests": 2}
    assert autoscaling_values(None) == {"targetOngoingRequests": 1, "maxOngoingRequests": 2}


def test_delay_defaults_are_serves():
    from ray.serve.config import AutoscalingConfig

    defaults, ours = AutoscalingConfig(), ReplicaGroupConfig()
    assert (ours.upscale_delay_s, ours.downscale_delay_s) == (defaults.upscale_delay_s, defaults.downscale_delay_s)


def test_the_config_refuses_back_pressure_below_the_target():
    from helpers import config_problems

    from llm_pd_eks_tools.core.stack import stack_config

    base = stack_config("dev").model_dump(by_alias=True, exclude_none=True)
    values = {k: v for k, v in base.items() if k != "region"}
    values["serving"] = {
        **base["serving"],
        "decode": {**base["serving"]["decode"], "targetOngoingRequests": 40, "maxOngoingRequests": 8},
    }
    (problem,) = config_problems(values)
    assert "serving.decode" in problem and "maxOngoingRequests (8) is below targetOngoingRequests (40)" in problem
    assert "\n" not in problem
