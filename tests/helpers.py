"""Helpers the tests share: type tokens, config variants, a copy of the checkout.

Imported as `from helpers import ...` (tests/ is on sys.path under pytest's default import mode).
The recorded stack runs are the session fixture `programs` (conftest.py), not a cache here.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llm_pd_eks.config import ConfigError, StackConfig, validate_stack_config  # noqa: E402
from llm_pd_eks_tools.core.stack import load_stack_config, stacks  # noqa: E402
from llm_pd_eks_tools.core.stackfile import PROJECT  # noqa: E402
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program  # noqa: E402

STACKS = stacks(ROOT)
DATA = Path(__file__).resolve().parent / "data"  # vendored reference data (each folder has a SOURCE)

# Pulumi type tokens the tests look for.
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"
# The directories the AL2023 EKS AMI moves onto the instance-store RAID0 that nodeadm's
# `localStorage: RAID0` builds (awslabs/amazon-eks-ami v20260724,
# templates/al2023/runtime/bin/setup-local-disks lines 95-110).
MOVED_TO_RAID0 = ("/var/lib/kubelet", "/var/lib/containerd", "/var/lib/soci-snapshotter-grpc", "/var/log/pods")


# -- stack config variants -------------------------------------------------------------------------
def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` merged in, nested objects key by key (lists and scalars replace)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def validate_values(
    values: dict[str, Any], region: Optional[str] = "us-west-2", secret_keys: Iterable[str] = ()
) -> StackConfig:
    """Validate project values as the engine hands them over (objects as JSON text)."""
    raw = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    return validate_stack_config(raw, region, secret_keys)


def config_problems(
    values: dict[str, Any], region: Optional[str] = "us-west-2", secret_keys: Iterable[str] = ()
) -> list[str]:
    """The problems `values` are refused with; the error lists each on its own line."""
    with pytest.raises(ConfigError) as info:
        validate_values(values, region, secret_keys)
    assert str(info.value).count("\n  - ") == len(info.value.problems)
    return info.value.problems


def engine_config_with(stack: str, section: str, **changes: Any) -> tuple[dict[str, str], list[str]]:
    """A checked-in stack's engine config (and secret keys) with keys of one section changed."""
    config, secret_keys = load_stack_config(stack)
    key = f"{PROJECT}:{section}"
    config[key] = json.dumps({**json.loads(config[key]), **changes})
    return config, secret_keys


def run_with(stack: str, **sections: dict) -> ProgramRun:
    """The program under mocks on a checked-in stack, keys of some sections changed (a missing section starts empty)."""
    config, secret_keys = load_stack_config(stack)
    for section, changes in sections.items():
        key = f"{PROJECT}:{section}"
        config[key] = json.dumps({**json.loads(config.get(key, "{}")), **changes})
    return run_program(stack, config, secret_keys)


# -- a copy of the checkout, for tests that change the program or run its CLIs ----------------------
_NOT_COPIED = shutil.ignore_patterns(
    ".venv", "build", ".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules", "tests"
)


def copy_checkout(dst: Path) -> Path:
    """The program, its tools and stack files (no virtualenv, caches, build output or tests) at `dst`."""
    shutil.copytree(ROOT, dst, ignore=_NOT_COPIED)
    return dst


# -- external binaries: Debian's `prometheus` (promtool, the server) and `prometheus-alertmanager` ---
def requires_binary(name: str) -> pytest.MarkDecorator:
    """Mark a test that runs `name` for real. `make test` installs the binaries first
    (scripts/test-binaries.sh); a test whose binary is still missing fails with one line saying what
    to install (tests/conftest.py), it is never skipped."""
    return pytest.mark.requires_binary(name)


# -- loopback fake servers -------------------------------------------------------------------------
class QuietHTTPServer(__import__("http.server").server.ThreadingHTTPServer):
    """A fake's ThreadingHTTPServer whose handler failures are kept on `errors`, not printed: its
    threads outlive the test that started them, and a print would land in whichever test's captured
    stderr is current (a client that hung up is expected, not an error)."""

    daemon_threads = True
    # socketserver listens with a backlog of 5: a client's burst of 16 connections on a loaded machine
    # overflowed it and was reset. A real server's backlog is far larger.
    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.errors: list[str] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        import traceback

        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            return
        self.errors.append(f"{client_address}: {traceback.format_exc()}")


RAYSERVICE_CRD = DATA / "kuberay" / "ray.io_rayservices.yaml"  # vendored: tests/data/kuberay/SOURCE


