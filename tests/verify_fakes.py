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
import re
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

from llm_pd_eks.admission_cel import POLICY_NAME, VALIDATION_ACTIONS, namespace_selector_expressions, policy_cel
from llm_pd_eks.serving_names import NAMESPACE, RAY_SERVICE_NAME

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
TOKEN = "test-token"
NIXL_LOG_FORMAT = "%(asctime)s NIXL %(levelname)-7s %(filename)s:%(lineno)d %(message)s"  # nixl logging.py
START_SECONDS = 60.0  # bound on any fake or real server's start-up


def nixl_log_line(backend: str) -> str:
    """The line NIXL's agent logs on creating a backend (nixl _api.py `create_backend`), NIXL's format."""
    record = logging.LogRecord(
        "nixl._api", logging.INFO, "_api.py", 405, "Backend %s was instantiated", (backend,), None
    )
    return logging.Formatter(NIXL_LOG_FORMAT).format(record)


def admission_objects(instance_type: str, mode: str, exempt: tuple[str, ...] = ("kube-system",)) -> dict[str, Any]:
    """The GPU-pod policy and binding as the API server serves them (Cluster.admission), with an empty
    type-checking status (the server found nothing to warn about)."""
    cel = policy_cel(instance_type)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchExpressions": namespace_selector_expressions(list(exempt))},
            },
            "matchConditions": [{"name": c.name, "expression": c.expression} for c in cel.match_conditions],
            "variables": [{"name": v.name, "expression": v.expression} for v in cel.variables],
            "validations": [{"expression": r.expression, "message": r.message} for r in cel.validations],
        },
        "status": {"observedGeneration": 1, "typeChecking": {}},
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {"policyName": POLICY_NAME, "validationActions": list(VALIDATION_ACTIONS[mode])},
    }
    return {"validatingadmissionpolicies": [policy], "validatingadmissionpolicybindings": [binding]}


def gpu_worker_container(gpus: int = 8, efa: int = 4) -> dict[str, Any]:
    """The Ray container of a worker pod as the API server serves it: all GPUs and EFA devices of a
    p4d.24xlarge node, FI_PROVIDER=efa, IPC_LOCK (llm_pd_eks/ray_worker_pod.py)."""
    limits = {"nvidia.com/gpu": str(gpus), "vpc.amazonaws.com/efa": str(efa)}
    return {
        "name": "ray-worker",
        "resources": {"limits": limits, "requests": dict(limits)},
        "env": [{"name": "FI_PROVIDER", "value": "efa"}],
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
    }


