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


# What each code means, as docs/exit-codes.md says it (generated: llm_pd_eks_tools/maint/exit_codes_doc.py).
MEANINGS = {
    Exit.OK: "the tool ran and its verdict is positive (preflight: everything verified, or only some items "
    "could not be checked)",
    Exit.FAILED: "the verdict is negative: a mandatory policy violation, a failed preflight check, an "
    "unpromoted difference, a stale generated docs table",
    Exit.USAGE: "bad input: arguments (a stack name that is not one, `--timeout nan`), a path (`--root` that "
    "is no checkout, `--out` at a file or holding other files), an input that is a FIFO, a device or a "
    "directory, a stack file (duplicate key, alias, wrong shape), the stack's config, a policy config, a "
    "kubeconfig, `AWS_ENDPOINT_URL`, `AWS_CA_BUNDLE`",
    Exit.PROGRAM: "the Pulumi program itself failed under the mock runtime",
    Exit.POLICY: "the policy pack failed to start or to answer (each answer within `--policy-timeout`, default 300 s)",
    Exit.UNVERIFIED: "nothing negative found, but something could not be checked: preflight verified nothing, "
    "or `STRICT=1` and an item could not be checked; verify could not reach, read or parse what a check "
    "needs (a check over zero pods is UNVERIFIED, never a pass); a server did not answer in the deadline",
    Exit.INTERNAL: "a bug in the tool (EX_SOFTWARE); the line says where",
    Exit.IOERR: "the output could not be written (EX_IOERR): stdout closed (`>&-`) or full (`>/dev/full`), or "
    "a file the tool writes (a full disk); a file is replaced whole or not at all, so the old one stays",
    Exit.INTERRUPTED: "Ctrl-C (128 + SIGINT); child processes are ended first",
    Exit.PIPE: "the reader of stdout left (`\\| head`, `\\| true`): 128 + SIGPIPE, as a shell reports a "
    "process SIGPIPE ended; nothing is printed",
    Exit.TERMINATED: "SIGTERM (128 + 15; SIGHUP gives 129); every process the tool started, whoever started "
    "it, is ended first",
}


class ToolError(Exception):
    """An expected failure: printed as one line (no traceback) and mapped to its exit code."""

    def __init__(self, exit_code: Exit, message: str):
        super().__init__(message)
        self.exit_code = Exit(exit_code)


def one_line(text: str, limit: int = 300) -> str:
    """`text` folded onto one line and cut to `limit` characters (user values can be huge)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
