"""Fixtures shared by every test module; plain helpers live in `helpers.py`."""

from __future__ import annotations

import copyreg
import io
import os
import pickle
from typing import Callable, Iterator

import pytest
from filelock import FileLock
from helpers import STACKS, ray_engine_standins, runtime_module_on_path

from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program

# The modules that take longest (measured with `--durations`), scheduled first: `make test` hands
# whole modules to its workers (`--dist loadfile`) in collection order, so the long ones start at
# once and the rest fills the other workers meanwhile (`--no-loadscope-reorder` keeps this order;
# xdist's default would put the modules with the most tests first). Order only: every module runs.
LONGEST_FIRST = ("test_ray_placement.py", "test_preview_diff.py", "test_verify.py", "test_preview.py")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers more than the cores this process may use. Much of the suite waits on
    servers it started (Prometheus scrapes and rule evaluation, Alertmanager, moto, a tool's
    subprocess starting up, a deadline running out), so the extra workers keep the cores busy meanwhile
    (with one extra, a 2-core run left a fifth of its CPU time idle)."""
    return len(os.sched_getaffinity(0)) + 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session", autouse=True)
def runtime_modules_as_mounted() -> Iterator[None]:
    """The runtime ConfigMap's modules importable by their pod names for the whole session, as every Ray
    container has them (the prefix router is on by default): Ray's own schemas import a deployment's
    `request_router_class` when they validate it."""
    with runtime_module_on_path():
        yield


def _dump(run: ProgramRun) -> bytes:
    """`run` pickled with the engine's unknown-value singleton kept a singleton (`is UNKNOWN` holds)."""
    from pulumi.output import UNKNOWN, Unknown

    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer)
    pickler.dispatch_table = {
        **copyreg.dispatch_table,
        Unknown: lambda value: "UNKNOWN" if value is UNKNOWN else (Unknown, ()),
    }
    pickler.dump(run)
    return buffer.getvalue()


@pytest.fixture(scope="session")
def programs(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Callable[[str], ProgramRun]:
    """stack -> its recorded registrations. Each stack runs once per session, on first use (a run
    takes seconds and is deterministic); tests must not change what they get back. Under
    `pytest -n` the workers share the run: the first to need a stack runs it and leaves it pickled in
    the session's own temporary folder (pytest-xdist's documented pattern: the base temp's parent,
    with a file lock); the others read it."""
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent
    runs: dict[str, ProgramRun] = {}

    def get(stack: str) -> ProgramRun:
        if stack not in runs:
            path = shared / f"program-run-{stack}.pickle"
            with FileLock(f"{path}.lock"):
                if path.is_file():
                    runs[stack] = pickle.loads(path.read_bytes())
                else:
                    runs[stack] = run_program(stack)
                    path.write_bytes(_dump(runs[stack]))
        return runs[stack]

    return get


@pytest.fixture(params=STACKS)
def run(request, programs) -> ProgramRun:
    """The recorded registrations of each stack in turn."""
    return programs(request.param)


@pytest.fixture(scope="session", autouse=True)
def _policy_pack_lifetime() -> Iterator[None]:
    """The one policy-pack process of the session (`policy_fixtures.pack()`) stops with the session."""
    yield
    import policy_fixtures

    policy_fixtures.close_pack()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `requires_binary(name)` fails, never skips, when `name` is not on PATH."""
    import shutil

    for mark in item.iter_markers("requires_binary"):
        (name,) = mark.args
        if shutil.which(name) is None:
            pytest.fail(
                f"{name} is not on PATH: `make test` installs it (scripts/test-binaries.sh: Debian packages "
                "prometheus and prometheus-alertmanager)",
                pytrace=False,
            )


@pytest.fixture(scope="module")
def ray_standins() -> Iterator[None]:
    """Ray Serve LLM's modules import a few vLLM names (helpers.ray_engine_standins): a module that
    builds Ray's LLM objects uses this (`pytestmark = pytest.mark.usefixtures("ray_standins")`)."""
    with ray_engine_standins():
        yield
