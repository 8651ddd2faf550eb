"""Parts for the verify tests: a fake Kubernetes API server, a fake OpenAI endpoint, a fake Ray
dashboard log API, Ray-rendered exporters and a real Prometheus, all on loopback.

- No kube-apiserver is installable from PyPI/Debian/npm here, so the API server is a small HTTP
  server answering the paths verify uses with objects in the Kubernetes API's shapes (List kinds,
  `metadata`/`spec`/`status`, a `Status` object on errors, bearer-token auth) and a service proxy
  (`/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/{path}`) that forwards to real upstreams.
- The Ray dashboard's log API replies with Ray's own `do_reply` (ray.dashboard.state_api_utils), and
  the NIXL log line is formatted with NIXL's own logging format (ai-dynamo/nixl src/api/python/logging.py).
- Prometheus is Debian's `prometheus` server, started and stopped by the fixture, scraping
  tests/ray_exporter.py processes (Ray's metrics code) with the labels the PodMonitor adds.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, urlsplit

import yaml

from components.ray_service import NAMESPACE, RAY_SERVICE_NAME

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
TOKEN = "test-token"
NIXL_LOG_FORMAT = "%(asctime)s NIXL %(levelname)-7s %(filename)s:%(lineno)d %(message)s"  # nixl logging.py
START_SECONDS = 60.0  # bound on any fake or real server's start-up


def nixl_log_line(backend: str) -> str:
    """The line NIXL's agent logs on creating a backend (nixl _api.py `create_backend`), NIXL's format."""
    record = logging.LogRecord("nixl._api", logging.INFO, "_api.py", 405, "Backend %s was instantiated",
                               (backend,), None)
    return logging.Formatter(NIXL_LOG_FORMAT).format(record)


def status_object(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def a_list(kind: str, items: list[dict[str, Any]], api_version: str = "v1") -> dict[str, Any]:
    return {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": items}


def matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class _Server:
    """A ThreadingHTTPServer on 127.0.0.1:<free port> running in a daemon thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    @property
    def owner(self) -> Any:
        return self.server.owner  # type: ignore[attr-defined]

    def reply(self, code: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (json.dumps(body) if not isinstance(body, str) else body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))


# --- the Kubernetes API ---------------------------------------------------------------------------


@dataclass
class Cluster:
    """The objects the fake API server serves, and the upstreams behind its service proxy."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    daemonsets: list[dict[str, Any]] = field(default_factory=list)
    ray_service: Optional[dict[str, Any]] = None
    pods: list[dict[str, Any]] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    upstreams: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (ns, svc, port) -> base URL
    stall_seconds: float = 0.0  # answer every request this late (an API server under water)


class KubeHandler(_Handler):
    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {TOKEN}":
            return True
        self.reply(401, status_object(401, "Unauthorized", "Unauthorized"))
        return False

    def do_GET(self) -> None:
        if self._authorized():
            self._route("GET")

    def do_POST(self) -> None:
        if self._authorized():
            self._route("POST")

    def _route(self, method: str) -> None:
        cluster: Cluster = self.owner.cluster
        time.sleep(cluster.stall_seconds)
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        selector = query.get("labelSelector", "")
        if "proxy" in parts and parts[:2] == ["api", "v1"] and parts[4] == "services":
            self._proxy(method, cluster, parts, url.query)
        elif url.path == "/version":
            self.reply(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.4-eks-fake", "platform": "linux/amd64"})
        elif url.path == "/api/v1/nodes":
            nodes = [n for n in cluster.nodes if matches(n["metadata"].get("labels", {}), selector)]
            self.reply(200, a_list("NodeList", nodes))
        elif url.path == "/apis/apps/v1/namespaces/kube-system/daemonsets":
            self.reply(200, a_list("DaemonSetList", cluster.daemonsets, "apps/v1"))
        elif url.path == f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayservices/{RAY_SERVICE_NAME}":
            if cluster.ray_service is None:
                self.reply(404, status_object(404, "NotFound", f'rayservices.ray.io "{RAY_SERVICE_NAME}" not found'))
            else:
                self.reply(200, cluster.ray_service)
        elif url.path == f"/api/v1/namespaces/{NAMESPACE}/pods":
            pods = [p for p in cluster.pods if matches(p["metadata"].get("labels", {}), selector)]
            self.reply(200, a_list("PodList", pods))
        elif url.path == f"/api/v1/namespaces/{NAMESPACE}/services":
            services = [{"metadata": {"name": s, "namespace": NAMESPACE}, "spec": {}} for s in cluster.services]
            self.reply(200, a_list("ServiceList", services))
        else:
            self.reply(404, status_object(404, "NotFound", "the server could not find the requested resource"))

    def _proxy(self, method: str, cluster: Cluster, parts: list[str], query: str) -> None:
        namespace, (service, _, port) = parts[3], parts[5].partition(":")
        base = cluster.upstreams.get((namespace, service, port))
        if base is None:
            self.reply(503, status_object(503, "ServiceUnavailable", f'no endpoints available for service "{service}"'))
            return
        rest = "/".join(parts[parts.index("proxy") + 1:])
        target = f"{base}/{rest}" + (f"?{query}" if query else "")
        data = self.body() if method == "POST" else None
        request = urllib.request.Request(target, data=data, method=method,
                                         headers={"Content-Type": self.headers.get("Content-Type", "")})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                self.reply(response.status, response.read(), response.headers.get("Content-Type", "text/plain"))
        except urllib.error.HTTPError as exc:
            self.reply(exc.code, exc.read(), exc.headers.get("Content-Type", "text/plain"))
        except OSError as exc:
            self.reply(503, status_object(503, "ServiceUnavailable", f"error trying to reach service: {exc}"))


class FakeKubeApi(_Server):
    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        super().__init__(KubeHandler)

    def kubeconfig(self, token: str = TOKEN) -> str:
        return kubeconfig_text(self.url, token)


def kubeconfig_text(server: str, token: str = TOKEN) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "users": [{"name": "test", "user": {"token": token}}],
    })


# --- the OpenAI endpoint and the Ray dashboard -----------------------------------------------------


class OpenAiHandler(_Handler):
    def do_POST(self) -> None:
        request = json.loads(self.body())
        if self.path != "/v1/chat/completions" or not request.get("messages"):
            self.reply(404, {"error": {"message": "not found"}})
            return
        if self.owner.fail_status:
            error = {"object": "error", "message": "engine dead", "type": "InternalServerError",
                     "code": self.owner.fail_status}
            self.reply(self.owner.fail_status, error)
            return
        prompt_tokens = len(request["messages"][-1]["content"].split())
        self.owner.on_request(prompt_tokens)
        self.reply(200, {
            "id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": request["model"],
            "choices": [{"index": 0, "finish_reason": "length",
                         "message": {"role": "assistant", "content": "The text describes prefill and decode."}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 16, "total_tokens": prompt_tokens + 16},
        })


class FakeOpenAi(_Server):
    def __init__(self, on_request: Callable[[int], None], fail_status: int = 0):
        self.on_request = on_request
        self.fail_status = fail_status  # answer every request with this HTTP status
        super().__init__(OpenAiHandler)


class DashboardHandler(_Handler):
    """Ray's state API log routes: `/api/v0/logs` (a listing) and `/api/v0/logs/file` (text)."""

    def do_GET(self) -> None:
        from ray.dashboard.state_api_utils import do_reply
        from ray.dashboard.utils import HTTPStatusCode

        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        logs: dict[str, str] = self.owner.logs.get(query.get("node_ip", ""), {})
        if url.path == "/api/v0/logs":
            self.reply(200, do_reply(HTTPStatusCode.OK, "", {"worker_out": sorted(logs)}).text)
        elif url.path == "/api/v0/logs/file" and query.get("filename") in logs:
            self.reply(200, logs[query["filename"]], "text/plain")
        else:
            self.reply(404, "not found", "text/plain")


