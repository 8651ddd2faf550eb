"""verify's kubeconfig credentials (the `kubernetes` package's loader, the exec plugin under the run's
deadline) and the pod exec stream (verify/pod_exec.py: the package's WebSocket client under verify's
deadline and byte cap), against a loopback WebSocket server."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from helpers import QuietHTTPServer
from kubernetes.client import Configuration

from llm_pd_eks_tools.core.cli import Exit, run
from llm_pd_eks_tools.ops.verify.cli import main
from llm_pd_eks_tools.ops.verify.kube import BadReply, Credentials, Deadline, HttpError, KubeClient, Unreachable


@pytest.fixture(autouse=True)
def verify_writes_under_tmp(tmp_path, monkeypatch):
    """verify.json goes to a temporary directory: tests never write into the checkout."""
    import llm_pd_eks_tools.ops.verify.cli

    monkeypatch.setattr(llm_pd_eks_tools.ops.verify.cli, "OUT_DIR", tmp_path / "build-verify")


def _exec_kubeconfig(script: str, *argv: str) -> str:
    import sys

    import yaml

    return yaml.safe_dump(
        {
            "current-context": "eks",
            "clusters": [
                {"name": "eks", "cluster": {"server": "https://example.invalid", "insecure-skip-tls-verify": True}}
            ],
            "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "aws"}}],
            "users": [
                {
                    "name": "aws",
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": sys.executable,
                            "args": ["-c", script, *argv],
                            "env": [{"name": "AWS_PROFILE", "value": "deploy"}],
                        }
                    },
                }
            ],
        }
    )


# An `aws eks get-token` stand-in: counts its runs in argv[1], prints token `tok-<run>-<AWS_PROFILE>`
# expiring at argv[2], in the apiVersion KUBERNETES_EXEC_INFO asks for.
CREDENTIAL_SCRIPT = """
import json, os, pathlib, sys
runs = pathlib.Path(sys.argv[1])
n = len(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text("x" * n)
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
status = {"token": f"tok-{n}-" + os.environ["AWS_PROFILE"], "expirationTimestamp": sys.argv[2]}
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}))
"""


def test_exec_credentials_are_run_like_kubectl_does(tmp_path):
    """pulumi-eks kubeconfigs authenticate with `aws eks get-token`: an ExecCredential on stdout, given
    KUBERNETES_EXEC_INFO and the entry's env; a token still valid is not asked for again."""
    from llm_pd_eks_tools.ops.verify.kube import load_kubeconfig

    runs = tmp_path / "runs"
    credentials = load_kubeconfig(_exec_kubeconfig(CREDENTIAL_SCRIPT, str(runs), "2999-01-01T00:00:00Z"))
    assert credentials.authorization() == "Bearer tok-1-deploy"
    assert credentials.authorization() == "Bearer tok-1-deploy"
    assert runs.read_text() == "x"


def test_an_expired_exec_token_is_asked_for_again(tmp_path):
    """The library's refresh hook re-runs the plugin once `expirationTimestamp` has passed (EKS tokens
    live 15 minutes; a long verify or calibrate outlives one), each request with the fresh token."""
    from llm_pd_eks_tools.ops.verify.kube import load_kubeconfig

    runs = tmp_path / "runs"
    credentials = load_kubeconfig(_exec_kubeconfig(CREDENTIAL_SCRIPT, str(runs), "2020-01-01T00:00:00Z"))
    assert runs.read_text() == "x"
    assert credentials.authorization() == "Bearer tok-2-deploy"
    assert credentials.authorization() == "Bearer tok-3-deploy"


def test_a_failed_re_run_makes_the_request_unreachable_naming_the_command(tmp_path):
    """The token expired and `aws eks get-token` now fails (the role's session ended): the check that
    asked is UNVERIFIED with the command's own words, and no request goes out without a token."""
    from llm_pd_eks_tools.ops.verify.kube import Deadline, KubeClient, Unreachable, load_kubeconfig

    runs = tmp_path / "runs"
    script = CREDENTIAL_SCRIPT.replace(
        "runs.write_text", "n > 1 and sys.exit('ExpiredToken: session ended')\nruns.write_text"
    )
    client = KubeClient(load_kubeconfig(_exec_kubeconfig(script, str(runs), "2020-01-01T00:00:00Z")), Deadline(10))
    with pytest.raises(Unreachable, match=r"credential command '.*python.*' exited 1: ExpiredToken: session ended"):
        client.get_json("/version")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")  # a killed grandchild may wait, a zombie, for its reaper


