"""The fault battery's table of entry points and the harness that runs one probe.

Every entry point a user can start — the console script's commands, every module with a `main` that
`python -m` runs, every make target that runs a tool — is a row of TOOLS, found by `entry_points()`
from the repository itself (pyproject's scripts, the packages' sources, the Makefile), so a new tool
that is not in the table fails `test_entry_points.py`. A row says which arguments take an input
file, an output file or a server, so the battery can give each the fault it must survive.

Each probe asserts the runner's contract (llm_pd_eks_tools/core/cli.py): a documented exit code, at
most one line on stderr, no traceback, bounded time, nothing left running, nothing damaged.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from helpers import ROOT

from llm_pd_eks_tools.core.cli import Exit

PACKAGES = ("llm_pd_eks_tools", "llm_pd_eks_sizing")
DOCUMENTED = {int(code) for code in Exit}
BOUND_S = 180  # no probe's tool may take longer, however loaded the machine (each normally takes seconds)
MARK = "LLM_PD_EKS_BATTERY_MARK"  # every process a probe starts carries it: found again in /proc


@dataclass(frozen=True)
class Tool:
    """How the battery drives one entry point. Templates use `{file}` (an input path the probe chooses),
    `{root}` (a checkout whose `Pulumi.battery.yaml` the probe chooses), `{url}` (a server the probe runs)."""

    module: str
    inputs: tuple[tuple[str, ...], ...] = ()
    server: Optional[tuple[str, ...]] = None
    long_run: Optional[tuple[str, ...]] = None  # runs for seconds: SIGTERM lands mid-run
    works: Optional[tuple[str, ...]] = None  # its real work, offline: must succeed under the runner's guards
    gpu_machine: bool = False  # runs on the GPU machine (torch there): help and streams only here
    notes: str = field(default="", compare=False)


ROOTED = ("--root", "{root}", "--stack", "battery")
TOOLS: dict[str, Tool] = {
    tool.module: tool
    for tool in (
        Tool("llm_pd_eks_tools", inputs=(("size", "--stack", "dev", "--workload", "{file}"),)),
        Tool(
            "llm_pd_eks_tools.plan.preview",
            inputs=(ROOTED, ("--stack", "dev", "--policy-config", "{file}")),
            long_run=("--stack", "dev", "--out", "{tmp}/preview"),
            works=("--stack", "dev", "--out", "{tmp}/preview"),
        ),
        Tool("llm_pd_eks_tools.plan.preview.diff", inputs=(("--base", "HEAD", *ROOTED),)),
        Tool("llm_pd_eks_tools.plan.preview.bench"),
        Tool("llm_pd_eks_tools.plan.up_budget", works=()),
        Tool("llm_pd_eks_tools.plan.cutover_examples", works=()),
        Tool("llm_pd_eks_tools.ops.preflight"),
        Tool(
            "llm_pd_eks_tools.ops.resolve_image",
            inputs=(ROOTED,),
            server=("--stack", "dev", "--registry-url", "{url}", "--timeout", "4", "--root", "{root}"),
        ),
        Tool("llm_pd_eks_tools.ops.verify", inputs=(("--stack", "dev", "--kubeconfig", "{file}", "--timeout", "20"),)),
        Tool("llm_pd_eks_tools.gates.deploy_gate", inputs=(("runner", "--stack", "dev", "--github-output", "{file}"),)),
        Tool("llm_pd_eks_tools.ops.alert_delivery"),
        Tool("llm_pd_eks_tools.ops.destroy_check"),
        Tool("llm_pd_eks_tools.gates.pending_deletes"),
        Tool("llm_pd_eks_tools.plan.cutover_replicas", inputs=(("--stack", "dev", "--kubeconfig", "{file}"),)),
        Tool("llm_pd_eks_tools.ops.review_stack", inputs=(("--pr", "7", "--github-output", "{file}"),)),
        Tool(
            "llm_pd_eks_tools.gates.promote_check",
            inputs=(("--from", "battery", "--to", "dev", "--root", "{root}"),),
            works=("--from", "staging", "--to", "prod"),
        ),
        Tool("llm_pd_eks_tools.gates.placeholders", inputs=(("--stack", "dev", "--github-output", "{file}"),)),
        Tool("llm_pd_eks_tools.maint.config_doc", works=("--check",)),
        Tool("llm_pd_eks_tools.maint.exit_codes_doc", works=("--check",)),
        Tool("llm_pd_eks_tools.maint.gen_vllm_facts", inputs=(("--wheel", "{file}", "--out", "{tmp}/facts"),)),
        Tool("llm_pd_eks_tools.maint.gen_ray_resources"),
        Tool("llm_pd_eks_tools.maint.gen_eks_children", inputs=(("--pulumi-eks", "{file}"),)),
        Tool("llm_pd_eks_tools.maint.gen_resource_types"),
        Tool("llm_pd_eks_tools.maint.gen_instance_types"),
        Tool("llm_pd_eks_tools.maint.bench_policies", works=("--resources", "40")),
        Tool(
            "llm_pd_eks_sizing.size",
            inputs=(("--stack", "dev", "--workload", "{file}"),),
            works=("--stack", "dev", "--workload", "workloads/dev.yaml"),
        ),
        Tool(
            "llm_pd_eks_sizing.calibrate",
            inputs=(("--stack", "dev", "--workload", "{file}"), ("--stack", "dev", "--nixlbench-output", "{file}")),
            server=("--stack", "dev", "--endpoint", "{url}", "--timeout", "4"),
            long_run=("--stack", "dev", "--endpoint", "{url}", "--timeout", "60"),
        ),
        Tool("llm_pd_eks_sizing.calibrate.cli", inputs=(("--stack", "dev", "--workload", "{file}"),)),
        Tool("llm_pd_eks_sizing.calibrate.gpu_fit", inputs=(("{file}",),)),
        Tool("llm_pd_eks_sizing.calibrate.gpu_calibration", gpu_machine=True),
        Tool("llm_pd_eks_sizing.calibrate.gpu_probe", gpu_machine=True),
        Tool(
            "llm_pd_eks_sizing.cost_audit",
            inputs=(("--stack", "dev", "--workload", "{file}", "--out", "{tmp}/audit"),),
        ),
        Tool("llm_pd_eks_sizing.realrun.gpu_main", gpu_machine=True),
        Tool("llm_pd_eks_sizing.realrun.dry_run"),
        Tool("llm_pd_eks_sizing.realrun.render", works=("--out", "{tmp}/realrun")),
        Tool("llm_pd_eks_sizing.realrun.doc", works=("--check",)),
        Tool("llm_pd_eks_sizing.realrun.router_run"),
        Tool("llm_pd_eks_sizing.realrun.gpu_two", gpu_machine=True),
        Tool("llm_pd_eks_sizing.realrun.two_gpu"),
        Tool("llm_pd_eks_sizing.realrun.two_gpu_check", inputs=(("{file}",),)),
        Tool("llm_pd_eks_sizing.realrun.two_gpu_dry"),
    )
}


# -- finding the entry points --------------------------------------------------------------------
def entry_points() -> dict[str, str]:
    """Every runnable entry point found in the repository -> where it was found."""
    found: dict[str, str] = {}
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("scripts", {})
    for name, target in scripts.items():
        found.setdefault(target.split(":")[0].removesuffix(".__main__"), f"console script {name}")
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if path.name == "__main__.py":
                found.setdefault(module.removesuffix(".__main__"), f"{path.relative_to(ROOT)}")
            elif _runs_as_main(path):
                found.setdefault(module, f"{path.relative_to(ROOT)}")
    for module in re.findall(r"\$\(PY\) -m ((?:llm_pd_eks\w*)(?:\.\w+)*)", (ROOT / "Makefile").read_text()):
        found.setdefault(module, "Makefile")
    return found


def console_commands() -> dict[str, str]:
    """`llm-pd-eks <command>` -> the module it runs (the console script's own table)."""
    from llm_pd_eks_tools.__main__ import COMMANDS

    return {name: module for name, (module, _about) in COMMANDS.items()}


def _runs_as_main(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test):
            return True
    return False


# -- running one probe ---------------------------------------------------------------------------
@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    mark: str

    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def environment(mark: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBECONFIG", "PULUMI_"))}
    env.update(
        {
            MARK: mark,
            "PYTHONPATH": str(ROOT),
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    return env


def start(
    module: str, argv: list[str], *, redirect: str = "", cwd: Path = ROOT, extra_env: Optional[dict[str, str]] = None
) -> tuple[subprocess.Popen, str]:
    """The tool as a shell starts it (`redirect`: `>&-`, `>/dev/full`, ...), in a session of its own."""
    mark = uuid.uuid4().hex
    proc = subprocess.Popen(
        ["bash", "-c", f'exec "$0" -m "$@" {redirect}', sys.executable, module, *argv],
        cwd=cwd,
        env=environment(mark) | (extra_env or {}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return proc, mark


def finish(proc: subprocess.Popen, mark: str, bound: float = BOUND_S) -> Outcome:
    try:
        out, err = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"still running after {bound:.0f} s (no deadline bounds it)") from None
    return Outcome(proc.returncode, out or "", err or "", mark)


def run(module: str, argv: list[str], **kwargs) -> Outcome:
    proc, mark = start(module, argv, **kwargs)
    return finish(proc, mark)


def broken_pipe(module: str, argv: list[str]) -> Outcome:
    """stdout a pipe whose reader has already gone: every write meets EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    mark = uuid.uuid4().hex
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *argv],
            cwd=ROOT,
            env=environment(mark),
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    finally:
        os.close(write_end)
    return finish(proc, mark)


def left_running(mark: str) -> list[str]:
    """Processes still carrying a probe's mark (its tool's children and theirs)."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if f"{MARK}={mark}".encode() in environ and stat[stat.rfind(")") + 2 :][:1] != "Z":
            alive.append(f"{entry}: {Path(f'/proc/{entry}/cmdline').read_bytes()[:120]!r}")
    return alive


def wait_gone(mark: str, within: float = 15.0) -> list[str]:
    """What still runs `within` seconds after the tool exited (children are given time to end)."""
    end = time.monotonic() + within
    while True:
        alive = left_running(mark)
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.2)


def judged(outcome: Outcome, *codes: int, progress: bool = False) -> None:
    """The runner's contract for a failure: one of `codes` (documented), one line, no traceback.

    With `progress`, a tool that had started its work may have printed its progress lines
    (`[tool] ...`) first: its last line is then the one that says how it ended."""
    assert outcome.code in DOCUMENTED, f"undocumented exit code {outcome.code}: {outcome.stderr[-500:]}"
    assert outcome.code in codes, f"exit {outcome.code}, expected {codes}: {outcome.stderr[-500:]}"
    assert "Traceback" not in outcome.stderr and "Traceback" not in outcome.stdout, outcome.stderr[-800:]
    lines = outcome.error_lines()
    if progress:
        lines = [line for line in lines if not line.startswith("[")]
    assert len(lines) <= 1, outcome.stderr[-800:]


def tracked_state() -> dict[str, tuple[int, int]]:
    """(mtime, size) of every tracked file: what `--help` must leave as it was."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    state = {}
    for name in listed.decode().split("\0"):
        if name:
            try:
                info = (ROOT / name).stat()
            except OSError:
                continue
            state[name] = (info.st_mtime_ns, info.st_size)
    return state
