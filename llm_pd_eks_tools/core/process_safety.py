"""The tool's own process: child process groups, the run's deadline, its streams and signals.

- `spawn` / `run_process` / `end_children`: children start in a process group of their own, so a
  timeout, Ctrl-C or SIGTERM ends the child and everything it started; none outlives the tool.
- `set_run_deadline` / `time_left`: one deadline for a whole run (preflight --deadline), which every
  child process's timeout is cut to.
- `guard_streams`, `install_signal_handlers`, `silence_stdout`: a closed or full stdout is an
  `OutputError` (exit 74, or 141 when the reader left), a closed stderr is not an error of its own,
  SIGTERM/SIGHUP unwind like Ctrl-C (`llm_pd_eks_tools/core/cli.py` `run` maps them to 128 + the signal).
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import threading
import time
from typing import Any, Optional, Sequence

from llm_pd_eks_tools.core import secrets

# -- child processes ------------------------------------------------------------------------------
_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()
END_GRACE_S = 5.0  # SIGTERM, then this long before SIGKILL


def spawn(command: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen` in a process group of its own, remembered until `end_process` or exit."""
    proc = subprocess.Popen(list(command), start_new_session=True, **kwargs)
    with _children_lock:
        _children.add(proc)
    return proc


def end_process(proc: subprocess.Popen, grace: float = END_GRACE_S) -> None:
    """End `proc`'s whole process group: SIGTERM, then SIGKILL after `grace` seconds; reap `proc`."""
    with _children_lock:
        _children.discard(proc)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # the leader has gone; whatever it started in its group goes too
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def forget(proc: subprocess.Popen) -> None:
    """`proc` ended by itself: no longer ours to end (its group may still hold its children)."""
    with _children_lock:
        _children.discard(proc)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def running_children() -> frozenset[subprocess.Popen]:
    """The child processes started so far and not yet ended (to end only those a run starts after it)."""
    with _children_lock:
        return frozenset(_children)


def end_children(keep: frozenset[subprocess.Popen] = frozenset()) -> None:
    """End every child process group still running (on exit, Ctrl-C, SIGTERM), except those in `keep`
    (started before the run, by the code that called it: a test's shared policy pack)."""
    with _children_lock:
        procs = [proc for proc in _children if proc not in keep]
    for proc in procs:
        end_process(proc, grace=1.0)


def descendants() -> frozenset[int]:
    """Every living process descended from this one, whoever started it (a library's child: botocore's
    `credential_process`, a program's helper), read from /proc; empty where there is no /proc."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return frozenset()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat_line = handle.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ")".
        fields = stat_line[stat_line.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[0] != b"Z":
            parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found |= frontier
    return frozenset(found)


def end_descendants(keep: frozenset[int] = frozenset(), grace: float = 1.0) -> None:
    """End every descendant process not in `keep` (those running before a run began): SIGTERM, then
    SIGKILL after `grace` seconds. Catches the children no `spawn` recorded."""
    targets = descendants() - keep
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in targets:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        end = time.monotonic() + grace
        while sig == signal.SIGTERM and time.monotonic() < end:
            targets = descendants() & targets
            if not targets:
                return
            time.sleep(0.05)
    for pid in targets:  # reap our own direct children so none is left a zombie
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


# The whole run's deadline (monotonic time), where a tool has one (preflight --deadline): every child
# process gets at most what is left of it.
_run_end: Optional[float] = None


def set_run_deadline(seconds: Optional[float]) -> None:
    global _run_end
    _run_end = None if seconds is None else time.monotonic() + seconds


def time_left(cap: float) -> float:
    """`cap`, or less when the run's deadline comes first (0 once it has passed)."""
    return cap if _run_end is None else max(0.0, min(cap, _run_end - time.monotonic()))


