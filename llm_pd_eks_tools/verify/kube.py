"""A minimal Kubernetes API client for `verify`: the kubeconfig's server, CA and credentials, plain HTTPS.

Why not the `kubernetes` PyPI client: verify needs GET/POST on a handful of paths (nodes, pods,
DaemonSets, one custom resource, the service proxy), and the EKS kubeconfig's exec credential
(`aws eks get-token`) is a documented, small protocol (client.authentication.k8s.io ExecCredential:
run the command, read `status.token`). Plain urllib keeps the tool dependency-free and every
timeout under our control, which the total deadline needs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import socket
import ssl
import struct
import subprocess
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Optional

import yaml

from llm_pd_eks_tools.cli import Exit, ToolError, one_line
from llm_pd_eks_tools.io_safety import HttpTimeout, ReplyTooLarge, http_request, read_regular_file, redact
from llm_pd_eks_tools.process_safety import run_process

MAX_REQUEST_SECONDS = 30.0
# Largest reply read from the API server (bytes). A NodeList of a few hundred nodes is a few MB; a Ray
# worker log tail a few more. Anything larger is refused unread rather than held in memory.
MAX_RESPONSE_BYTES = 32 * 2**20
READ_CHUNK = 64 * 1024
# Largest kubeconfig read (bytes); EKS's is ~2 KB.
MAX_KUBECONFIG_BYTES = 1 * 2**20


class Unreachable(Exception):
    """The API server (or a service behind its proxy) did not answer: nothing could be checked."""


class BadReply(ValueError):
    """The API server answered, but not with what the Kubernetes API returns there (not JSON, the wrong
    shape, too large): the check it feeds cannot be made."""


class HttpError(Exception):
    def __init__(self, status: int, url: str, body: str):
        super().__init__(f"HTTP {status} from {url}: {one_line(body, 200)}")
        self.status = status


class Deadline:
    """The verify run's total time budget; every request gets at most what is left."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def request_timeout(self, cap: float = MAX_REQUEST_SECONDS) -> float:
        left = self.left()
        if left <= 0:
            raise TimeoutError("verify's total time limit reached")
        return min(cap, left)


@dataclass
class Credentials:
    server: str
    ssl_context: ssl.SSLContext
    token: Optional[str] = None


