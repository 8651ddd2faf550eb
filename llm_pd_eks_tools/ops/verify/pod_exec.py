"""`kubectl exec`'s stdout for verify and calibrate: the `kubernetes` client's exec stream, under a deadline.

The stream is the client's own (`kubernetes.stream.ws_client.WSClient`: the WebSocket, the
v4/v5.channel.k8s.io channels, the credentials and TLS settings of the kubeconfig's `Configuration`).
Two bounds are added around it, because the client has neither: the whole exchange (connecting, the
handshake, every frame) runs on a worker thread that the caller waits for at most the request's share
of the run's deadline, its socket shut down when that runs out; and what the channels hold is counted
against a byte cap after every frame read.

The protocol (kubernetes staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go,
StreamProtocolV4Name): channel 1 stdout, 2 stderr, 3 error: a v1 Status, `Success` or `Failure` with the
exit code in `details.causes`; the server ends with a close frame.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from typing import Any, Optional

import websocket
from kubernetes.client import Configuration
from kubernetes.stream.ws_client import ERROR_CHANNEL, STDERR_CHANNEL, STDOUT_CHANNEL, WSClient, get_websocket_url

from llm_pd_eks_tools.core.cli import one_line

# How long one wait for the next frame may be, so the worker notices an abort between frames.
POLL_S = 0.5
CHANNELS = (STDOUT_CHANNEL, STDERR_CHANNEL, ERROR_CHANNEL)


class ExecFailed(Exception):
    """What went wrong, as `kind` (`status`: an HTTP status instead of the upgrade; `large`: over the
    cap; `status-object`: the error channel is no Status; `command`: a non-zero exit or a Failure;
    `transport`: refused, reset, TLS, not WebSocket) and a message."""

    def __init__(self, kind: str, message: str, status: int = 0):
        super().__init__(message)
        self.kind, self.status = kind, status


class _Exchange:
    """One exec request on the worker thread; `abort` ends it from the caller's."""

    def __init__(self, configuration: Configuration, url: str, headers: dict[str, str], max_bytes: int):
        self.configuration, self.url, self.headers, self.max_bytes = configuration, url, headers, max_bytes
        self.client: Optional[WSClient] = None
        self.out = b""
        self.error = b""
        self.failure: Optional[BaseException] = None
        self.aborted = threading.Event()

    def run(self) -> None:
        try:
            self.client = WSClient(self.configuration, self.url, self.headers, capture_all=False, binary=True)
            if self.aborted.is_set():  # the caller gave up while the handshake ran
                return
            while self.client.is_open() and not self.aborted.is_set():
                self.client.update(timeout=POLL_S)
                held = sum(len(self.client.peek_channel(channel) or b"") for channel in CHANNELS)
                if held > self.max_bytes:
                    raise ExecFailed("large", f"the reply is larger than the {self.max_bytes} bytes verify reads")
            self.out = self.client.read_channel(STDOUT_CHANNEL) or b""
            self.error = self.client.read_channel(ERROR_CHANNEL) or b""
        except BaseException as error:  # handed to the caller's thread
            self.failure = error
        finally:
            self._close()

    def abort(self) -> None:
        self.aborted.set()
        self._close()

    def _close(self) -> None:
        client = self.client
        if client is not None and client.sock is not None and client.sock.sock is not None:
            try:
                client.sock.sock.shutdown(socket.SHUT_RDWR)  # unblocks a read in progress on the worker
            except OSError:
                pass


def exec_stdout(
    configuration: Configuration,
    server: str,
    authorization: Optional[str],
    path: str,
    command: list[str],
    container: str,
    timeout: float,
    max_bytes: int,
) -> bytes:
    """The command's stdout; ExecFailed for what the server said, TimeoutError when `timeout` ran out."""
    query = urllib.parse.urlencode(
        [("command", c) for c in command] + [("container", container), ("stdout", "true"), ("stderr", "true")]
    )
    headers = {"authorization": authorization} if authorization else {}
    exchange = _Exchange(configuration, get_websocket_url(f"{server}{path}?{query}"), headers, max_bytes)
    worker = threading.Thread(target=exchange.run, name="pod-exec", daemon=True)
    websocket.setdefaulttimeout(timeout)  # each socket operation of the handshake, inside the deadline below
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        exchange.abort()
        raise TimeoutError("exec: the reply did not arrive in time (timed out)")
    failure = exchange.failure
    if isinstance(failure, ExecFailed):
        raise failure
    if isinstance(failure, websocket.WebSocketBadStatusException):
        body = (failure.resp_body or b"")[: 64 * 1024]
        raise ExecFailed("status", bytes(body).decode(errors="replace"), failure.status_code)
    if failure is not None:
        raise ExecFailed("transport", f"{type(failure).__name__}: {one_line(str(failure))}") from None
    _raise_exec_status(exchange.error)
    return exchange.out


def _raise_exec_status(error: bytes) -> None:
    """The error channel's v1 Status: nothing (or `Success`) passes; `Failure` names the exit code."""
    if not error:
        return
    try:
        status: Any = json.loads(error)
    except ValueError:
        raise ExecFailed("status-object", "the exec error channel is not a Status object") from None
    if not isinstance(status, dict):
        raise ExecFailed("status-object", "the exec error channel is not a Status object")
    if status.get("status") == "Success":
        return
    causes = (status.get("details") or {}).get("causes") or []
    exit_code = next((c.get("message") for c in causes if isinstance(c, dict) and c.get("reason") == "ExitCode"), "")
    raise ExecFailed(
        "command",
        f"command failed{' with exit code ' + str(exit_code) if exit_code else ''}: {status.get('message', '')}",
    )
