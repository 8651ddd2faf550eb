"""Closed, full and abandoned output streams, and signals, end every tool with its documented code
(docs/exit-codes.md) and no traceback: through `python -m llm_pd_eks_tools...` as a shell runs it.

stdout closed (`>&-`) or full (`>/dev/full`): 74 and one line on stderr. The reader gone (`| head`,
here a pipe whose read end is closed before the tool starts, so every write meets EPIPE): 141, the
code a shell reports for SIGPIPE, and nothing on stderr. stderr closed (`2>&-`): the code the run
has anyway. Ctrl-C: 130; SIGTERM: 143, the policy pack's process ended first.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, copy_checkout

from integration.test_tool_deadlines import HANGING_PACK, gone
from llm_pd_eks_tools.core.cli import Exit

POINT = [
    "--point",
    "--model",
    "Qwen/Qwen2.5-7B-Instruct",
    "--instance",
    "p4d.24xlarge",
    "--tp",
    "1",
    "--input",
    "100",
    "--output",
    "10",
    "--concurrency",
    "1",
]
# (what runs, the code it exits with when its output can be written)
COMMANDS = {
    "llm-pd-eks --help": (["llm_pd_eks_tools", "--help"], Exit.OK),
    "llm-pd-eks size --point": (["llm_pd_eks_tools", "size", *POINT], Exit.OK),
    "size --help": (["llm_pd_eks_sizing.size", "--help"], Exit.OK),
    "promote-check": (["llm_pd_eks_tools.gates.promote_check", "--from", "staging", "--to", "prod"], Exit.OK),
    "preview --help": (["llm_pd_eks_tools.plan.preview", "--help"], Exit.OK),
    "verify --help": (["llm_pd_eks_tools.ops.verify", "--help"], Exit.OK),
    "cost-audit --help": (["llm_pd_eks_sizing.cost_audit", "--help"], Exit.OK),
}


def tool(argv: list[str], stdout, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, stdout=stdout, stderr=stderr, text=True, timeout=300)


def shell(redirect: str, argv: list[str]) -> subprocess.CompletedProcess:
    """The tool as bash starts it with `redirect` (`>&-`: descriptor 1 closed; `2>&-`: descriptor 2)."""
    return subprocess.run(
        ["bash", "-c", f'exec "$0" -m "$@" {redirect}', sys.executable, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("name", COMMANDS)
def test_a_closed_stdout_is_74_and_one_line(name):
    argv, _ = COMMANDS[name]
    proc = shell(">&-", argv)
    assert proc.returncode == Exit.IOERR, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith(
        ": cannot write the output to stdout (stdout is closed)\n"
    ), proc.stderr


@pytest.mark.parametrize("name", COMMANDS)
def test_a_full_stdout_is_74_and_one_line(name):
    argv, _ = COMMANDS[name]
    with open("/dev/full", "w") as full:
        proc = tool(argv, stdout=full)
    assert proc.returncode == Exit.IOERR, proc.stderr
    assert proc.stderr.count("\n") == 1 and "(No space left on device)" in proc.stderr, proc.stderr


@pytest.mark.parametrize("name", COMMANDS)
def test_a_reader_that_left_is_141_and_silent(name):
    argv, _ = COMMANDS[name]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = tool(argv, stdout=write_end)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (Exit.PIPE, "")


@pytest.mark.parametrize("name", COMMANDS)
def test_a_closed_stderr_keeps_the_code(name):
    argv, code = COMMANDS[name]
    proc = shell("2>&-", argv)
    assert proc.returncode == code and proc.stdout


def test_a_usage_error_with_stderr_closed_is_still_2():
    proc = shell("2>&-", ["llm_pd_eks_sizing.size", "--stack", "dev"])
    assert (proc.returncode, proc.stdout) == (Exit.USAGE, "")


# -- the program under the mock runtime, and signals ------------------------------------------------


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return copy_checkout(tmp_path_factory.mktemp("streams") / "repo")


def with_program_prefix(root: Path, line: str) -> None:
    original = (ROOT / "__main__.py").read_text()
    (root / "__main__.py").write_text(line + "\n" + original)


def preview(root: Path, out: Path, **popen) -> subprocess.Popen:
    argv = ["-m", "llm_pd_eks_tools.plan.preview", "--stack", "dev", "--root", str(root), "--out", str(out), "--quiet"]
    return subprocess.Popen(
        [sys.executable, *argv, *popen.pop("extra", [])],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def test_a_program_calling_sys_exit_is_a_program_failure(checkout, tmp_path):
    with_program_prefix(checkout, "import sys; sys.exit(1)")
    proc = preview(checkout, tmp_path / "out")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == Exit.PROGRAM
    assert err == "preview: the program failed: it called sys.exit(1)\n"


def wait_for(path: Path) -> None:
    for _ in range(3000):  # bounded: the program or the pack writes it within seconds
        if path.exists() and path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def test_ctrl_c_during_the_program_is_130(checkout, tmp_path):
    started = tmp_path / "started"
    with_program_prefix(checkout, f"import time; open({str(started)!r}, 'w').write('1'); time.sleep(600)")
    proc = preview(checkout, tmp_path / "out")
    wait_for(started)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (Exit.INTERRUPTED, "preview: interrupted\n")


def test_sigterm_ends_the_preview_with_143_and_its_policy_pack(checkout, tmp_path):
    (checkout / "__main__.py").write_text((ROOT / "__main__.py").read_text())
    shutil.rmtree(checkout / "policies")
    (checkout / "policies").mkdir()
    shutil.copy(ROOT / "policies" / "PulumiPolicy.yaml", checkout / "policies" / "PulumiPolicy.yaml")
    (checkout / "policies" / "__main__.py").write_text(HANGING_PACK)
    pid_file = tmp_path / "pack.pid"
    proc = preview(checkout, tmp_path / "out", env={**os.environ, "PACK_PID": str(pid_file)})
    wait_for(pid_file)  # the pack is inside a policy that never returns
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (Exit.TERMINATED, "preview: terminated (SIGTERM)\n")
    assert gone(int(pid_file.read_text()))
