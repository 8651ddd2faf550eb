"""The exit-code table and the one error type every tool of this repository reports with.

An expected failure is a `ToolError`: ONE line on stderr (what went wrong, where, how to fix it)
and its code from `Exit`. The exit-code table (docs/exit-codes.md) is this enum (a test keeps them
equal). Kept apart from `cli` so that the bounded I/O beneath the command line can raise them too.
"""

from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    """Exit codes shared by every tool."""

    OK = 0  # the tool ran and its verdict is positive
    FAILED = 1  # the tool ran and its verdict is negative: a mandatory violation, a failed check, drift
    USAGE = 2  # bad input: arguments, a stack file, the stack's config, a policy config, a workload file
    PROGRAM = 3  # the Pulumi program itself failed under the mock runtime
    POLICY = 4  # the policy pack failed to start or to answer
    UNVERIFIED = 5  # nothing negative found, but something could not be checked (unreachable, no credentials)
    INTERNAL = 70  # a bug in the tool (EX_SOFTWARE); the message says where to report it
    IOERR = 74  # the output could not be written: stdout closed or full, a file the tool writes (EX_IOERR)
    # The shell's convention for a process ended by a signal, 128 + its number (signal(7)).
    INTERRUPTED = 130  # SIGINT (Ctrl-C)
    PIPE = 141  # SIGPIPE: the reader of stdout left (`| head`); nothing more is printed
    TERMINATED = 143  # SIGTERM; child processes are ended first


class ToolError(Exception):
    """An expected failure: printed as one line (no traceback) and mapped to its exit code."""

    def __init__(self, exit_code: Exit, message: str):
        super().__init__(message)
        self.exit_code = Exit(exit_code)


def one_line(text: str, limit: int = 300) -> str:
    """`text` folded onto one line and cut to `limit` characters (user values can be huge)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
