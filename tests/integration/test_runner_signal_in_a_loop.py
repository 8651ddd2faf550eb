"""A termination signal ends a tool whatever it is running, an asyncio loop included. Its
exception lands in the code that runs when it comes; inside an asyncio task (the Pulumi runtime
under the preview's mocks runs the program as tasks) the task keeps it, and the loop used to wait
forever for what that task would have resolved: a SIGTERM a second into `make preview` hung it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap

from helpers import ROOT

from llm_pd_eks_tools.core.cli import Exit

# A task that swallows every exception (as a task does for the one the signal raises in it) and a
# main coroutine waiting on a future only that task would resolve.
TOOL = textwrap.dedent(
    """
    import asyncio, sys
    from llm_pd_eks_tools.core.cli import exit_with

    async def swallowing(done):
        while True:
            try:
                await asyncio.sleep(0)
                sum(range(300_000))  # most of the time here, so the signal lands in the task
            except BaseException:
                pass

    async def program():
        done = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(swallowing(done))
        print("running", file=sys.stderr, flush=True)
        await done
        task.cancel()
        return 0

    def main(argv):
        return asyncio.get_event_loop().run_until_complete(program())

    exit_with("looping", main)
    """
)


def test_sigterm_inside_a_task_that_swallows_it_ends_the_run_with_143(tmp_path):
    script = tmp_path / "looping.py"
    script.write_text(TOOL)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 120)
        assert ready and proc.stderr.readline().strip() == "running"
        os.kill(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("still running 60 s after SIGTERM: the loop waits for the task that kept it") from None
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == Exit.TERMINATED, err[-500:]
    assert "terminated (SIGTERM)" in err and "Traceback" not in err, err[-500:]
