"""How every tool reads input, writes output, talks to servers and runs child processes: one way each.

- `atomic_write`: a file is replaced whole or not at all (a temporary file in the same directory,
  fsync'd, then `os.replace`, which POSIX makes atomic within a file system), so a full disk or a
  kill mid-write leaves the old file, never a truncated one.
- `read_regular_file`: a regular file of at most `max_bytes`, opened without blocking (a FIFO or a
  device given as an input file is refused instead of hanging the tool).
- `http_request`: one HTTP exchange under ONE deadline that covers connecting, the TLS handshake,
  sending, the status line, the headers and the body (a socket timeout alone bounds each receive, so
  a server trickling a byte at a time keeps a client forever), and a byte cap on the reply.
  `http_exchange` is the same exchange open (a streamed reply, a WebSocket upgrade), `read_body` its
  capped body.
- `redact`: the one filter every message passes through (URL user:password@, kubeconfig tokens and
  keys, bearer tokens).

Child processes, the run's deadline and the tool's own streams and signals: `process_safety.py`.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import io
import os
import socket
import ssl
import stat
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generator, Iterator, Optional, Union

from llm_pd_eks_tools.core import secrets
from llm_pd_eks_tools.core.errors import Exit, ToolError, one_line

# -- files ---------------------------------------------------------------------------------------


def atomic_write(path: Union[str, Path], data: Union[str, bytes]) -> None:
    """Replace `path` with `data` whole (the old content stays when anything fails; its mode is kept).

    A symlink is followed: its target is replaced and the link stays a link (a stack file kept as a
    link to a shared config repository stays one). Text is scrubbed of every registered secret
    (secrets.py). A failure is a ToolError with exit code IOERR naming the file; the temporary file
    is removed.
    """
    path = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    payload = secrets.scrub(data).encode("utf-8") if isinstance(data, str) else data
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        mode = 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:  # a read-only or foreign directory is the user's to fix: USAGE
        code = Exit.USAGE if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT) else Exit.IOERR
        raise ToolError(code, f"cannot write {path} ({error.strerror}); nothing was changed") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as error:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ToolError(Exit.IOERR, f"cannot write {path} ({error.strerror}); it was left as it was") from None
    _fsync_dir(path.parent)


def append_text(path: Union[str, Path], text: str, what: str = "--github-output") -> None:
    """Append `text` in one write (GitHub's GITHUB_OUTPUT file is appended to, never replaced).

    A path that is a directory or another non-regular file, or cannot be opened, is a USAGE error; a
    write that fails (a full disk) is IOERR.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o666)
    except OSError as error:
        raise ToolError(Exit.USAGE, f"{what} {path}: cannot be opened for appending ({error.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolError(Exit.USAGE, f"{what} {path}: not a regular file; give the file to append to")
        try:
            os.write(fd, text.encode("utf-8"))
        except OSError as error:
            raise ToolError(Exit.IOERR, f"{what} {path}: cannot be written ({error.strerror})") from None
    finally:
        os.close(fd)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (the directory entry); some file systems refuse: no matter."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_regular_file(path: Union[str, Path], max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `max_bytes`; anything else is a one-line USAGE error.

    O_NONBLOCK makes opening a FIFO return at once (open(2)); fstat then refuses it, a directory,
    a device or a socket before a single byte is read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ToolError(Exit.USAGE, f"no such {what} {path}") from None
    except OSError as error:
        raise ToolError(Exit.USAGE, f"{what} {path}: cannot be read ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(Exit.USAGE, f"{what} {path} is a directory, not a regular file; give a file")
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(Exit.USAGE, f"{what} {path}: not a regular file; give a file")
        if info.st_size > max_bytes:
            raise ToolError(Exit.USAGE, f"{what} {path} is larger than {max_bytes} bytes; is it the right file?")
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as error:
        raise ToolError(Exit.USAGE, f"{what} {path}: cannot be read ({error.strerror})") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise ToolError(Exit.USAGE, f"{what} {path} is larger than {max_bytes} bytes; is it the right file?")
    return b"".join(chunks)


# -- HTTP ----------------------------------------------------------------------------------------


class HttpTimeout(TimeoutError):
    """The exchange did not finish before its deadline (headers included)."""


class ReplyTooLarge(ValueError):
    """The reply is larger than the caller reads."""


class BadHttpReply(ValueError):
    """The peer answered, but not with HTTP (a garbled status line, too many or too long headers)."""


class UnexpectedStatus(ValueError):
    """A streamed reply with a status other than 200."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes


class _DeadlineReader(io.RawIOBase):
    """A socket's receiving side where each receive may wait only for what is left of the deadline."""

    def __init__(self, sock: socket.socket, end: float):
        self._sock, self._end = sock, end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        _arm(self._sock, self._end)
        try:
            return self._sock.recv_into(buffer)
        except TimeoutError:
            raise HttpTimeout("the reply did not arrive in time") from None


class _DeadlineSocket:
    """What http.client sees as its socket: sends and receives bounded by one deadline."""

    def __init__(self, sock: socket.socket, end: float):
        self._sock, self._end = sock, end

    def sendall(self, data: bytes) -> None:
        _arm(self._sock, self._end)
        try:
            self._sock.sendall(data)
        except TimeoutError:
            raise HttpTimeout("the request could not be sent in time") from None

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._end))

    def close(self) -> None:
        """http.client closes its socket once a reply will close the connection but still reads the
        body from it; the exchange closes the real socket when it is done (`http_exchange`)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _arm(sock: socket.socket, end: float) -> None:
    left = end - time.monotonic()
    if left <= 0:
        raise HttpTimeout("the exchange ran past its deadline")
    sock.settimeout(left)


class _Connection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, end: float, context: Optional[ssl.SSLContext]):
        super().__init__(host, port, timeout=max(0.001, end - time.monotonic()))
        self._end, self._context = end, context
        self.raw_sock: Optional[socket.socket] = None

    def connect(self) -> None:
        try:
            super().connect()  # TCP, bounded by the timeout given above (what was left then)
            if self._context is not None:
                _arm(self.sock, self._end)
                self.sock = self._context.wrap_socket(self.sock, server_hostname=self.host)
        except TimeoutError:
            raise HttpTimeout("no connection in time") from None
        self.raw_sock = self.sock
        self.sock = _DeadlineSocket(self.sock, self._end)


@contextlib.contextmanager
def http_exchange(
    method: str,
    url: str,
    end: float,
    body: Optional[bytes] = None,
    headers: Optional[dict[str, str]] = None,
    ssl_context: Optional[ssl.SSLContext] = None,
) -> Iterator[http.client.HTTPResponse]:
    """One exchange with `url` whose every send and receive ends by the monotonic time `end`, open while
    the `with` lasts: the reply's status and headers are read, its body is the caller's (`read_body`,
    or `response.fp` after a `101 Switching Protocols`, still bound to `end`). The socket is closed on
    leaving. Raises HttpTimeout, BadHttpReply, ValueError (not an http(s) URL), OSError (unreachable).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{redact(one_line(url, 80))} is not an http(s) URL")
    https = parts.scheme == "https"
    context = (ssl_context or ssl.create_default_context()) if https else None
    conn = _Connection(parts.hostname, parts.port or (443 if https else 80), end, context)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request(method, target, body=body, headers=headers or {})
        yield conn.getresponse()
    except http.client.HTTPException as error:
        raise BadHttpReply(f"not an HTTP reply ({type(error).__name__}: {one_line(str(error), 80)})") from None
    finally:
        conn.close()
        if conn.raw_sock is not None:
            conn.raw_sock.close()


