"""verify's kubeconfig credentials (the `kubernetes` package's loader, the exec plugin under the run's
deadline) and the pod exec WebSocket's frame reader (verify/ws_frames.py)."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from llm_pd_eks_tools.core.cli import Exit, run
from llm_pd_eks_tools.ops.verify import ws_frames
from llm_pd_eks_tools.ops.verify.cli import main


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


def test_the_kubernetes_package_is_imported_only_to_read_a_kubeconfig():
    """Its generated API models cost ~0.2 s: `verify --help` and usage errors do not pay for them."""
    code = "import sys, llm_pd_eks_tools.ops.verify.cli; print('kubernetes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --- WebSocket frames (RFC 6455 section 5.2) ----------------------------------------------------------


def frame(opcode: int, payload: bytes, fin: bool = True, mask: bytes = b"") -> bytes:
    head = bytes([(0x80 if fin else 0) | opcode])
    bit = 0x80 if mask else 0
    if len(payload) < 126:
        head += bytes([bit | len(payload)])
    elif len(payload) < 2**16:
        head += bytes([bit | 126]) + struct.pack(">H", len(payload))
    else:
        head += bytes([bit | 127]) + struct.pack(">Q", len(payload))
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if mask else payload
    return head + mask + body


def test_exec_channels_join_stdout_and_keep_the_status_apart():
    status = b'{"status": "Success"}'
    stream = io.BytesIO(
        frame(2, b"\x01hello ", fin=False)
        + frame(0, b"world")  # a continuation of the fragmented message
        + frame(2, b"\x02a warning")  # stderr: not stdout
        + frame(2, b"\x01" + b"x" * 300)  # a 16-bit length
        + frame(2, b"\x03" + status, mask=b"\x01\x02\x03\x04")  # a masked frame is unmasked
        + frame(8, b"\x03\xe8")
    )
    out, error = ws_frames.exec_channels(ws_frames.FrameReader(stream, 4096))
    assert out == b"hello world" + b"x" * 300 and error == status


def test_a_stream_cut_short_or_over_the_cap_is_refused():
    with pytest.raises(ws_frames.FrameError, match="closed mid-reply"):
        ws_frames.exec_channels(ws_frames.FrameReader(io.BytesIO(frame(2, b"\x01abc")[:-1]), 4096))
    big = frame(2, b"\x01" + b"y" * 70_000) + frame(8, b"")  # a 64-bit length
    with pytest.raises(ws_frames.FrameError, match="larger than the 65536 bytes"):
        ws_frames.exec_channels(ws_frames.FrameReader(io.BytesIO(big), 65536))
    assert ws_frames.exec_channels(ws_frames.FrameReader(io.BytesIO(big), 80_000))[0] == b"y" * 70_000


def test_the_accept_key_is_rfc_6455s():
    """RFC 6455 section 1.3's worked example."""
    assert ws_frames.websocket_accept("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