def test_a_hung_credential_command_is_killed_at_the_deadline(tmp_path, capsys):
    """A credential command that never answers (a login prompt, a metadata endpoint that hangs) ends
    when verify's time is up: the command and its children are killed, one line names it."""
    import os
    import time

    import yaml

    pids = tmp_path / "pids"
    hung = tmp_path / "aws-hung"
    hung.write_text(f"#!/bin/sh\nsleep 300 &\necho $$ $! > {pids}\nwait\n")
    hung.chmod(0o755)
    config = yaml.safe_load(_exec_kubeconfig(""))
    config["users"][0]["user"]["exec"].update(command=str(hung), args=["eks", "get-token"])
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    started = time.monotonic()
    code = run("verify", main, ["--stack", "dev", "--kubeconfig", str(kubeconfig), "--timeout", "2"])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == Exit.UNVERIFIED and elapsed < 30, (code, elapsed)
    assert err.count("\n") == 1 and f"credential command {str(hung)!r} did not answer in 2s" in err, err
    shell, sleeper = (int(pid) for pid in pids.read_text().split())
    for _ in range(50):
        if not (_alive(shell) or _alive(sleeper)):
            break
        time.sleep(0.1)
    assert not _alive(shell) and not _alive(sleeper)
    assert os.getpid() not in (shell, sleeper)


def test_a_failing_credential_command_is_unverified_not_a_crash():
    from llm_pd_eks_tools.core.cli import ToolError
    from llm_pd_eks_tools.ops.verify.kube import load_kubeconfig

    with pytest.raises(ToolError) as info:
        load_kubeconfig(_exec_kubeconfig("import sys; sys.exit('ExpiredToken: the security token has expired')"))
    assert info.value.exit_code == Exit.UNVERIFIED and "exited 1: ExpiredToken" in str(info.value)


# --- the pod exec stream, against a loopback server speaking v4.channel.k8s.io ------------------------


class ExecHandler(BaseHTTPRequestHandler):
    """Answers the exec upgrade (RFC 6455 server side) with the frames of `server.frames`, then closes;
    with `server.hang`, upgrades and then sends nothing."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.server.status:  # type: ignore[attr-defined]
            body = json.dumps({"kind": "Status", "code": self.server.status}).encode()  # type: ignore[attr-defined]
            self.send_response(self.server.status)  # type: ignore[attr-defined]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        if self.server.hang:  # type: ignore[attr-defined]
            self.server.release.wait(30)  # type: ignore[attr-defined]
            return
        for opcode, payload in self.server.frames:  # type: ignore[attr-defined]
            self.wfile.write(frame(opcode, payload))
        self.wfile.flush()
        self.close_connection = True


def frame(opcode: int, payload: bytes) -> bytes:
    head = bytes([0x80 | opcode])
    if len(payload) < 126:
        head += bytes([len(payload)])
    elif len(payload) < 2**16:
        head += bytes([126]) + struct.pack(">H", len(payload))
    else:
        head += bytes([127]) + struct.pack(">Q", len(payload))
    return head + payload


@pytest.fixture
def exec_server():
    server = QuietHTTPServer(("127.0.0.1", 0), ExecHandler)
    server.frames, server.hang, server.status, server.release = [], False, 0, threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def exec_client(server: QuietHTTPServer, seconds: float = 20.0, max_bytes: int = 4096) -> KubeClient:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return KubeClient(Credentials(url, None, Configuration(host=url)), Deadline(seconds), max_bytes=max_bytes)


SUCCESS = b"\x03" + json.dumps({"status": "Success"}).encode()


def test_exec_returns_stdout_and_keeps_stderr_and_the_status_apart(exec_server):
    exec_server.frames = [(2, b"\x01hello "), (2, b"\x02a warning"), (2, b"\x01world"), (2, SUCCESS), (8, b"\x03\xe8")]
    assert exec_client(exec_server).exec_output("llm", "pod", "ray", ["sh", "-c", "true"]) == "hello world"


def test_a_non_zero_exit_is_an_http_error_naming_the_code(exec_server):
    failure = {
        "status": "Failure",
        "message": "exit status 3",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
    }
    exec_server.frames = [(2, b"\x03" + json.dumps(failure).encode()), (8, b"")]
    with pytest.raises(HttpError, match="exit code 3"):
        exec_client(exec_server).exec_output("llm", "pod", "ray", ["false"])


def test_a_reply_over_the_cap_is_refused(exec_server):
    exec_server.frames = [(2, b"\x01" + b"y" * 70_000), (2, SUCCESS), (8, b"")]
    with pytest.raises(BadReply, match="larger than the 65536 bytes"):
        exec_client(exec_server, max_bytes=65536).exec_output("llm", "pod", "ray", ["cat"])
    assert exec_client(exec_server, max_bytes=80_000).exec_output("llm", "pod", "ray", ["cat"]) == "y" * 70_000


def test_a_refused_upgrade_is_an_http_error_with_its_status(exec_server):
    exec_server.status = 404
    with pytest.raises(HttpError) as raised:
        exec_client(exec_server).exec_output("llm", "gone", "ray", ["true"])
    assert raised.value.status == 404


def test_a_stream_that_never_ends_is_unreachable_at_the_deadline(exec_server):
    """The server upgrades and then sends nothing: the exchange ends at the request's deadline."""
    exec_server.hang = True
    with pytest.raises(Unreachable, match="did not arrive in time"):
        exec_client(exec_server, seconds=1.0).exec_output("llm", "pod", "ray", ["sleep", "3600"])
