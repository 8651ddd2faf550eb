"""One error type and one exit-code table for every command-line tool of this repository.

Every tool (`preview`, `preview-diff`, `preflight`, `promote-check`, `verify`, `size`) exits with a
code from `Exit` and reports an expected failure as ONE line on stderr: what went wrong, where, and
how to fix it. `run` wraps a tool's `main` so that no traceback ever reaches a user: an unexpected
exception becomes a one-line "internal error" with its own code. The README's exit-code table is
this enum (a test keeps them equal).
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Callable, NoReturn, Optional

ROOT = Path(__file__).resolve().parent.parent


class Exit(enum.IntEnum):
    """Exit codes shared by every tool."""

    OK = 0  # the tool ran and its verdict is positive
    FAILED = 1  # the tool ran and its verdict is negative: a mandatory violation, a failed check, drift
    USAGE = 2  # bad input: arguments, a stack file, the stack's config, a policy config, a workload file
    PROGRAM = 3  # the Pulumi program itself failed under the mock runtime
    POLICY = 4  # the policy pack failed to start or to answer
    UNVERIFIED = 5  # nothing negative found, but something could not be checked (unreachable, no credentials)
    INTERNAL = 70  # a bug in the tool (EX_SOFTWARE); the message says where to report it


class ToolError(Exception):
    """An expected failure: printed as one line (no traceback) and mapped to its exit code."""

    def __init__(self, exit_code: Exit, message: str):
        super().__init__(message)
        self.exit_code = Exit(exit_code)


def one_line(text: str, limit: int = 300) -> str:
    """`text` folded onto one line and cut to `limit` characters (user values can be huge)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def run(prog: str, main: Callable[[Optional[list[str]]], int], argv: Optional[list[str]] = None) -> int:
    """Call `main`, turning `ToolError`, Ctrl-C and unexpected exceptions into one line + exit code."""
    try:
        return int(main(argv))
    except ToolError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exit_:  # argparse: usage errors exit 2 after printing its own line
        return exit_.code if isinstance(exit_.code, int) else Exit.USAGE
    except Exception as error:
        where = _innermost_frame(error)
        print(f"{prog}: internal error: {type(error).__name__}: {one_line(str(error))} ({where}); "
              "please report it with the command you ran", file=sys.stderr)
        return Exit.INTERNAL


def exit_with(prog: str, main: Callable[[Optional[list[str]]], int]) -> NoReturn:
    sys.exit(run(prog, main))


def _innermost_frame(error: BaseException) -> str:
    tb = error.__traceback__
    if tb is None:
        return "unknown location"
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = Path(tb.tb_frame.f_code.co_filename)
    try:
        path = path.relative_to(ROOT)
    except ValueError:
        pass
    return f"{path}:{tb.tb_lineno}"
