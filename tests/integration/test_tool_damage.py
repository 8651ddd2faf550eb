"""What a tool writes is whole or absent, and only where it may write: through the tools' own entry points.

`size --write` under a file-size limit (RLIMIT_FSIZE: the write fails with EFBIG as a full disk fails
with ENOSPC) leaves the stack file as it was; `cost-audit --out` never replaces a file it did not
write; a Prometheus answering NaN gives no "$nan" figure and no stale chart beside the report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from helpers import ROOT, QuietHTTPServer
from prom_fixtures import free_port

from llm_pd_eks_sizing import cost_audit
from llm_pd_eks_tools.core.cli import OWNER_MARK, Exit, run


def stack_root(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        shutil.copy(ROOT / name, root / name)
    (root / "workloads").mkdir()
    shutil.copy(ROOT / "workloads" / "dev.yaml", root / "workloads" / "dev.yaml")  # what `size --write` sizes for
    return root


def size_write(root: Path, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """`size --write` in a child process, its file-size limit set by the child's own first step.

    The limit is set in a `python -c` step that then execs the tool, not in a `preexec_fn`: this
    process has gRPC loaded (through pulumi), and a `preexec_fn` makes subprocess fork without exec
    first, where gRPC's fork handler restarts its poller while subprocess closes the inherited file
    descriptors, and the child can abort on the closed epoll descriptor.
    """
    command = [sys.executable, "-m", "llm_pd_eks_sizing.size", "--stack", "dev", "--write", "--root", str(root)]
    command += ["--workload", str(ROOT / "workloads" / "dev.yaml")]
    if limit_bytes is not None:
        setter = (
            "import os, resource, sys; "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1]))); "
            "os.execv(sys.argv[2], sys.argv[2:])"
        )
        command = [sys.executable, "-c", setter, str(limit_bytes), *command]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_size_write_that_cannot_finish_leaves_the_stack_file_whole(tmp_path):
    root = stack_root(tmp_path)
    before = (root / "Pulumi.dev.yaml").read_bytes()
    assert len(before) > 1024  # the limit below cuts the new file short
    proc = size_write(root, limit_bytes=1024)
    assert proc.returncode == Exit.IOERR, proc.stderr
    assert proc.stderr.count("\n") == 1 and "cannot write" in proc.stderr and "Pulumi.dev.yaml" in proc.stderr
    assert (root / "Pulumi.dev.yaml").read_bytes() == before
    assert sorted(p.name for p in root.iterdir()) == ["Pulumi.dev.yaml", "Pulumi.yaml", "workloads"]  # no temp file


def test_size_write_replaces_the_stack_file_and_keeps_its_mode(tmp_path):
    root = stack_root(tmp_path)
    path = root / "Pulumi.dev.yaml"
    path.chmod(0o640)
    before = path.read_text()
    proc = size_write(root)
    assert proc.returncode == Exit.OK, proc.stderr
    after = path.read_text()
    assert after != before and "wrote Pulumi.dev.yaml" in proc.stdout
    assert after.splitlines()[0] == before.splitlines()[0]  # the round trip keeps the file's own lines
    assert oct(path.stat().st_mode & 0o777) == oct(0o640)
    assert sorted(p.name for p in root.iterdir()) == ["Pulumi.dev.yaml", "Pulumi.yaml", "workloads"]


# -- cost-audit's --out ------------------------------------------------------------------------------


def audit(argv: list[str], capsys, clients=(None, None)) -> tuple[int, str]:
    code = run("cost-audit", lambda a: cost_audit.main(a, clients=clients), argv)
    return code, capsys.readouterr().err


def test_cost_audit_never_replaces_a_report_it_did_not_write(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my own notes\n")
    code, err = audit(["--stack", "dev", "--out", str(out)], capsys)
    assert code == Exit.USAGE and err.count("\n") == 1, err
    assert "did not write (report.md)" in err
    assert (out / "report.md").read_text() == "my own notes\n"


def test_cost_audit_out_at_a_file_is_a_usage_error(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    code, err = audit(["--stack", "dev", "--out", str(target)], capsys)
    assert code == Exit.USAGE and err.count("\n") == 1 and "is not a directory" in err
    assert target.read_text() == "x"


def test_cost_audit_since_beyond_any_calendar_is_a_usage_error(capsys):
    code, err = audit(["--stack", "dev", "--since", "9999999999d"], capsys)
    assert code == Exit.USAGE and err.count("\n") == 1 and "at most 90d" in err


class _NanPrometheus(BaseHTTPRequestHandler):
    """Every query answers one sample whose value is "NaN" (what PromQL gives for 0/0)."""

    def do_GET(self) -> None:
        body = json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, "NaN"]}]}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def nan_prometheus():
    server = QuietHTTPServer(("127.0.0.1", 0), _NanPrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def closed_clients():
    closed = f"http://127.0.0.1:{free_port()}"
    cfg = Config(connect_timeout=2, read_timeout=2, retries={"mode": "standard", "total_max_attempts": 1})
    keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "endpoint_url": closed, "config": cfg}
    return boto3.client("ce", region_name="us-east-1", **keys), boto3.client(
        "service-quotas", region_name="us-west-2", **keys
    )


def test_a_prometheus_answering_nan_leaves_no_nan_figure_and_no_stale_chart(tmp_path, capsys, nan_prometheus):
    out = tmp_path / "audit"
    out.mkdir()
    (out / OWNER_MARK).write_text("")  # an earlier run's directory
    (out / "spend.png").write_bytes(b"an old chart")
    argv = ["--stack", "dev", "--out", str(out), "--prometheus", nan_prometheus, "--workload", str(tmp_path / "no")]
    code, err = audit(argv, capsys, clients=closed_clients())
    assert code == Exit.UNVERIFIED, err
    assert "cost-audit: prometheus: unavailable: ValueError: a sample value is 'NaN'" in err
    report = (out / "report.md").read_text()
    figures = report[report.index("## Serving efficiency") :]
    assert "nan" not in figures.lower(), figures
    assert json.loads((out / "report.json").read_text())["gpu"] == {}
    assert (out / "spend.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # this run's chart, not the old one
    assert sorted(os.listdir(out)) == sorted([OWNER_MARK, "report.json", "report.md", "spend.png"])
