"""Fixtures shared by every test module; plain helpers live in `helpers.py`."""

from __future__ import annotations

from typing import Callable, Iterator

import pytest
from helpers import STACKS

from llm_pd_eks_tools.preview.mockrun import ProgramRun, run_program


@pytest.fixture(scope="session")
def programs() -> Callable[[str], ProgramRun]:
    """stack -> its recorded registrations. Each stack runs once per session, on first use (a run
    takes seconds and is deterministic); tests must not change what they get back."""
    runs: dict[str, ProgramRun] = {}

    def get(stack: str) -> ProgramRun:
        if stack not in runs:
            runs[stack] = run_program(stack)
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
