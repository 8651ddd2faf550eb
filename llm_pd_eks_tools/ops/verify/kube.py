"""The Kubernetes API client of `verify` (and `make calibrate`): the kubeconfig read by the official
`kubernetes` package, every request made by io_safety.

The package (verify/kubeconfig.py) reads the kubeconfig as kubectl does: the current context, TLS trust,
tokens, basic auth and `exec` credential plugins (`aws eks get-token`), re-running a plugin whose token
has expired; its exec stream runs a command in a pod (pod_exec.py, under the deadline and a byte cap).
Its generated REST client is not used: its timeouts bound each connect and each socket read, never a
whole exchange (a server trickling one byte at a time keeps it waiting), and it reads a reply whole,
however large. verify's total deadline needs both bounds, so every other request is an io_safety
`http_request`: one deadline over connecting, TLS, the headers and the body, and a byte cap.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Optional

import yaml
from kubernetes.client import Configuration

from llm_pd_eks_tools.core.cli import Exit, ToolError, one_line
from llm_pd_eks_tools.core.io_safety import (
    HttpTimeout,
    ReplyTooLarge,
    http_request,
    read_regular_file,
)
from llm_pd_eks_tools.core.process_safety import run_process

from . import kubeconfig, pod_exec
from .kubeconfig import bad_kubeconfig

MAX_REQUEST_SECONDS = 30.0
# Largest reply read from the API server (bytes). A NodeList of a few hundred nodes is a few MB; a Ray
# worker log tail a few more. Anything larger is refused unread rather than held in memory.
MAX_RESPONSE_BYTES = 32 * 2**20
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
    ssl_context: Optional[ssl.SSLContext]
    configuration: Optional[Configuration] = None  # the library's: the Authorization value and its refresh

    def authorization(self) -> Optional[str]:
        """The Authorization header (None: the kubeconfig's user has no credentials); an expired exec token
        is re-run first, a failure of that run is a ToolError."""
        if self.configuration is None:
            return None
        return kubeconfig.authorization(self.configuration)


def read_kubeconfig(path: str) -> str:
    """A kubeconfig file's text; a missing, non-regular (a FIFO), binary or oversized file is a usage error."""
    data = read_regular_file(path, MAX_KUBECONFIG_BYTES, "kubeconfig")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(Exit.USAGE, f"kubeconfig {path} is not UTF-8 text; is it the right file?") from None


def load_kubeconfig(text: str, deadline: Optional[Deadline] = None) -> Credentials:
    """The current context's server, TLS trust and credentials (verify/kubeconfig.py, the `kubernetes`
    package); an exec plugin runs within `deadline` (default: one request's time).

    Every defect of the file is a one-line usage error: not YAML (the line and column, never the line's
    text, which may be a `token:`), what the library names (a missing context, cluster, server or
    exec field, a missing CA file), CA or certificate data that is not base64 PEM, a server that is not
    an http(s) URL. A credential command that fails, hangs or prints no token is UNVERIFIED.
    """
    try:
        config = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:  # its text quotes the offending line, which may be a `token:`
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise bad_kubeconfig(f"not valid YAML{where}: {one_line(str(exc.problem or exc.context), 120)}") from None
    except (yaml.YAMLError, RecursionError):
        raise bad_kubeconfig("not valid YAML") from None
    if not isinstance(config, dict):
        what = "an empty file" if config is None else f"a YAML {type(config).__name__}"
        raise bad_kubeconfig(f"{what}, not a mapping with contexts, clusters and users")
    configuration, context = kubeconfig.load(config, (deadline or Deadline(MAX_REQUEST_SECONDS)).request_timeout)
    server = str(configuration.host).rstrip("/")
    try:
        url = urllib.parse.urlsplit(server)
        url.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise bad_kubeconfig(f"cluster server {one_line(server, 80)!r}: {exc}") from None
    if url.scheme not in ("https", "http") or not url.hostname:
        raise bad_kubeconfig(f"cluster server {one_line(server, 80)!r} is not an https:// URL")
    return Credentials(server=server, ssl_context=context, configuration=configuration)


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
        headers = {"Accept": accept, **self._authorization()}
        if body is not None:
            headers["Content-Type"] = "application/json"
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

    def _authorization(self) -> dict[str, str]:
        try:
            value = self.credentials.authorization()
        except ToolError as exc:  # an expired exec token whose re-run failed: no request can be made
            raise Unreachable(str(exc)) from None
        return {"Authorization": value} if value else {}

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
        """`kubectl exec`'s stdout: the pod exec API through the `kubernetes` client's stream (pod_exec.py),
        within this request's share of the deadline and under the byte cap. A non-zero exit or any
        Failure status raises HttpError; a reply larger than the cap, BadReply."""
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/exec"
        configuration = self.credentials.configuration or Configuration(host=self.credentials.server)
        try:
            out = pod_exec.exec_stdout(
                configuration,
                self.credentials.server,
                self._authorization().get("Authorization"),
                path,
                command,
                container,
                self.deadline.request_timeout(cap),
                self.max_bytes,
            )
        except TimeoutError as exc:
            raise Unreachable(str(exc)) from None
        except pod_exec.ExecFailed as exc:
            if exc.kind in ("large", "status-object"):
                raise BadReply(f"{path}: {exc}") from None
            if exc.kind == "status":
                raise HttpError(exc.status, path, str(exc)) from None
            if exc.kind == "command":
                raise HttpError(500, path, str(exc)) from None
            raise Unreachable(f"{self.credentials.server}: exec in {pod}: {exc}") from None
        return out.decode(errors="replace")

    @staticmethod
    def service_proxy(namespace: str, service: str, port: str, path: str) -> str:
        """The API server's proxy path to `path` on a Service's named port."""
        return f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/{path.lstrip('/')}"


def _json(body: bytes, path: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise BadReply(f"{path}: the reply is not JSON ({one_line(repr(body[:60]), 80)})") from None


def _with_query(path: str, query: dict[str, str]) -> str:
    return f"{path}?{urllib.parse.urlencode(query)}" if query else path