def http_request(
    method: str,
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    body: Optional[bytes] = None,
    headers: Optional[dict[str, str]] = None,
    ssl_context: Optional[ssl.SSLContext] = None,
) -> Reply:
    """One exchange with `url`, all of it within `timeout` seconds, the body at most `max_bytes`.

    Any status is returned (the caller judges it). Raises HttpTimeout, ReplyTooLarge, BadHttpReply,
    or OSError when the server cannot be reached.
    """
    end = time.monotonic() + timeout
    with http_exchange(method, url, end, body, headers, ssl_context) as response:
        return Reply(response.status, response.msg, read_body(response, max_bytes))


def read_body(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    """The reply's body, at most `max_bytes` (a larger declared Content-Length is refused unread);
    ReplyTooLarge past the cap. Each read is bound to the exchange's deadline (`http_exchange`)."""
    declared = response.getheader("Content-Length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise ReplyTooLarge(f"the reply is {int(declared)} bytes, more than the {max_bytes} read")
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = response.read(min(64 * 1024, max_bytes + 1 - size))
        if not chunk:
            break
        size += len(chunk)
        if size > max_bytes:
            raise ReplyTooLarge(f"the reply is larger than the {max_bytes} bytes read")
        chunks.append(chunk)
    return b"".join(chunks)


def http_lines(
    method: str,
    url: str,
    *,
    end: float,
    max_bytes: int,
    body: Optional[bytes] = None,
    headers: Optional[dict[str, str]] = None,
) -> Generator[bytes, None, None]:
    """A streamed reply (server-sent events) line by line, the whole exchange before the monotonic
    time `end` and at most `max_bytes` in all (a line without an end counts too). A status other than
    200 raises UnexpectedStatus before any line."""
    with http_exchange(method, url, end, body, headers, None) as response:
        if response.status != 200:
            raise UnexpectedStatus(f"HTTP {response.status}")
        size = 0
        while True:
            line = response.readline(max_bytes + 1 - size)
            if not line:
                return
            size += len(line)
            if size > max_bytes:
                raise ReplyTooLarge(f"the streamed reply is larger than the {max_bytes} bytes read")
            yield line


# -- secrets in messages: by value and by shape, in one place (secrets.py) ---------------------------
REDACTED = secrets.REDACTED
redact = secrets.redact