def _exec_token(spec: dict[str, Any], timeout: float) -> str:
    """Run a kubeconfig `exec` credential plugin (e.g. `aws eks get-token`) and return its token."""
    env = dict(os.environ)
    for entry in spec.get("env") or []:  # client.authentication.k8s.io ExecEnvVar: name and value, both required
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("value"), str)):
            raise ToolError(
                Exit.USAGE,
                f"not a usable kubeconfig: exec env entry {one_line(repr(entry), 80)} needs `name` and `value` strings",
            )
        env[entry["name"]] = entry["value"]
    args = spec.get("args") or []
    if not isinstance(spec.get("command"), str) or not spec["command"] or not isinstance(args, list):
        raise ToolError(
            Exit.USAGE, "not a usable kubeconfig: the user's exec needs a `command` string and `args` as a list"
        )
    command = [spec["command"], *(str(a) for a in args)]
    try:
        result = run_process(command, timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(Exit.UNVERIFIED, f"kubeconfig credential command {command[0]!r} failed: {exc}") from None
    if result.returncode != 0:
        raise ToolError(
            Exit.UNVERIFIED,
            f"kubeconfig credential command {command[0]!r} exited {result.returncode}: {one_line(result.stderr)}",
        )
    try:
        return str(json.loads(result.stdout)["status"]["token"])
    except (ValueError, KeyError, TypeError):
        raise ToolError(Exit.UNVERIFIED, f"credential command {command[0]!r} printed no ExecCredential token") from None


def read_kubeconfig(path: str) -> str:
    """A kubeconfig file's text; a missing, non-regular (a FIFO), binary or oversized file is a usage error."""
    data = read_regular_file(path, MAX_KUBECONFIG_BYTES, "kubeconfig")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(Exit.USAGE, f"kubeconfig {path} is not UTF-8 text; is it the right file?") from None


def _bad_kubeconfig(why: str) -> ToolError:
    return ToolError(Exit.USAGE, f"not a usable kubeconfig: {why}")


def load_kubeconfig(text: str, timeout: float = MAX_REQUEST_SECONDS) -> Credentials:
    """The current context's server, TLS trust and bearer token (static or from an exec plugin).

    Every defect of the file is a usage error naming the field: no YAML mapping, a missing context,
    cluster or server, a server that is not an http(s) URL, CA data that is not base64 PEM, a CA file
    that is missing or not a certificate, an exec entry without its required fields.
    """
    try:
        config = yaml.safe_load(text) or {}
        current = config.get("current-context")
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        context = contexts[current] if current else next(iter(contexts.values()))
        clusters = {c["name"]: c["cluster"] for c in config.get("clusters") or []}
        users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
        cluster, user = clusters[context["cluster"]], users.get(context.get("user"), {})
        server = str(cluster["server"]).rstrip("/")
        if not isinstance(cluster, dict) or not isinstance(user, dict):
            raise TypeError("a cluster or user entry is not a mapping")
    except yaml.MarkedYAMLError as exc:  # its text quotes the offending line, which may be a `token:`
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise _bad_kubeconfig(f"not valid YAML{where}: {one_line(str(exc.problem or exc.context), 120)}") from None
    except (yaml.YAMLError, RecursionError):
        raise _bad_kubeconfig("not valid YAML") from None
    except (KeyError, TypeError, StopIteration, AttributeError, ValueError) as exc:
        raise _bad_kubeconfig(f"{type(exc).__name__}: {one_line(redact(str(exc)), 120)}") from None
    try:
        url = urllib.parse.urlsplit(server)
        url.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise _bad_kubeconfig(f"cluster server {one_line(server, 80)!r}: {exc}") from None
    if url.scheme not in ("https", "http") or not url.hostname:
        raise _bad_kubeconfig(f"cluster server {one_line(server, 80)!r} is not an https:// URL")
    context_ = ssl.create_default_context()
    try:
        if cluster.get("insecure-skip-tls-verify") is True:
            context_.check_hostname = False
            context_.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            pem = base64.b64decode(str(cluster["certificate-authority-data"]), validate=True).decode()
            context_.load_verify_locations(cadata=pem)
        elif cluster.get("certificate-authority"):
            context_.load_verify_locations(cafile=str(cluster["certificate-authority"]))
    except (binascii.Error, UnicodeDecodeError):
        raise _bad_kubeconfig("certificate-authority-data is not base64 of a PEM certificate") from None
    except FileNotFoundError:
        raise _bad_kubeconfig(
            f"certificate-authority file {cluster.get('certificate-authority')} does not exist"
        ) from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise _bad_kubeconfig(
            f"the cluster's certificate authority is not a usable certificate ({one_line(str(exc), 120)})"
        ) from None
    token = user.get("token")
    if token is not None and not isinstance(token, str):
        raise _bad_kubeconfig("the user's token is not a string")
    if token is None and user.get("exec"):
        if not isinstance(user["exec"], dict):
            raise _bad_kubeconfig("the user's exec is not a mapping")
        token = _exec_token(user["exec"], timeout)
    return Credentials(server=server, ssl_context=context_, token=token)


def kubeconfig_from_stack(stack: str, timeout: float) -> str:
    """`pulumi stack output kubeconfig --show-secrets` of `stack` (needs the Pulumi CLI and backend login)."""
    command = ["pulumi", "stack", "output", "kubeconfig", "--show-secrets", "--stack", stack]
    try:
        result = run_process(command, timeout)
    except FileNotFoundError:
        raise ToolError(Exit.USAGE, "no --kubeconfig given and no `pulumi` CLI to read the stack's output") from None
    except subprocess.TimeoutExpired:
        raise ToolError(Exit.UNVERIFIED, f"`{' '.join(command)}` did not answer in {timeout:.0f}s") from None
    if result.returncode != 0:
        raise ToolError(Exit.UNVERIFIED, f"`{' '.join(command)}` failed: {one_line(result.stderr)}")
    text = result.stdout.strip()
    try:  # the output is a JSON string or an object, depending on how pulumi-eks exported it
        value = json.loads(text)
        return value if isinstance(value, str) else json.dumps(value)
    except ValueError:
        return text


class KubeClient:
    def __init__(self, credentials: Credentials, deadline: Deadline, max_bytes: Optional[int] = None):
        self.credentials = credentials
        self.deadline = deadline
        self.max_bytes = MAX_RESPONSE_BYTES if max_bytes is None else max_bytes

    def _request(
        self,
        method: str,
        path: str,
        body: Optional[bytes] = None,
        accept: str = "application/json",
        cap: float = MAX_REQUEST_SECONDS,
    ) -> bytes:
        url = self.credentials.server + path
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.credentials.token:
            headers["Authorization"] = f"Bearer {self.credentials.token}"
        timeout = self.deadline.request_timeout(cap)  # this request's whole exchange, inside the run's
        try:
            reply = http_request(
                method,
                url,
                timeout=timeout,
                max_bytes=self.max_bytes,
                body=body,
                headers=headers,
                ssl_context=self.credentials.ssl_context,
            )
        except ReplyTooLarge as exc:
            raise BadReply(f"{path}: {exc}") from None
        except HttpTimeout:
            raise Unreachable(f"{path}: the reply did not arrive in time (timed out)") from None
        except (OSError, ValueError) as exc:  # refused, reset, TLS, DNS; BadHttpReply: not HTTP at all
            raise Unreachable(f"{self.credentials.server}: {one_line(str(exc))}") from None
        if not 200 <= reply.status < 300:
            raise HttpError(reply.status, path, reply.body[: 64 * 1024].decode(errors="replace"))
        return reply.body

    def get_json(self, path: str, **query: str) -> Any:
        return _json(self._request("GET", _with_query(path, query)), path)

    def get_object(self, path: str, **query: str) -> dict[str, Any]:
        """A JSON object (a Kubernetes object or List); anything else is a BadReply."""
        value = self.get_json(path, **query)
        if not isinstance(value, dict):
            raise BadReply(f"{path}: a JSON {type(value).__name__} where the API returns an object")
        return value

    def get_items(self, path: str, **query: str) -> list[dict[str, Any]]:
        """The `items` of a List reply, each an object; anything else is a BadReply."""
        items = self.get_object(path, **query).get("items")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise BadReply(f"{path}: `items` is not a list of objects")
        return items

    def get_text(self, path: str, **query: str) -> str:
        return self._request("GET", _with_query(path, query), accept="*/*").decode(errors="replace")

    def post_json(self, path: str, payload: Any, cap: float = MAX_REQUEST_SECONDS) -> Any:
        return _json(self._request("POST", path, json.dumps(payload).encode(), cap=cap), path)

    def exec_output(
        self, namespace: str, pod: str, container: str, command: list[str], cap: float = MAX_REQUEST_SECONDS
    ) -> str:
        """`kubectl exec`'s stdout: the pod exec API over a WebSocket (subprotocol v4.channel.k8s.io).

        The protocol (kubernetes staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go,
        StreamProtocolV4Name; k8s.io/apiserver/pkg/util/wsstream/conn.go): GET
        `/api/v1/namespaces/{ns}/pods/{pod}/exec?command=...&container=...&stdout=true&stderr=true` with a
        WebSocket upgrade (RFC 6455); every binary message starts with its channel byte (1 stdout,
        2 stderr, 3 error: a v1 Status, `Success` or `Failure` with the exit code in `details.causes`).
        A non-zero exit or any Failure status raises HttpError; a reply larger than the cap, BadReply.
        """
        query = urllib.parse.urlencode(
            [("command", c) for c in command] + [("container", container), ("stdout", "true"), ("stderr", "true")]
        )
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/exec?{query}"
        timeout = self.deadline.request_timeout(cap)
        end = time.monotonic() + timeout
        try:
            return _websocket_exec(self.credentials, path, end, self.max_bytes)
        except (BadReply, Unreachable, HttpError):
            raise
        except (OSError, ValueError, struct.error) as exc:
            raise Unreachable(f"{self.credentials.server}: exec in {pod}: {one_line(str(exc))}") from None

    @staticmethod
    def service_proxy(namespace: str, service: str, port: str, path: str) -> str:
        """The API server's proxy path to `path` on a Service's named port."""
        return f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/{path.lstrip('/')}"


def _json(body: bytes, path: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise BadReply(f"{path}: the reply is not JSON ({one_line(repr(body[:60]), 80)})") from None


# RFC 6455 section 1.3: the GUID a server appends to Sec-WebSocket-Key before hashing it.
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
EXEC_PROTOCOL = "v4.channel.k8s.io"
STDOUT_CHANNEL, STDERR_CHANNEL, ERROR_CHANNEL = 1, 2, 3


def websocket_accept(key: str) -> str:
    """Sec-WebSocket-Accept for `key` (RFC 6455 section 4.2.2, step 5.4)."""
    return base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest()).decode()


def _websocket_exec(credentials: Credentials, path: str, end: float, max_bytes: int) -> str:
    url = urllib.parse.urlsplit(credentials.server)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    left = max(0.01, end - time.monotonic())
    raw = socket.create_connection((host, port), timeout=left)
    sock: socket.socket = (
        credentials.ssl_context.wrap_socket(raw, server_hostname=host) if url.scheme == "https" else raw
    )
    with sock:
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {url.path.rstrip('/')}{path} HTTP/1.1",
            f"Host: {url.netloc}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            f"Sec-WebSocket-Protocol: {EXEC_PROTOCOL}",
        ]
        if credentials.token:
            lines.append(f"Authorization: Bearer {credentials.token}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        reader = _Reader(sock, end, max_bytes)
        head = reader.until(b"\r\n\r\n", 64 * 1024).decode("latin-1")
        status_line, *header_lines = head.split("\r\n")
        parts = status_line.split(" ", 2)
        code = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
        if code != 101:
            length = headers.get("content-length", "0")
            body = reader.exactly(min(int(length) if length.isdigit() else 0, 64 * 1024))
            raise HttpError(code, path.split("?")[0], body.decode(errors="replace"))
        if headers.get("sec-websocket-accept") != websocket_accept(key):
            raise BadReply(f"{path.split('?')[0]}: the WebSocket handshake's accept key is wrong")
        out: list[bytes] = []
        error = b""
        while True:
            opcode, payload = reader.frame()
            if opcode == 8:  # close
                break
            if opcode in (1, 2) and payload:
                channel, data = payload[0], payload[1:]
                if channel == STDOUT_CHANNEL:
                    out.append(data)
                elif channel == ERROR_CHANNEL:
                    error += data
        if error:
            _raise_exec_status(error, path.split("?")[0])
        return b"".join(out).decode(errors="replace")


def _raise_exec_status(error: bytes, path: str) -> None:
    try:
        status = json.loads(error)
    except ValueError:
        raise BadReply(f"{path}: the exec error channel is not a Status object") from None
    if not isinstance(status, dict):
        raise BadReply(f"{path}: the exec error channel is not a Status object")
    if status.get("status") == "Success":
        return
    causes = (status.get("details") or {}).get("causes") or []
    exit_code = next((c.get("message") for c in causes if isinstance(c, dict) and c.get("reason") == "ExitCode"), "")
    raise HttpError(
        500,
        path,
        f"command failed{' with exit code ' + str(exit_code) if exit_code else ''}: {status.get('message', '')}",
    )


class _Reader:
    """Bounded, deadline-bound reads from a socket (the WebSocket half of exec)."""

    def __init__(self, sock: socket.socket, end: float, max_bytes: int):
        self.sock, self.end, self.max_bytes, self.buffer, self.total = sock, end, max_bytes, b"", 0

    def _more(self) -> None:
        left = self.end - time.monotonic()
        if left <= 0:
            raise Unreachable("exec: the reply did not arrive in time (timed out)")
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(READ_CHUNK)
        except TimeoutError:
            raise Unreachable("exec: the reply did not arrive in time (timed out)") from None
        if not chunk:
            raise BadReply("exec: the connection closed mid-reply")
        self.total += len(chunk)
        if self.total > self.max_bytes:
            raise BadReply(f"exec: the reply is larger than the {self.max_bytes} bytes verify reads")
        self.buffer += chunk

    def exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self._more()
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def until(self, marker: bytes, limit: int) -> bytes:
        while marker not in self.buffer:
            if len(self.buffer) > limit:
                raise BadReply("exec: the reply's header is too long")
            self._more()
        data, _, self.buffer = self.buffer.partition(marker)
        return data

    def frame(self) -> tuple[int, bytes]:
        """One unmasked server frame (RFC 6455 section 5.2); fragments are joined."""
        payload = b""
        while True:
            first, second = self.exactly(2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self.exactly(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self.exactly(8))[0]
            if length > self.max_bytes:
                raise BadReply(f"exec: a frame of {length} bytes is larger than verify reads")
            mask = self.exactly(4) if second & 0x80 else b""
            data = self.exactly(length)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            payload += data
            if first & 0x80:  # FIN
                return opcode, payload


def _with_query(path: str, query: dict[str, str]) -> str:
    return f"{path}?{urllib.parse.urlencode(query)}" if query else path
