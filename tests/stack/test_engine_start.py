"""Ray Serve LLM's engine start timeout: the workers get at least Ray Serve LLM's own default.

The default is read from the installed Ray's source (python/ray/llm/_internal/serve/constants.py),
not from the code under test; the rendered value is the one Ray reads back from the environment.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest
from helpers import RAY_SERVICE, run_with

from llm_pd_eks.engine_start import planned_engine_start_s
from llm_pd_eks.models import MODELS, ModelSpec
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.core.stackfile import PROJECT
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun
from stack.test_serving_config import problems, validate

CONSTANTS = "ray.llm._internal.serve.constants"


def ray_default() -> tuple[str, int]:
    """(env name, default seconds) of `ENGINE_START_TIMEOUT_S = int(os.getenv(NAME, DEFAULT))` in Ray's source."""
    spec = importlib.util.find_spec(CONSTANTS)
    assert spec is not None and spec.origin
    tree = ast.parse(Path(spec.origin).read_text())
    (node,) = [
        n
        for n in tree.body
        if isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["ENGINE_START_TIMEOUT_S"]
    ]
    call = node.value
    assert isinstance(call, ast.Call) and ast.unparse(call.func) == "int"
    (getenv,) = call.args
    assert isinstance(getenv, ast.Call) and ast.unparse(getenv.func) == "os.getenv"
    name, default = getenv.args
    value = eval(compile(ast.Expression(default), "constants.py", "eval"), {"__builtins__": {"str": str}})
    return ast.literal_eval(name), int(value)


def worker_envs(run: ProgramRun) -> list[dict[str, str]]:
    groups = run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return [
        {e["name"]: e.get("value") for e in c["env"]} for g in groups for c in g["template"]["spec"]["containers"][:1]
    ]


def test_ray_serve_llm_default_is_an_hour():
    # The figure the config's message and docs/serving.md quote, as the installed Ray writes it.
    assert ray_default()[1] == 3600


def test_the_workers_never_get_less_than_ray_serve_llm_s_default(run: ProgramRun):
    name, default = ray_default()
    values = {int(env[name]) for env in worker_envs(run)}
    assert len(values) == 1 and min(values) >= default
    model_id = stack_config(run.stack).serving.model_id
    assert min(values) >= planned_engine_start_s(model_id)


def test_the_rendered_value_is_what_ray_serve_llm_reads(run: ProgramRun, monkeypatch):
    # Ray Serve LLM reads the budget from the environment when its constants module loads.
    constants = importlib.import_module(CONSTANTS)
    name, _ = ray_default()
    (value,) = {env[name] for env in worker_envs(run)}
    monkeypatch.setenv(name, value)
    try:
        assert importlib.reload(constants).ENGINE_START_TIMEOUT_S == int(value)
    finally:
        monkeypatch.undo()
        importlib.reload(constants)


def test_a_model_planned_to_start_slower_than_the_default_gets_its_plan(monkeypatch):
    from llm_pd_eks.engine_start import engine_start_timeout_problem, engine_start_timeout_s

    _, default = ray_default()
    monkeypatch.setitem(MODELS, "huge/model", ModelSpec("huge/model", 1000.0, 120, 8, 128, 2000.0))
    assert planned_engine_start_s("huge/model") > default
    assert engine_start_timeout_s("huge/model") == planned_engine_start_s("huge/model")
    problem = engine_start_timeout_problem("huge/model", planned_engine_start_s("huge/model") - 1)
    assert problem and "planned to take" in problem
    # every model the project knows starts inside the default: the default is what they get
    for model_id in MODELS:
        assert engine_start_timeout_s(model_id) == max(default, planned_engine_start_s(model_id))


def test_a_configured_timeout_below_ray_serve_llm_s_default_is_refused():
    _, default = ray_default()
    (problem,) = problems({"serving": {"engineStartTimeoutS": default - 1}})
    assert problem.startswith(f"{PROJECT}:serving: ") and f"below Ray Serve LLM's own default of {default} s" in problem
    assert "\n" not in problem


def test_a_configured_timeout_above_the_default_reaches_the_workers():
    _, default = ray_default()
    assert validate({"serving": {"engineStartTimeoutS": default + 600}}).serving.engine_start_timeout_s == default + 600
    run = run_with("dev", serving={"engineStartTimeoutS": default + 600})
    name, _ = ray_default()
    assert {env[name] for env in worker_envs(run)} == {str(default + 600)}


@pytest.mark.parametrize("model_id", sorted(MODELS))
def test_the_shortest_accepted_timeout_is_the_longer_of_default_and_plan(model_id):
    from llm_pd_eks.engine_start import engine_start_timeout_problem

    floor = max(ray_default()[1], planned_engine_start_s(model_id))
    assert engine_start_timeout_problem(model_id, floor) is None
    assert engine_start_timeout_problem(model_id, floor - 1)
