"""The fault battery, streams: every entry point (tool_battery.TOOLS) asked for its help with stdout
closed, full, or abandoned by its reader, and once as a user would, which must write nothing.

`--help` is the one run every tool can make here without a cloud, a GPU or a stack: it prints, so
it meets every stream fault, and it must never write a file (docs, data, stack files)."""

from __future__ import annotations

import pytest

from integration.tool_battery import TOOLS, broken_pipe, judged, run, tracked_state, wait_gone
from llm_pd_eks_tools.core.cli import Exit

MODULES = sorted(TOOLS)


@pytest.mark.parametrize("module", MODULES)
def test_help_prints_usage_and_writes_nothing(module):
    before = tracked_state()
    outcome = run(module, ["--help"])
    judged(outcome, Exit.OK)
    assert "usage" in outcome.stdout.lower(), outcome.stdout[:300]
    changed = {name for name, state in tracked_state().items() if before.get(name) != state}
    assert not changed, f"--help changed {sorted(changed)}"
    assert wait_gone(outcome.mark) == []


@pytest.mark.parametrize("module", MODULES)
def test_a_closed_stdout_is_74_and_one_line(module):
    outcome = run(module, ["--help"], redirect=">&-")
    judged(outcome, Exit.IOERR)
    assert "stdout" in outcome.stderr


@pytest.mark.parametrize("module", MODULES)
def test_a_full_stdout_is_74_and_one_line(module):
    outcome = run(module, ["--help"], redirect=">/dev/full")
    judged(outcome, Exit.IOERR)
    assert "stdout" in outcome.stderr


@pytest.mark.parametrize("module", MODULES)
def test_a_reader_that_left_is_141_and_silent(module):
    outcome = broken_pipe(module, ["--help"])
    judged(outcome, Exit.PIPE)
    assert outcome.stderr == ""
