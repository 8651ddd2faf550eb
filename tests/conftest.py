"""Shared fixtures: the program run under mocks once per stack, reused by every test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.mockrun import ProgramRun, run_program, stacks  # noqa: E402

STACKS = stacks(ROOT)
SHARED = ROOT.parent / "shared"

_runs: dict[str, ProgramRun] = {}


def program_run(stack: str) -> ProgramRun:
    """The recorded registrations of `stack` (run once per session; runs are deterministic)."""
    if stack not in _runs:
        _runs[stack] = run_program(stack)
    return _runs[stack]


@pytest.fixture(params=STACKS)
def run(request) -> ProgramRun:
    return program_run(request.param)
