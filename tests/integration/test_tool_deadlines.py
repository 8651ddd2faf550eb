"""Every wait a tool makes has an end: one deadline per network exchange (headers included), a byte
cap on every reply, a deadline on the policy pack's answers and on child processes, and no blocking
read of an input that is not a regular file. Each through the tool's own entry point.

The fakes here would let a tool wait far longer than its deadline (a server that sends its headers a
byte at a time for a minute, a pack and a CLI that never answer), so a tool that misses its deadline
fails the test by the test's own subprocess timeout or by the wrong verdict, never by a clock reading.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import ROOT, TricklingServer, copy_checkout
from prom_fixtures import free_port

from llm_pd_eks_sizing import cost_audit
from llm_pd_eks_tools.core.cli import Exit, run
from llm_pd_eks_tools.ops.verify.cli import main as verify_main


@pytest.fixture
def trickling():
    server = TricklingServer()
    yield server.url
    server.close()


def test_verify_ends_on_time_when_the_server_trickles_its_headers(tmp_path, trickling, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{trickling}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    argv = ["--stack", "dev", "--kubeconfig", str(kubeconfig), "--timeout", "2", "--kv-wait", "0"]
    code = run("verify", verify_main, [*argv, "--out", str(tmp_path / "out"), "--json"])
    out = capsys.readouterr().out
    assert code == Exit.UNVERIFIED
    assert "did not arrive in time" in out and '"status": "PASS"' not in out


def test_cost_audit_reads_no_more_of_a_prometheus_reply_than_its_cap(tmp_path, capsys, monkeypatch):
    from llm_pd_eks_sizing.cost_audit import prometheus

    monkeypatch.setattr(prometheus, "MAX_REPLY_BYTES", 1000)
    sock = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:  # a reply with no Content-Length that goes on and on (it stops at 1 MB)
        conn, _ = sock.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
            try:
                for _ in range(1000):
                    conn.sendall(b'{"status": "success"' + b" " * 1004)
            except OSError:
                pass

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    closed = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", closed)
    argv = ["--stack", "dev", "--out", str(tmp_path / "out"), "--prometheus", url, "--workload", str(tmp_path / "x")]
    try:
        code = run("cost-audit", lambda a: cost_audit.main(a, clients=_closed_clients(closed)), argv)
    finally:
        sock.close()
    err = capsys.readouterr().err
    assert code == Exit.UNVERIFIED
    assert "cost-audit: prometheus: unavailable: ReplyTooLarge: the reply is larger than the 1000 bytes read" in err


def _closed_clients(url: str):
    import boto3
    from botocore.config import Config

    cfg = Config(connect_timeout=2, read_timeout=2, retries={"mode": "standard", "total_max_attempts": 1})
    keys = {"aws_access_key_id": "t", "aws_secret_access_key": "t", "endpoint_url": url, "config": cfg}
    return boto3.client("ce", region_name="us-east-1", **keys), boto3.client(
        "service-quotas", region_name="us-west-2", **keys
    )


def test_size_refuses_a_fifo_as_its_workload(tmp_path):
    fifo = tmp_path / "workload.yaml"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_sizing.size", "--stack", "dev", "--workload", str(fifo)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,  # a read of the FIFO would block until this ends the test
    )
    assert proc.returncode == Exit.USAGE
    assert proc.stderr == f"size: workload file {fifo}: not a regular file; give a file\n"


def gone(pid: int) -> bool:
    """True once `pid` has exited (absent, or a zombie waiting for its new parent to reap it)."""
    for _ in range(200):  # bounded: SIGKILL lands within moments even on a loaded machine
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


STUCK_PULUMI = """#!{python}
import os, subprocess, sys, time
# a grandchild that holds the pipes, as a CLI's own helper process would
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(os.environ["STUCK_PIDS"], "w").write(f"{{os.getpid()}} {{child.pid}}")
time.sleep(600)
"""


def test_preflight_deadline_covers_a_cli_that_never_answers(tmp_path):
    root = copy_checkout(tmp_path / "repo")
    stack = root / "Pulumi.dev.yaml"
    stack.write_text("environment:\n  - llm-pd-eks/dev\n" + stack.read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text(STUCK_PULUMI.format(python=sys.executable))
    (bin_dir / "pulumi").chmod(0o755)
    pids = tmp_path / "pids"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", STUCK_PIDS=str(pids))
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.ops.preflight", "--stack", "dev", "--deadline", "3"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # the CLI's own limit is 120 s: only the deadline ends it before this
    )
    assert proc.returncode == Exit.UNVERIFIED, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert re.search(r"`pulumi config --json` gave no answer in [0-3]\.\d s, so its keys", proc.stderr), proc.stderr
    assert all(gone(int(pid)) for pid in pids.read_text().split())  # the CLI and what it started


HANGING_PACK = """import os, time
from pulumi_policy import EnforcementLevel, PolicyPack, ResourceValidationPolicy

def never_answers(args, report_violation):
    open(os.environ["PACK_PID"], "w").write(str(os.getpid()))
    time.sleep(3600)

PolicyPack(
    name="hangs",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=[ResourceValidationPolicy(name="never-answers", description="sleeps", validate=never_answers)],
)
"""


def test_preview_ends_when_the_policy_pack_never_answers(tmp_path):
    root = copy_checkout(tmp_path / "repo")
    shutil.rmtree(root / "policies")
    (root / "policies").mkdir()
    shutil.copy(ROOT / "policies" / "PulumiPolicy.yaml", root / "policies" / "PulumiPolicy.yaml")
    (root / "policies" / "__main__.py").write_text(HANGING_PACK)
    pid_file = tmp_path / "pack.pid"
    argv = ["--stack", "dev", "--root", str(root), "--out", str(tmp_path / "out"), "--policy-timeout", "3", "--quiet"]
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.plan.preview", *argv],
        cwd=ROOT,
        env={**os.environ, "PACK_PID": str(pid_file)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == Exit.POLICY, proc.stderr
    assert proc.stderr == "preview: policy pack failed: no answer within 3 s (--policy-timeout)\n"
    assert gone(int(pid_file.read_text()))


def test_verify_refuses_a_fifo_as_its_kubeconfig(tmp_path):
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.ops.verify", "--stack", "dev", "--kubeconfig", str(fifo)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stderr) == (
        Exit.USAGE,
        f"verify: kubeconfig {fifo}: not a regular file; give a file\n",
    )
