"""The fault battery, inputs, servers and signals: every input file of every entry point given as a
FIFO, a directory and `/dev/zero`; every server it talks to trickling its headers, its body or its
chunks; SIGTERM while it runs. Each ends with a documented code, one line, in bounded time, and
leaves nothing running (tool_battery.py says how each is judged)."""

from __future__ import annotations

import os
import select
import shutil
import signal
import time
from pathlib import Path

import pytest
from helpers import ROOT, TricklingServer

from integration.tool_battery import BOUND_S, TOOLS, Tool, finish, judged, left_running, start, wait_gone
from llm_pd_eks_tools.core.cli import Exit

FAILURES = (Exit.FAILED, Exit.USAGE, Exit.UNVERIFIED, Exit.IOERR)  # never 0, never INTERNAL (a bug)
BAD_INPUTS = ("fifo", "directory", "dev-zero")


def bad_input(kind: str, where: Path) -> Path:
    if kind == "fifo":
        os.mkfifo(where)
    elif kind == "directory":
        where.mkdir()
    else:
        where.symlink_to("/dev/zero")
    return where


def rooted(tmp_path: Path, kind: str) -> Path:
    """A checkout of just the project file, with `Pulumi.battery.yaml` the bad input."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copy(ROOT / "Pulumi.dev.yaml", root / "Pulumi.dev.yaml")
    bad_input(kind, root / "Pulumi.battery.yaml")
    return root


def argv_for(template: tuple[str, ...], tmp_path: Path, kind: str = "fifo", url: str = "") -> list[str]:
    values = {"tmp": str(tmp_path), "url": url}
    if any("{root}" in part for part in template):
        values["root"] = str(rooted(tmp_path, kind))
    if any("{file}" in part for part in template):
        values["file"] = str(bad_input(kind, tmp_path / "input"))
    return [part.format(**values) for part in template]


INPUT_CASES = [
    pytest.param(module, index, kind, id=f"{module}-{index}-{kind}")
    for module, tool in sorted(TOOLS.items())
    for index in range(len(tool.inputs))
    for kind in BAD_INPUTS
]


@pytest.mark.parametrize("module, index, kind", INPUT_CASES)
def test_a_bad_input_file_is_one_line_and_a_documented_code(tmp_path, module, index, kind):
    argv = argv_for(TOOLS[module].inputs[index], tmp_path, kind)
    stacks = set(ROOT.glob("Pulumi.*.yaml"))
    proc, mark = start(module, argv, cwd=ROOT)
    outcome = finish(proc, mark)
    judged(outcome, *FAILURES)
    assert wait_gone(mark) == []
    assert set(ROOT.glob("Pulumi.*.yaml")) == stacks, "a stack file was left behind"


SERVER_CASES = [
    pytest.param(module, mode, id=f"{module}-{mode}")
    for module, tool in sorted(TOOLS.items())
    if tool.server
    for mode in ("headers", "body", "chunked")
]


@pytest.mark.parametrize("module, mode", SERVER_CASES)
def test_a_trickling_server_ends_in_the_deadline_with_its_password_unprinted(tmp_path, module, mode):
    server = TricklingServer(mode, userinfo="user:hunter2-secret")
    try:
        tool: Tool = TOOLS[module]
        assert tool.server is not None
        proc, mark = start(module, argv_for(tool.server, tmp_path, url=server.url), cwd=ROOT)
        outcome = finish(proc, mark, bound=90)  # each server tool is given a 4 s deadline
    finally:
        server.close()
    judged(outcome, *FAILURES, progress=True)
    assert "hunter2-secret" not in outcome.stderr + outcome.stdout
    assert wait_gone(mark) == []


SIGNAL_CASES = [pytest.param(module, id=module) for module, tool in sorted(TOOLS.items()) if tool.long_run]


@pytest.mark.parametrize("module", SIGNAL_CASES)
def test_sigterm_mid_run_is_143_and_leaves_nothing_running(tmp_path, module):
    tool = TOOLS[module]
    server = TricklingServer("headers")
    try:
        template = tool.long_run
        assert template is not None
        proc, mark = start(module, argv_for(template, tmp_path, url=server.url), cwd=ROOT)
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], BOUND_S)  # its first progress line: main is running
        assert ready, "the tool printed no progress line"
        first = proc.stderr.readline()
        time.sleep(1.0)  # well into its work (rendering, waiting on the server)
        assert proc.poll() is None, f"the tool ended before the signal: give it a longer run ({first!r})"
        os.kill(proc.pid, signal.SIGTERM)
        outcome = finish(proc, mark, bound=60)
        outcome.stderr = first + outcome.stderr
    finally:
        server.close()
    judged(outcome, Exit.TERMINATED, progress=True)
    assert wait_gone(mark) == []


def test_a_child_that_a_library_started_is_ended_with_the_tool(tmp_path):
    """botocore starts a `credential_process` itself (no `spawn` records it): SIGTERM ends it too."""
    script = tmp_path / "cred.sh"
    script.write_text("#!/bin/sh\nexec sleep 300\n")
    script.chmod(0o755)
    config = tmp_path / "config"
    config.write_text(f"[default]\ncredential_process = {script}\nregion = us-east-1\n")
    proc, mark = start(
        "llm_pd_eks_tools.ops.preflight",
        ["--stack", "dev", "--deadline", "120"],
        cwd=ROOT,
        extra_env={"AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": os.devnull},
    )
    end = time.monotonic() + BOUND_S
    while not any("sleep" in line for line in left_running(mark)):
        assert time.monotonic() < end and proc.poll() is None, "the credential process never started"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGTERM)
    outcome = finish(proc, mark, bound=60)
    judged(outcome, Exit.TERMINATED, progress=True)
    assert wait_gone(mark) == []
