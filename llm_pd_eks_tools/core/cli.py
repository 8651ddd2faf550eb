"""How every command-line tool of this repository starts, reports and ends.

Every tool (`preview`, `preview-diff`, `preflight`, `promote-check`, `verify`, `size`) exits with a
code from `Exit` and reports an expected failure as ONE line on stderr: what went wrong, where, and
how to fix it. `run` wraps a tool's `main` so that no traceback ever reaches a user: an unexpected
exception becomes a one-line "internal error" with its own code. The exit-code table (docs/exit-codes.md) is
this enum (a test keeps them equal).
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Callable, Iterable, NoReturn, Optional

from llm_pd_eks_tools.core import open_guard, process_safety, secrets
from llm_pd_eks_tools.core.errors import Exit, ToolError, one_line
from llm_pd_eks_tools.core.io_safety import atomic_write, redact
from llm_pd_eks_tools.core.process_safety import OutputError, guard_streams, output_failure, silence_stdout

ROOT = Path(__file__).resolve().parents[2]


def say(prog: str, message: str) -> None:
    """One line on stderr, `prog: message`, credentials redacted (llm_pd_eks_tools/core/io_safety.py `redact`)."""
    print(f"{prog}: {one_line(redact(message), MESSAGE_LIMIT)}", file=sys.stderr, flush=True)


MESSAGE_LIMIT = 1000  # characters of one error line


def run(prog: str, main: Callable[[Optional[list[str]]], int], argv: Optional[list[str]] = None) -> int:
    """Call `main`, turning `ToolError`, signals, output failures and unexpected exceptions into one line
    + exit code; child process groups still running are ended on every way out."""
    previous = process_safety.install_signal_handlers()
    before = process_safety.running_children()
    others = process_safety.descendants()
    secrets.register_environment()
    secrets.register_urls_in(sys.argv[1:] if argv is None else argv)
    try:
        try:
            code = int(main(argv))
        finally:
            process_safety.end_children(keep=before)
            process_safety.end_descendants(keep=others)
            process_safety.restore_signal_handlers(previous)
        return _terminated(prog) or code
    except BaseException as error:  # how it ended, unless a termination signal came first
        return _terminated(prog) or _ended(prog, error)


def _terminated(prog: str) -> Optional[int]:
    """128 + the signal when SIGTERM/SIGHUP came during the run, whatever the code under it made of it."""
    signum = process_safety.received_signal()
    if signum is None:
        return None
    say(prog, f"terminated ({signal.Signals(signum).name})")
    return 128 + signum


def _ended(prog: str, error: BaseException) -> int:
    """The exit code and one line for the way `main` ended."""
    try:
        raise error
    except ToolError as error:
        say(prog, str(error))
        return error.exit_code
    except KeyboardInterrupt:
        say(prog, "interrupted")
        return Exit.INTERRUPTED
    except process_safety.Terminated as signal_:
        say(prog, f"terminated ({signal_})")
        return 128 + signal_.signum
    except process_safety.OutputError as error:
        return output_failed(prog, error)
    except BrokenPipeError:  # a stdout not guarded (a test's capture): the reader left
        return Exit.PIPE
    except SystemExit as exit_:  # argparse's --help and its own errors (codes), or a failure's message
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or Exit.OK
        say(prog, one_line(str(exit_.code)))  # Python prints the message and exits 1: so does the runner
        return Exit.FAILED
    except Exception as error:
        where = _innermost_frame(error)
        say(
            prog,
            f"internal error: {type(error).__name__}: {one_line(str(error))} ({where}); "
            "please report it with the command you ran",
        )
        return Exit.INTERNAL


def output_failed(prog: str, error: OSError) -> int:
    """stdout could not be written: the reader left (SIGPIPE's code, quietly) or it is closed or full."""
    silence_stdout()
    if error.errno == errno.EPIPE:
        return Exit.PIPE
    say(prog, f"cannot write the output to stdout ({error.strerror or error})")
    return Exit.IOERR


def finish(prog: str, code: int) -> int:
    """Flush stdout and stderr before the process ends; a failure there changes the code as in `run`."""
    try:
        sys.stdout.flush()
    except OutputError as error:
        code = output_failed(prog, error)
    except (OSError, ValueError):
        pass
    else:
        swallowed = output_failure()  # a write that failed inside code that hid it (argparse's --help)
        if swallowed is not None and code not in (Exit.IOERR, Exit.PIPE):
            code = output_failed(prog, swallowed)
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return code


def exit_with(prog: str, main: Callable[[Optional[list[str]]], int]) -> NoReturn:
    """A tool's process: its streams guarded (llm_pd_eks_tools/core/process_safety.py), what it may open
    checked (open_guard.py), `run`, flush, exit."""
    guard_streams()
    open_guard.install()
    sys.exit(finish(prog, run(prog, main)))


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


def regular_file(text: str) -> Path:
    """argparse `type=` for an input file: never a FIFO, a device or a directory (refused while the
    arguments are read, before the tool prints or starts anything). A file that does not exist yet is
    the tool's to report: the cost audit, for one, audits what it can without it."""
    path = Path(text)
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(f"{one_line(text, 200)} is not a regular file (a FIFO, device or directory)")
    return path


def appendable_file(text: str) -> Path:
    """argparse `type=` for a file the tool appends to (GITHUB_OUTPUT): a regular file, or a new one in an
    existing directory; checked while the arguments are read, before the tool writes anything."""
    path = Path(text)
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(f"{one_line(text, 200)} is not a regular file (a FIFO, device or directory)")
    if not path.exists() and not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{one_line(text, 200)}: its directory does not exist")
    return path


def checkout_root(root: Path, flag: str = "--root") -> Path:
    """`root` resolved, refused unless it is an existing directory holding a Pulumi project (Pulumi.yaml)."""
    resolved = Path(root).resolve()
    if not resolved.is_dir():
        raise ToolError(Exit.USAGE, f"{flag} {root}: no such directory; give a checkout of this project")
    if not (resolved / "Pulumi.yaml").is_file():
        raise ToolError(Exit.USAGE, f"{flag} {root}: no Pulumi.yaml there; give the root of a checkout of this project")
    return resolved


# The file a tool leaves in an artifact directory it made, so a later run knows the files there are its own.
OWNER_MARK = ".written-by-llm-pd-eks"


def fresh_out_dir(out: Path, owned: Iterable[str], flag: str = "--out", mark: bool = False) -> Path:
    """Empty (or create) the artifact directory `out`, checked before anything is removed or written.

    Refused, as a usage error: a path that is a file, a directory holding anything but the names in
    `owned` (a mistyped `--out` must not delete someone's files), a directory that cannot be created
    or written. Only the `owned` entries are removed. With `mark`, a directory that already holds
    files must also hold OWNER_MARK (left by an earlier run), so a user's own `report.md` is never
    taken for the tool's; the mark is written into the emptied directory.
    """
    owned = set(owned) | ({OWNER_MARK} if mark else set())
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
        if mark and entries and OWNER_MARK not in entries:
            foreign = entries
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
    else:
        try:
            out.mkdir(parents=True)
        except OSError as error:
            raise ToolError(
                Exit.USAGE, f"{flag} {out} cannot be created ({error.strerror}); choose a directory you can write"
            ) from None
    if mark:
        atomic_write(out / OWNER_MARK, "written by an llm-pd-eks tool; files here are replaced on its next run\n")
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
