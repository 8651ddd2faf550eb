"""Every entry point is in the fault battery: a tool added without a row fails here, so it cannot
escape the battery (tests/integration/tool_battery.py) by being new."""

from __future__ import annotations

from integration.tool_battery import TOOLS, console_commands, entry_points


def test_every_entry_point_found_in_the_repository_has_a_row_in_the_battery():
    found = entry_points()
    missing = {module: where for module, where in found.items() if module not in TOOLS}
    assert not missing, f"entry points the battery does not run: {missing}"


def test_the_battery_has_no_row_for_a_tool_that_is_gone():
    stale = sorted(set(TOOLS) - set(entry_points()))
    assert not stale, f"battery rows whose module no longer runs as a tool: {stale}"


def test_every_console_command_runs_a_module_in_the_battery():
    commands = console_commands()
    assert "preview" in commands and "size" in commands
    assert {name: module for name, module in commands.items() if module not in TOOLS} == {}


def test_the_finder_sees_make_targets_and_modules_with_a_main():
    found = entry_points()
    assert found["llm_pd_eks_sizing.size"]  # a module with `if __name__ == "__main__"`
    assert found["llm_pd_eks_tools.ops.verify"]  # a package with __main__.py
    assert any(where == "Makefile" or module == "llm_pd_eks_tools.plan.preview" for module, where in found.items())