@functools.cache
def rayservice_schema() -> dict[str, Any]:
    """The RayService CRD's v1 openAPIV3Schema, read once a process (a 1 MB YAML file; libyaml's loader
    where PyYAML has it)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(RAYSERVICE_CRD.read_text(), Loader=loader)
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return v1["schema"]["openAPIV3Schema"]


@functools.cache
def rayservice_validator() -> Any:
    """What `jsonschema.validate(instance, rayservice_schema())` builds each call (the schema's own
    check, then its draft's validator), built once a process."""
    import jsonschema

    schema = rayservice_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


STANDINS = Path(__file__).resolve().parent / "ray_standins"


@contextlib.contextmanager
def ray_engine_standins() -> Iterator[None]:
    """Ray Serve LLM's modules import a few vLLM/SGLang names (tests/ray_standins/README.md): the
    stand-ins on the path for one module's tests, then gone, so later imports of vllm/sglang find the
    real thing or nothing."""
    sys.path.insert(0, str(STANDINS))
    try:
        yield
    finally:
        sys.path.remove(str(STANDINS))
        for name in [m for m in sys.modules if m.split(".")[0] in ("vllm", "sglang")]:
            del sys.modules[name]


@contextlib.contextmanager
def runtime_module_on_path() -> Iterator[Path]:
    """The runtime ConfigMap's files in a folder on sys.path, as the pods mount them
    (llm_pd_eks/serve_routing.py RUNTIME_MOUNT): `import_path` then imports them by the same name."""
    import tempfile

    from llm_pd_eks.serve_routing import RUNTIME_SOURCES, runtime_configmap_data

    with tempfile.TemporaryDirectory() as folder:
        for filename, source in runtime_configmap_data().items():
            Path(folder, filename).write_text(source)
        sys.path.insert(0, folder)
        try:
            yield Path(folder)
        finally:
            sys.path.remove(folder)
            for module in RUNTIME_SOURCES:
                sys.modules.pop(module, None)


def serve_build(application: dict[str, Any]) -> Any:
    """Ray Serve's own build of one `serveConfigV2` application, in this process and without a cluster.

    The steps the controller's build task takes (Ray 2.58.0 ray/serve/_private/application_state.py
    `build_serve_application`): import `import_path`, call the builder with `args`
    (`call_user_app_builder_with_args_if_necessary`, which validates them), `build_app`, one FastAPI
    ingress; then each deployment's config through the proto bytes the controller is handed
    (`DeploymentConfig.to_proto_bytes` / `from_proto_bytes`). What needs a running Ray is the build
    task's own runtime context: Ray Serve LLM's `LLMServer.get_deployment_options` reads
    `ray.get_runtime_context().runtime_env` (which would start a local Ray here), so the build sees
    the empty `RuntimeEnv` of an application with no `runtime_env`, as this project's are. Returns
    Ray's `BuiltApplication`, each deployment's `_deployment_config` replaced by its round-tripped copy."""
    from unittest import mock

    import ray
    from ray._common.utils import import_attr
    from ray.runtime_env import RuntimeEnv
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
    from ray.serve._private.build_app import build_app
    from ray.serve._private.config import DeploymentConfig

    class BuildTaskContext:  # what the build task's `ray.get_runtime_context()` answers
        @property
        def runtime_env(self) -> RuntimeEnv:
            return RuntimeEnv()

    with (
        ray_engine_standins(),
        runtime_module_on_path(),
        mock.patch.object(ray, "get_runtime_context", BuildTaskContext),
    ):
        builder = import_attr(application["import_path"])
        app = call_user_app_builder_with_args_if_necessary(builder, copy.deepcopy(application["args"]))
        built = build_app(app, name=application["name"], default_runtime_env=RuntimeEnv())
    built.validate_single_fastapi_ingress()
    for deployment in built.deployments:
        sent = DeploymentConfig.from_proto_bytes(deployment._deployment_config.to_proto_bytes())
        deployment._deployment_config = sent
    return built


def leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested dict by its dotted path (an empty dict is a leaf)."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return out or {prefix: {}}
    return {prefix: tree}


def changed_paths(before: Any, after: Any) -> set[str]:
    """The dotted paths whose leaf differs between two nested dicts (added and removed included)."""
    a, b = leaves(before), leaves(after)
    return {k for k in a.keys() | b.keys() if a.get(k, object()) != b.get(k, object())}


class FakeCompletions:
    """/v1/completions streaming `tokens` text chunks `gap_s` apart, then vLLM's usage chunk."""

    def __init__(self, tokens: int = 5, gap_s: float = 0.02) -> None:
        import http.server

        self.bodies: list[dict[str, Any]] = []
        self.active = self.most = 0
        lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    fake.bodies.append(body)
                    fake.active += 1
                    fake.most = max(fake.most, fake.active)
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for _ in range(tokens):
                        time.sleep(gap_s)
                        chunk = {"choices": [{"index": 0, "text": " tok"}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    usage = {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": tokens}
                    self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                finally:
                    with lock:
                        fake.active -= 1

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_async(coroutine: Any) -> Any:
    """Run on a loop of its own, leaving the thread's current loop alone (asyncio.run would unset it,
    and the Pulumi mock runs in this worker's later modules need one)."""
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def bindable(port: int) -> bool:
    """Whether a TCP socket can bind `port` on every interface now (as vLLM's port scan tries it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
            return True
        except OSError:
            return False


def free_port_window(size: int) -> range:
    """`size` consecutive ports free now, below Linux's ephemeral range (from 32768) so the kernel hands
    none of them out meanwhile: a stand-in for a port window a test holds and releases."""
    for start in range(24_000, 32_000, 64):
        window = range(start, start + size)
        if all(bindable(p) for p in window):
            return window
    raise AssertionError(f"no {size} consecutive free ports between 24000 and 32000")


# -- the tools as a user runs them ----------------------------------------------------------------
def tool(
    module: str, *args: str, env: Optional[dict[str, str]] = None, cwd: Path = ROOT
) -> "subprocess.CompletedProcess[str]":
    """`python -m <module> <args>` in a process of its own, as a shell runs a tool; its output captured."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


class TricklingServer:
    """Answers every request slowly: `headers` one header byte every 50 ms; `body` a whole header
    block promising a body that comes a byte at a time; `chunked` chunks of one byte each."""

    def __init__(self, mode: str = "headers", userinfo: str = "") -> None:
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=16)
        self.url = f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        head = {
            "headers": b"HTTP/1.1 200 OK\r\n",
            "body": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
            "chunked": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        }[self.mode]
        piece = b"1\r\n \r\n" if self.mode == "chunked" else b"X" if self.mode == "headers" else b" "
        with conn:
            try:
                conn.settimeout(5)
                conn.recv(65536)
                conn.sendall(head)
                end = time.monotonic() + 120  # bounded: the server gives up on its own
                while not self.stop.is_set() and time.monotonic() < end:
                    conn.sendall(piece)
                    self.stop.wait(0.05)
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
