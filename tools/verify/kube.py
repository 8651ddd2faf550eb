"""A minimal Kubernetes API client for `verify`: the kubeconfig's server, CA and credentials, plain HTTPS.

Why not the `kubernetes` PyPI client: verify needs GET/POST on a handful of paths (nodes, pods,
DaemonSets, one custom resource, the service proxy), and the EKS kubeconfig's exec credential
(`aws eks get-token`) is a documented, small protocol (client.authentication.k8s.io ExecCredential:
run the command, read `status.token`). Plain urllib keeps the tool dependency-free and every
timeout under our control, which the total deadline needs.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Optional

import yaml

from tools.cli import Exit, ToolError, one_line

MAX_REQUEST_SECONDS = 30.0


class Unreachable(Exception):
    """The API server (or a service behind its proxy) did not answer: nothing could be checked."""


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
    env.update({e["name"]: e["value"] for e in spec.get("env") or []})
    command = [spec["command"], *(spec.get("args") or [])]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
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


def load_kubeconfig(text: str, timeout: float = MAX_REQUEST_SECONDS) -> Credentials:
    """The current context's server, TLS trust and bearer token (static or from an exec plugin)."""
    try:
        config = yaml.safe_load(text) or {}
        current = config.get("current-context")
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        context = contexts[current] if current else next(iter(contexts.values()))
        clusters = {c["name"]: c["cluster"] for c in config.get("clusters") or []}
        users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
        cluster, user = clusters[context["cluster"]], users.get(context.get("user"), {})
        server = str(cluster["server"]).rstrip("/")
    except (yaml.YAMLError, KeyError, TypeError, StopIteration, AttributeError) as exc:
        raise ToolError(Exit.USAGE, f"not a usable kubeconfig ({type(exc).__name__}: {one_line(str(exc))})") from None
    context_ = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        context_.check_hostname = False
        context_.verify_mode = ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        context_.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif cluster.get("certificate-authority"):
        context_.load_verify_locations(cafile=cluster["certificate-authority"])
    token = user.get("token")
    if token is None and user.get("exec"):
        token = _exec_token(user["exec"], timeout)
    return Credentials(server=server, ssl_context=context_, token=token)


def kubeconfig_from_stack(stack: str, timeout: float) -> str:
    """`pulumi stack output kubeconfig --show-secrets` of `stack` (needs the Pulumi CLI and backend login)."""
    command = ["pulumi", "stack", "output", "kubeconfig", "--show-secrets", "--stack", stack]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
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
    def __init__(self, credentials: Credentials, deadline: Deadline):
        self.credentials = credentials
        self.deadline = deadline

    def _request(
        self, method: str, path: str, body: Optional[bytes] = None, accept: str = "application/json",
        cap: float = MAX_REQUEST_SECONDS,
    ) -> bytes:
        url = self.credentials.server + path
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.credentials.token:
            headers["Authorization"] = f"Bearer {self.credentials.token}"
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(
                request, timeout=self.deadline.request_timeout(cap), context=self.credentials.ssl_context
            ) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            raise HttpError(exc.code, path, exc.read().decode(errors="replace")) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(f"{self.credentials.server}: {one_line(str(reason))}") from None

    def get_json(self, path: str, **query: str) -> Any:
        return json.loads(self._request("GET", _with_query(path, query)))

    def get_text(self, path: str, **query: str) -> str:
        return self._request("GET", _with_query(path, query), accept="*/*").decode(errors="replace")

    def post_json(self, path: str, payload: Any, cap: float = MAX_REQUEST_SECONDS) -> Any:
        return json.loads(self._request("POST", path, json.dumps(payload).encode(), cap=cap))

    @staticmethod
    def service_proxy(namespace: str, service: str, port: str, path: str) -> str:
        """The API server's proxy path to `path` on a Service's named port."""
        return f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/{path.lstrip('/')}"


def _with_query(path: str, query: dict[str, str]) -> str:
    return f"{path}?{urllib.parse.urlencode(query)}" if query else path