def status_object(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def a_list(kind: str, items: list[dict[str, Any]], api_version: str = "v1") -> dict[str, Any]:
    return {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": items}


def matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class _QuietServer(ThreadingHTTPServer):
    """socketserver prints a traceback for every request whose client went away (verify giving up
    on a stalled or dripping reply is such a client, by design); those are expected, not errors."""

    errors: list[str]  # unexpected handler failures, kept for the test instead of printed to stderr

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            return
        # Printing would land in whichever test's captured stderr is current (the server threads outlive
        # the request that failed), so the traceback is recorded on the server instead.
        import traceback

        self.errors.append(f"{client_address}: {traceback.format_exc()}")


class _Server:
    """A ThreadingHTTPServer on 127.0.0.1:<free port> running in a daemon thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.httpd = _QuietServer(("127.0.0.1", 0), handler)
        self.httpd.errors = []
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
    pod_roots: dict[str, Path] = field(default_factory=dict)  # pod name -> its containers' /proc and /sys tree
    garbage: dict[str, bytes] = field(default_factory=dict)  # path -> raw 200 body served instead of the object
    drip: Optional[tuple[str, float]] = None  # (path, seconds between bytes): a body that trickles in
    # cluster-scoped admissionregistration.k8s.io/v1 objects by resource: validatingadmissionpolicies, ...bindings
    admission: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    other_pods: list[dict[str, Any]] = field(default_factory=list)  # pods outside the serving namespace


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
        if url.path in cluster.garbage:
            self.reply(200, cluster.garbage[url.path])
        elif cluster.drip is not None and url.path == cluster.drip[0]:
            self._drip(cluster.drip[1])
        elif parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 7 and parts[6] == "exec":
            self._exec(cluster, parts[5], parse_qs(url.query))
        elif "proxy" in parts and parts[:2] == ["api", "v1"] and parts[4] == "services":
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
        elif url.path == "/api/v1/pods":  # every namespace
            self.reply(200, a_list("PodList", cluster.pods + cluster.other_pods))
        elif len(parts) == 5 and parts[:3] == ["apis", "admissionregistration.k8s.io", "v1"]:
            found = [o for o in cluster.admission.get(parts[3], []) if o["metadata"]["name"] == parts[4]]
            if found:
                self.reply(200, found[0])
            else:
                self.reply(404, status_object(404, "NotFound", f'{parts[3]} "{parts[4]}" not found'))
        elif url.path == f"/api/v1/namespaces/{NAMESPACE}/services":
            services = [{"metadata": {"name": s, "namespace": NAMESPACE}, "spec": {}} for s in cluster.services]
            self.reply(200, a_list("ServiceList", services))
        else:
            self.reply(404, status_object(404, "NotFound", "the server could not find the requested resource"))

    def _drip(self, every: float) -> None:
        """A valid NodeList, one byte at a time (bounded: the body is short, the writer stops on a closed socket)."""
        data = json.dumps(a_list("NodeList", [])).encode() + b" " * 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            for i in range(len(data)):
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                time.sleep(every)
        except OSError:
            pass

    def _exec(self, cluster: Cluster, pod: str, query: dict[str, list[str]]) -> None:
        """The pod exec API over a WebSocket (RFC 6455 server side; v4.channel.k8s.io framing: a channel
        byte, then data; channel 3 carries a v1 Status). The command runs in a real /bin/sh over the
        pod's fake /proc and /sys tree (the probe's absolute paths are re-rooted there)."""
        import base64
        import hashlib

        root = cluster.pod_roots.get(pod)
        if root is None:
            self.reply(404, status_object(404, "NotFound", f'pods "{pod}" not found'))
            return
        key = self.headers.get("Sec-WebSocket-Key", "")
        if self.headers.get("Upgrade", "").lower() != "websocket" or "v4.channel.k8s.io" not in self.headers.get(
            "Sec-WebSocket-Protocol", ""
        ):
            self.reply(400, status_object(400, "BadRequest", "Upgrade request required"))
            return
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        command = query.get("command", [])
        script = command[2] if command[:2] == ["sh", "-c"] and len(command) == 3 else ""
        for real in ("/proc/", "/sys/class/infiniband/"):
            script = script.replace(real, f"{root}{real}")
        done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, timeout=60)
        for channel, data in ((1, done.stdout), (2, done.stderr)):
            if data:
                self._frame(2, bytes([channel]) + data)
        if done.returncode == 0:
            status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        else:
            status = {
                "metadata": {},
                "status": "Failure",
                "reason": "NonZeroExitCode",
                "message": f"command terminated with non-zero exit code: exit status {done.returncode}",
                "details": {"causes": [{"reason": "ExitCode", "message": str(done.returncode)}]},
            }
        self._frame(2, bytes([3]) + json.dumps(status).encode())
        self._frame(8, b"\x03\xe8")  # close, 1000 normal
        self.close_connection = True

    def _frame(self, opcode: int, payload: bytes) -> None:
        import struct

        head = bytes([0x80 | opcode])
        if len(payload) < 126:
            head += bytes([len(payload)])
        elif len(payload) < 2**16:
            head += bytes([126]) + struct.pack(">H", len(payload))
        else:
            head += bytes([127]) + struct.pack(">Q", len(payload))
        self.wfile.write(head + payload)
        self.wfile.flush()

    def _proxy(self, method: str, cluster: Cluster, parts: list[str], query: str) -> None:
        namespace, (service, _, port) = parts[3], parts[5].partition(":")
        base = cluster.upstreams.get((namespace, service, port))
        if base is None:
            self.reply(503, status_object(503, "ServiceUnavailable", f'no endpoints available for service "{service}"'))
            return
        rest = "/".join(parts[parts.index("proxy") + 1 :])
        target = f"{base}/{rest}" + (f"?{query}" if query else "")
        data = self.body() if method == "POST" else None
        request = urllib.request.Request(
            target, data=data, method=method, headers={"Content-Type": self.headers.get("Content-Type", "")}
        )
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


# --- a worker pod's /proc and /sys, as the probe reads them -----------------------------------------


EFA_COUNTER_NAMES = ("tx_bytes", "rx_bytes", "rdma_read_bytes", "rdma_read_resp_bytes", "rdma_write_bytes")


@dataclass
class PodTree:
    """One pod's processes and EFA devices as files: /proc/<pid>/{cmdline,environ,maps} and
    /sys/class/infiniband/<dev>/ports/1/hw_counters/<name> (the EFA driver's port counters)."""

    root: Path
    devices: tuple[str, ...] = ("rdmap16s27", "rdmap32s27")

    def process(self, pid: int, argv: list[str], env: dict[str, str], libraries: list[str]) -> None:
        proc = self.root / "proc" / str(pid)
        proc.mkdir(parents=True)
        (proc / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (proc / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
        lines = [
            f"7f00{i:08x}000-7f00{i:08x}fff r-xp 00000000 103:01 {4000 + i} {lib}" for i, lib in enumerate(libraries)
        ]
        (proc / "maps").write_text("\n".join(lines) + "\n")

    def counters(self, values: dict[str, int]) -> None:
        for device in self.devices:
            counters = self.root / "sys" / "class" / "infiniband" / device / "ports" / "1" / "hw_counters"
            counters.mkdir(parents=True, exist_ok=True)
            for name in EFA_COUNTER_NAMES:
                (counters / name).write_text(f"{values.get(name, 0)}\n")

    def add_bytes(self, amount: int) -> None:
        """Traffic over every device: each byte counter grows by `amount`."""
        for path in (self.root / "sys").rglob("hw_counters/*_bytes"):
            path.write_text(f"{int(path.read_text()) + amount}\n")


def kubeconfig_text(server: str, token: str = TOKEN) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": server}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "users": [{"name": "test", "user": {"token": token}}],
        }
    )


# --- the OpenAI endpoint and the Ray dashboard -----------------------------------------------------


class OpenAiHandler(_Handler):
    def do_POST(self) -> None:
        request = json.loads(self.body())
        if self.path != "/v1/chat/completions" or not request.get("messages"):
            self.reply(404, {"error": {"message": "not found"}})
            return
        if self.owner.fail_status:
            error = {
                "object": "error",
                "message": "engine dead",
                "type": "InternalServerError",
                "code": self.owner.fail_status,
            }
            self.reply(self.owner.fail_status, error)
            return
        prompt = request["messages"][-1]["content"]
        prompt_tokens = len(prompt.split())
        self.owner.on_request(prompt_tokens)
        self.reply(
            200,
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "length",
                        "message": {"role": "assistant", "content": self.owner.answer(prompt)},
                    }
                ],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 16, "total_tokens": prompt_tokens + 16},
            },
        )


