"""The exit-code table (docs/exit-codes.md) is `llm_pd_eks_tools.core.cli.Exit`, and it is what `make` shows."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

from helpers import ROOT

from llm_pd_eks_tools.core.cli import Exit


def page_table() -> dict[int, str]:
    text = (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    return {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \| ([A-Z]+) \|", text, re.MULTILINE)}


def test_page_table_is_the_exit_enum():
    assert page_table() == {int(code): code.name for code in Exit}


def make(tmp_path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`make` in this checkout with this interpreter and without the virtualenv step (STAMP=)."""
    clean = {k: v for k, v in (env or os.environ).items() if not k.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run(
        ["make", "--no-print-directory", f"PY={sys.executable}", "STAMP=", *args],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
    )


def make_error_code(stderr: str, target: str) -> int:
    """The tool's exit code from make's last line: `make: *** [Makefile:NN: target] Error N`."""
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(rf"make: \*\*\* \[Makefile:\d+: {re.escape(target)}\] Error (\d+)", last)
    assert match, last
    return int(match[1])


def test_make_shows_the_tools_failed_code(tmp_path):
    # dev -> staging differs in model and engine settings by design: promote-check says FAILED (1).
    proc = make(tmp_path, "promote-check", "FROM=dev", "TO=staging")
    assert proc.returncode == 2  # GNU make's own status for any failed recipe
    assert make_error_code(proc.stderr, "promote-check") == Exit.FAILED
    assert proc.stdout.startswith("promote-check dev -> staging\n")  # no echoed recipe line


def test_make_shows_a_usage_error_code(tmp_path):
    proc = make(tmp_path, "promote-check", "FROM=dev", "TO=nosuchstack")
    assert proc.stderr.splitlines()[0] == (
        "promote-check: no stack file Pulumi.nosuchstack.yaml; stacks here: "
        "dev, prod, staging (or create it: `pulumi stack init nosuchstack`)"
    )
    assert make_error_code(proc.stderr, "promote-check") == Exit.USAGE
    assert proc.stdout == ""


def test_make_preflight_json_is_pure_json_and_unverified_is_5(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once the socket is closed
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ENDPOINT_URL=closed,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    proc = make(tmp_path, "preflight", "STACK=dev", "JSON=1", env=env)
    report = json.loads(proc.stdout)  # the whole of stdout parses: nothing but JSON
    assert report["verdict"] == "warning" and report["account"] is None
    assert make_error_code(proc.stderr, "preflight") == Exit.UNVERIFIED
    first = proc.stderr.splitlines()[0]
    assert first == f'preflight: cannot reach AWS: Could not connect to the endpoint URL: "{closed}/"'


def test_make_succeeds_with_0(tmp_path):
    proc = make(tmp_path, "promote-check", "FROM=staging", "TO=prod")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines()[-1].startswith("OK: prod runs what staging ran")


def test_the_page_is_generated_from_the_runner_table():
    from llm_pd_eks_tools.maint.exit_codes_doc import PAGE, rendered

    page = PAGE.read_text(encoding="utf-8")
    assert rendered(page) == page, "run `python -m llm_pd_eks_tools.maint.exit_codes_doc`"


def test_every_code_has_a_meaning():
    from llm_pd_eks_tools.core.errors import MEANINGS

    assert set(MEANINGS) == set(Exit) and all(MEANINGS[code].strip() for code in Exit)