class FakeRayDashboard(_Server):
    def __init__(self, logs: dict[str, dict[str, str]]):
        self.logs = logs  # node IP -> file name -> text
        super().__init__(DashboardHandler)


# --- exporters and Prometheus ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RayExporter:
    """tests/ray_exporter.py in a subprocess: one Ray node's /metrics, rendered by Ray's own code."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([PYTHON, str(HERE / "ray_exporter.py")], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)

    def wait(self) -> "RayExporter":
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # `ready <port>`; bounded by the test's own timeout
        if not line.startswith("ready"):
            raise RuntimeError(f"exporter did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def record(self, **event: Any) -> None:
        request = urllib.request.Request(f"http://{self.target}/record", data=json.dumps(event).encode(), method="POST")
        urllib.request.urlopen(request, timeout=10).close()

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


PROMETHEUS = shutil.which("prometheus")


class Prometheus:
    """Debian's Prometheus server on loopback, scraping `targets` every second with their labels."""

    def __init__(self, workdir: Path, targets: list[tuple[str, dict[str, str]]], rule_file: Optional[Path] = None):
        assert PROMETHEUS is not None
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "ray", "static_configs": [
                {"targets": [target], "labels": labels} for target, labels in targets
            ]}],
        }
        if rule_file is not None:
            config["rule_files"] = [str(rule_file)]
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = open(workdir / "prometheus.log", "w")
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> "Prometheus":
        end = time.monotonic() + START_SECONDS
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError("prometheus exited at start-up")
            try:
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).close()
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready within {START_SECONDS:.0f}s")

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def wait_for(self, expr: str, seconds: float = 30.0) -> list[dict[str, Any]]:
        """Poll `expr` until it returns samples (scrapes are asynchronous); bounded."""
        end = time.monotonic() + seconds
        while True:
            result = self.query(expr)
            if result or time.monotonic() > end:
                return result
            time.sleep(0.5)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.log.close()


# --- TLS, as EKS serves its API (certificate-authority-data in the kubeconfig) ---------------------


def self_signed(workdir: Path, host: str = "127.0.0.1") -> tuple[Path, Path, bytes]:
    """A CA-less self-signed server certificate for `host` (cryptography ships with moto)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = workdir / "apiserver.crt", workdir / "apiserver.key"
    cert_path.write_bytes(pem)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path, pem


class TlsKubeApi(FakeKubeApi):
    """The fake API server behind TLS; `kubeconfig()` carries its certificate as the CA."""

    def __init__(self, cluster: Cluster, workdir: Path):
        import ssl

        super().__init__(cluster)
        cert, key, self.pem = self_signed(workdir)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.httpd.server_address[1]}"

    def kubeconfig(self, token: str = TOKEN, ca: Optional[bytes] = None) -> str:
        import base64

        config = yaml.safe_load(kubeconfig_text(self.url, token))
        config["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(ca or self.pem).decode()
        return yaml.safe_dump(config)