PLANTED = re.compile(r"the code word for vault (\d+) is ([\w-]+)\.")
ASKED = re.compile(r"What is the code word for vault (\d+)\?")


def reading_model(prompt: str) -> str:
    """A model that reads its whole prompt: the code word planted for the vault asked about (the
    traffic gate's canaries), else a summary."""
    planted = dict(PLANTED.findall(prompt))
    asked = ASKED.search(prompt)
    if asked and asked[1] in planted:
        return planted[asked[1]]
    return "The text describes prefill and decode."


class FakeOpenAi(_Server):
    def __init__(
        self, on_request: Callable[[int], None], fail_status: int = 0, answer: Callable[[str], str] = reading_model
    ):
        self.on_request = on_request
        self.fail_status = fail_status  # answer every request with this HTTP status
        self.answer = answer  # prompt -> the assistant's text
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
        self.process = subprocess.Popen(
            [PYTHON, str(HERE / "ray_exporter.py")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )

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
            "scrape_configs": [
                {
                    "job_name": "ray",
                    "static_configs": [{"targets": [target], "labels": labels} for target, labels in targets],
                }
            ],
        }
        if rule_file is not None:
            config["rule_files"] = [str(rule_file)]
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = open(workdir / "prometheus.log", "w")
        self.process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
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

    def wait_for(self, expr: str, seconds: float = 90.0) -> list[dict[str, Any]]:
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
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = workdir / "apiserver.crt", workdir / "apiserver.key"
    cert_path.write_bytes(pem)
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
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
