"""One error type and one exit-code table for every command-line tool of this repository.

Every tool (`preview`, `preview-diff`, `preflight`, `promote-check`, `verify`, `size`) exits with a
code from `Exit` and reports an expected failure as ONE line on stderr: what went wrong, where, and
how to fix it. `run` wraps a tool's `main` so that no traceback ever reaches a user: an unexpected
exception becomes a one-line "internal error" with its own code. The exit-code table (docs/exit-codes.md) is
this enum (a test keeps them equal).
"""

from __future__ import annotations

import argparse
import enum
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Iterable, NoReturn, Optional

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
    except BrokenPipeError:  # `tool | head`: the reader left; nothing more to say, and no traceback
        _silence_stdout()
        return Exit.OK
    except SystemExit as exit_:  # argparse: usage errors exit 2 after printing its own line
        return exit_.code if isinstance(exit_.code, int) else Exit.USAGE
    except Exception as error:
        where = _innermost_frame(error)
        print(
            f"{prog}: internal error: {type(error).__name__}: {one_line(str(error))} ({where}); "
            "please report it with the command you ran",
            file=sys.stderr,
        )
        return Exit.INTERNAL


def exit_with(prog: str, main: Callable[[Optional[list[str]]], int]) -> NoReturn:
    code = run(prog, main)
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the interpreter's own final flush would print "Exception ignored ... BrokenPipeError"
        _silence_stdout()
    sys.exit(code)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's exit-time flush of a closed pipe stays quiet
    (the Python docs' recipe, library/signal.html "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (pytest's capture): nothing to silence
        pass
    finally:
        os.close(devnull)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with its errors as this module's one line (`prog: what; see --help`), exit USAGE."""

    def error(self, message: str) -> NoReturn:
        raise ToolError(Exit.USAGE, f"{one_line(message)} (see `{self.prog} --help`)")


# -- argument and path checks shared by the tools: every one runs before anything is written ------


def seconds(text: str) -> float:
    """argparse `type=` for a duration: a finite number of seconds above zero (`nan`, `inf`, `-1` refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{one_line(text, 40)!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{one_line(text, 40)!r} must be a finite number of seconds above 0")
    return value


def non_negative_seconds(text: str) -> float:
    """argparse `type=` for a wait that may be 0: a finite number of seconds, at least zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{one_line(text, 40)!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{one_line(text, 40)!r} must be a finite number of seconds, 0 or more")
    return value


def checkout_root(root: Path, flag: str = "--root") -> Path:
    """`root` resolved, refused unless it is an existing directory holding a Pulumi project (Pulumi.yaml)."""
    resolved = Path(root).resolve()
    if not resolved.is_dir():
        raise ToolError(Exit.USAGE, f"{flag} {root}: no such directory; give a checkout of this project")
    if not (resolved / "Pulumi.yaml").is_file():
        raise ToolError(Exit.USAGE, f"{flag} {root}: no Pulumi.yaml there; give the root of a checkout of this project")
    return resolved


def fresh_out_dir(out: Path, owned: Iterable[str], flag: str = "--out") -> Path:
    """Empty (or create) the artifact directory `out`, checked before anything is removed or written.

    Refused, as a usage error: a path that is a file, a directory holding anything but the names in
    `owned` (a mistyped `--out` must not delete someone's files), a directory that cannot be created
    or written. Only the `owned` entries are removed.
    """
    owned = set(owned)
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise ToolError(Exit.USAGE, f"{flag} {out} is not a directory; give a directory for the artifacts")
        try:
            entries = sorted(p.name for p in out.iterdir())
        except OSError as error:
            raise ToolError(
                Exit.USAGE, f"{flag} {out} cannot be read ({error.strerror}); choose another directory"
            ) from None
        foreign = [name for name in entries if name not in owned]
        if foreign:
            raise ToolError(
                Exit.USAGE,
                f"{flag} {out} holds files this tool did not write "
                f"({', '.join(foreign[:3])}); choose an empty directory",
            )
        if not os.access(out, os.W_OK | os.X_OK):
            raise ToolError(Exit.USAGE, f"{flag} {out} is not writable; choose a directory you can write")
        for name in entries:
            path = out / name
            try:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            except OSError as error:
                raise ToolError(Exit.USAGE, f"{flag} {out}: cannot remove {name} ({error.strerror})") from None
        return out
    try:
        out.mkdir(parents=True)
    except OSError as error:
        raise ToolError(
            Exit.USAGE, f"{flag} {out} cannot be created ({error.strerror}); choose a directory you can write"
        ) from None
    return out


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
