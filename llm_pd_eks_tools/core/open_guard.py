"""What a tool may open as a file: refused in one line before `open` can hang or loop.

A FIFO given as a stack, workload or facts file blocks `open` until a writer comes (forever, in a
script); `/dev/zero` never ends; a directory opened as a file is an `IsADirectoryError` deep in the
code. Checking each tool's each read grows a list that the next tool misses, so the runner
(`cli.exit_with`) installs one audit hook (PEP 578: every `open()` raises the `open` event with its
path before the system call) that refuses these for every file the process opens, whatever opens it.

Allowed: regular files, `/dev/null`, terminals, the random devices, and directories opened with
`os.open` (a directory's descriptor, for fsync) or by `tempfile.TemporaryFile` (an unnamed file made
in it with `O_TMPFILE`). Refused, as a usage error naming the path: FIFOs, sockets, block devices,
`/dev/zero` and `/dev/full` read as input, and a directory opened with `open()`.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from types import FrameType
from typing import Any, Optional

from llm_pd_eks_tools.core.errors import Exit, ToolError, one_line

# (major, minor) of the memory character devices a tool may open (devices.txt, the kernel's list):
# null 1:3, random 1:8, urandom 1:9; terminals (major 4, 5 and the pseudo-terminals 136-143) too.
_ALLOWED_MEMORY_DEVICES = {(1, 3), (1, 8), (1, 9)}
_TERMINAL_MAJORS = {4, 5, *range(136, 144)}
_installed = False


def install() -> None:
    """Install the hook once for this process (audit hooks cannot be removed: call it only from a
    tool's own process, never from a test's)."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


def refusal(path: str, mode: Any) -> str | None:
    """Why `path` must not be opened with `mode` (None: `os.open`), or None when it may be."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None  # missing or unreadable: `open` itself says so
    kind = info.st_mode
    if stat.S_ISREG(kind):
        return None
    if stat.S_ISDIR(kind):
        if mode is None or _in_temporary_file():
            return None
        return "is a directory, not a file; give the path of a file"
    if stat.S_ISFIFO(kind):
        return "is a FIFO (named pipe), not a regular file; give a file (a pipe would block the tool)"
    if stat.S_ISSOCK(kind):
        return "is a socket, not a regular file; give a file"
    if stat.S_ISBLK(kind):
        return "is a block device, not a regular file; give a file"
    if stat.S_ISCHR(kind):
        device = (os.major(info.st_rdev), os.minor(info.st_rdev))
        if device in _ALLOWED_MEMORY_DEVICES or device[0] in _TERMINAL_MAJORS or device[0] > 143:
            return None  # /dev/null, random devices, terminals, and drivers' own devices (GPUs)
        return "is a device that never ends or never takes data, not a file; give a regular file"
    return None


def _in_temporary_file() -> bool:
    """True inside `tempfile.TemporaryFile`: on Linux it opens its directory with `O_TMPFILE` through
    an opener, and the `open` event that `io.open` raises first shows only mode "w+", the same as a
    directory opened for writing by mistake. The caller is the one thing that tells them apart."""
    frame: Optional[FrameType] = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            return False
        if frame.f_code.co_name == "TemporaryFile" and frame.f_code.co_filename == tempfile.__file__:
            return True
        frame = frame.f_back
    return False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not args:
        return
    path, mode = args[0], (args[1] if len(args) > 1 else None)
    flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
    if path is None or isinstance(path, int):
        return  # an existing descriptor
    if mode is None and flags & os.O_NONBLOCK:
        return  # `os.open` that cannot block: the caller checks what it opened (io_safety.read_regular_file)
    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else None
    if text is None:
        return
    why = refusal(text, mode)
    if why is not None:
        raise ToolError(Exit.USAGE, f"{one_line(text, 200)} {why}")