def run_process(command: Sequence[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """`subprocess.run(..., capture_output=True, text=True)` whose timeout ends the whole process group
    (a grandchild holding the pipes open cannot keep the tool waiting). Raises TimeoutExpired.
    The timeout is cut to what is left of the run's deadline (`set_run_deadline`)."""
    timeout = time_left(timeout)
    proc = spawn(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        end_process(proc, grace=1.0)
        proc.communicate()
        raise subprocess.TimeoutExpired(list(command), timeout) from None
    except BaseException:
        end_process(proc, grace=1.0)
        raise
    forget(proc)
    return subprocess.CompletedProcess(list(command), proc.returncode, out, err)


# -- the tool's own streams and signals -----------------------------------------------------------


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) arrived: the tool stops like on Ctrl-C, with 128 + the signal's number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class OutputError(OSError):
    """Writing the tool's output (stdout) failed: closed, full, or the reader left (EPIPE)."""


class _GuardedStdout:
    """sys.stdout whose write/flush failures are OutputError (told apart from the tool's own I/O).

    The first failure is also kept on `failed`: argparse's `--help` swallows OSError from its write
    (Lib/argparse.py `_print_message`), and the exit code must still say the output was lost.
    """

    def __init__(self, stream: Optional[Any]):
        self._stream = stream
        self.failed: Optional[OutputError] = None

    def _fail(self, code: Optional[int], text: Optional[str]) -> OutputError:
        error = OutputError(code, text)
        self.failed = self.failed or error
        return error

    def write(self, text: str) -> int:
        if self._stream is None:
            raise self._fail(errno.EBADF, "stdout is closed")
        try:
            self._stream.write(secrets.scrub(text))
            return len(text)
        except OSError as error:
            raise self._fail(error.errno, error.strerror) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except OSError as error:
            raise self._fail(error.errno, error.strerror) from None

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def output_failure() -> Optional[OutputError]:
    """The first failed write to stdout, if any (even one the code that wrote it swallowed)."""
    import sys

    return getattr(sys.stdout, "failed", None) if isinstance(sys.stdout, _GuardedStdout) else None


class _QuietStderr:
    """sys.stderr that drops what cannot be written (closed, full): the exit code still tells."""

    def __init__(self, stream: Optional[Any]):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            if self._stream is not None:
                self._stream.write(secrets.scrub(text))
        except (OSError, ValueError):
            pass
        return len(text)

    def flush(self) -> None:
        try:
            if self._stream is not None:
                self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def guard_streams() -> None:
    """Run once at a tool's start: a closed descriptor 0-2 is backed by /dev/null (so no file the tool
    opens becomes its stdout), stdout failures become OutputError, stderr failures are dropped."""
    import sys

    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if not isinstance(sys.stdout, _GuardedStdout):  # `llm-pd-eks <command>` runs the command's own entry
        sys.stdout = _GuardedStdout(sys.stdout)
    if not isinstance(sys.stderr, _QuietStderr):
        sys.stderr = _QuietStderr(sys.stderr)


def install_signal_handlers() -> dict[int, Any]:
    """SIGTERM/SIGHUP raise Terminated in the main thread (so `finally` blocks and child clean-up run);
    returns the handlers they replace, for `restore_signal_handlers`."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    global _received
    _received = None

    def handler(signum: int, _frame: Any) -> None:
        global _received
        _received = signum
        _stop_running_loop()
        raise Terminated(signum)

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}


def _stop_running_loop() -> None:
    """Stop the asyncio loop the main thread is running, if any. The signal's exception lands in
    whatever runs when it comes: inside an asyncio task (the Pulumi runtime's, under the preview's
    mocks) the task keeps it as its result and the loop waits on for futures that task would have
    resolved, forever. A stopped loop ends `run_until_complete` with an error, so the run ends."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # not inside a loop: the exception alone ends the run
    loop.stop()


# The termination signal the run received, if any: code that caught the `Terminated` it raised (an
# interrupted import inside a library, a broad `except` in an event loop) cannot hide that it came.
_received: Optional[int] = None


def received_signal() -> Optional[int]:
    return _received


def restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def silence_stdout() -> None:
    """Point descriptor 1 at /dev/null so the interpreter's exit-time flush stays quiet
    (the Python docs' recipe, library/signal.html "Note on SIGPIPE")."""
    import sys

    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
    except OSError:
        pass
    finally:
        os.close(null)
    stream = getattr(sys.stdout, "_stream", None)
    if stream is not None:
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
