"""The fault battery's control arm: each tool whose real work runs offline does it, under the same
runner (`exit_with`) and guards the faults are judged against, and succeeds. A guard that refuses
what a tool legitimately opens (the open hook once refused `tempfile.TemporaryFile`, which opens its
directory) fails here, not in a user's first run."""

from __future__ import annotations

import pytest

from integration.tool_battery import TOOLS, run

WORKING = [pytest.param(module, id=module) for module, tool in sorted(TOOLS.items()) if tool.works is not None]


def test_the_control_arm_covers_the_tools_that_start_a_server_or_write_files():
    assert {"llm_pd_eks_tools.maint.bench_policies", "llm_pd_eks_tools.plan.preview"} <= {p.values[0] for p in WORKING}


@pytest.mark.parametrize("module", WORKING)
def test_the_tools_real_work_succeeds_under_the_runner(tmp_path, module):
    argv = [part.format(tmp=tmp_path) for part in TOOLS[module].works or ()]
    outcome = run(module, argv)
    assert outcome.code == 0, outcome.stderr[-800:]
    assert "Traceback" not in outcome.stderr, outcome.stderr[-800:]
