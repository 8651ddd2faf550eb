"""The fault battery, outputs: every tool that rewrites a file of the checkout, run in a copy of it,
with that file a symlink (the target is replaced, the link stays a link) and with the disk full (a
file-size limit: the tool says so in one line with code 74 and the file is left whole).

Root ignores permission bits, and the suite runs as root on CI, so a read-only file is not a fault
this machine can stage; the full disk is the write failure every tool meets the same way."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import copy_checkout

from integration.tool_battery import BOUND_S, Outcome, environment, judged
from llm_pd_eks_tools.core.cli import Exit

# module, its arguments, the file it rewrites (relative to the checkout), a change that makes it stale
WRITERS = {
    "config-doc": ("llm_pd_eks_tools.maint.config_doc", [], "docs/configuration.md"),
    "cutover-examples": ("llm_pd_eks_tools.plan.cutover_examples", ["--write"], "docs/day-two.md"),
    "realrun-doc": ("llm_pd_eks_sizing.realrun.doc", [], "docs/real-run.md"),
    "size --write": (
        "llm_pd_eks_sizing.size",
        ["--stack", "dev", "--workload", "workloads/dev.yaml", "--write"],
        "Pulumi.dev.yaml",
    ),
}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    return copy_checkout(tmp_path_factory.mktemp("battery") / "checkout")


def run_in(root: Path, module: str, argv: list[str], file_size_limit: int | None = None) -> Outcome:
    def limits() -> None:  # in the child, before exec: a full disk is EFBIG once the file passes the limit
        if file_size_limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    env = environment("outputs") | {"PYTHONPATH": str(root)}
    proc = subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        preexec_fn=limits,
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr, "outputs")


def stale(path: Path) -> str:
    """Make the file stale (so the tool must rewrite it), keeping the rest of it; returns the new text."""
    text = path.read_text()
    if path.suffix == ".md":
        text = text.replace("|", "| ", 1)  # one cell's spacing: any generated table block differs now
    else:
        text = text.replace("maxReplicas: 4}", "maxReplicas: 3}", 1)  # a sized bound size --write puts back
    path.write_text(text)
    return text


@pytest.mark.parametrize("name", WRITERS)
def test_a_symlinked_output_is_followed_and_stays_a_link(checkout, tmp_path, name):
    module, argv, relative = WRITERS[name]
    linked = checkout / relative
    target = tmp_path / linked.name
    target.write_text(linked.read_text())
    original = linked.read_text()
    linked.unlink()
    linked.symlink_to(target)
    try:
        stale(target)
        outcome = run_in(checkout, module, argv)
        judged(outcome, Exit.OK)
        assert linked.is_symlink() and os.readlink(linked) == str(target)
        assert target.read_text().strip(), "the target was emptied"
    finally:
        linked.unlink()
        linked.write_text(original)


@pytest.mark.parametrize("name", WRITERS)
def test_a_full_disk_is_74_one_line_and_the_file_left_whole(checkout, name):
    module, argv, relative = WRITERS[name]
    path = checkout / relative
    original = path.read_text()
    try:
        before = stale(path)
        outcome = run_in(checkout, module, argv, file_size_limit=512)
        judged(outcome, Exit.IOERR, Exit.USAGE)
        assert "cannot write" in outcome.stderr and relative.split("/")[-1] in outcome.stderr, outcome.stderr
        assert path.read_text() == before, "the file was changed or cut short"
        assert not [p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")], "temp left"
    finally:
        path.write_text(original)
