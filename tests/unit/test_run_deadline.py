"""A tool's run deadline is its run's alone: a process (a test session) that runs preflight and then
another tool in-process gives the second its whole time, not what was left of preflight's."""

from __future__ import annotations

import pytest

from llm_pd_eks_tools.core.cli import Exit, ToolError
from llm_pd_eks_tools.core.process_safety import time_left
from llm_pd_eks_tools.ops import preflight


def refuse(stack: str) -> None:
    raise ToolError(Exit.USAGE, f"no such stack {stack}")


def test_preflight_leaves_no_deadline_behind(monkeypatch):
    monkeypatch.setattr(preflight, "load_config", refuse)
    with pytest.raises(ToolError, match="no such stack"):
        preflight.main(["--stack", "nowhere", "--deadline", "1"], clients=(None, None, None))
    assert time_left(300.0) == 300.0
