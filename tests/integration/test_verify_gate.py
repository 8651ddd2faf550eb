"""The traffic gate in `make verify` (llm_pd_eks_tools/ops/verify/gate.py, canary.py) against the fake
cluster of test_verify (a real Prometheus scraping Ray's own metrics code): it passes where the KV
really moves and the answers are right, and fails, naming the reason, on the broken KV paths that
verify's earlier checks pass: decode prefilling for itself (no pull, no failure), a corrupted read
(text, but the wrong one), a failed pull healed by `recompute`, and answers unlike the reference's."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from verify_fakes import reading_model

from integration.test_verify import Scenario, _start, by_name, needs_prometheus, verify
from llm_pd_eks_tools.core.cli import Exit
from llm_pd_eks_tools.ops.verify import canary

EARLIER_KV_CHECKS = ("chat-completion", "kv-bytes", "kv-failures", "kv-throughput")


def run_verify(scenario: Scenario, tmp_path, capsys, *extra: str):
    env_iter = _start(scenario, tmp_path, with_prometheus=True)
    env = next(env_iter)
    try:
        return verify(env, capsys, *extra)
    finally:
        env_iter.close()


def wrong_reader(prompt: str) -> str:
    """A decode that read corrupted KV: still text, never the planted word."""
    return "amber-otter-1234" if "code word for vault" in prompt else reading_model(prompt)


@needs_prometheus
def test_gate_passes_when_the_kv_moves_and_the_answers_are_right(tmp_path, capsys):
    code, report, _ = run_verify(Scenario(), tmp_path, capsys)
    checks = by_name(report)
    assert code == Exit.OK
    assert [checks[n]["status"] for n in ("gate-answers", "gate-kv-bytes", "gate-kv-failures", "gate-kv-backend")] == [
        "PASS"
    ] * 4
    assert checks["gate-kv-bytes"]["data"]["pulls"] == len(canary.canaries())
    assert "gate-reference" not in checks  # no reference given: not made, not left unverified


@needs_prometheus
@pytest.mark.parametrize(
    "scenario, failing, words",
    [
        (Scenario(later_kv="none"), "gate-kv-bytes", "pulled KV 0 time(s) for 3 canaries"),
        (Scenario(answer=wrong_reader), "gate-answers", "wrong answer to canary"),
    ],
    ids=["decode-prefills-itself", "corrupted-read"],
)
def test_gate_fails_where_the_earlier_checks_pass(scenario, failing, words, tmp_path, capsys):
    code, report, _ = run_verify(scenario, tmp_path, capsys)
    checks = by_name(report)
    assert code == Exit.FAILED
    assert all(checks[n]["status"] == "PASS" for n in EARLIER_KV_CHECKS), [checks[n] for n in EARLIER_KV_CHECKS]
    assert checks[failing]["status"] == "FAIL" and words in checks[failing]["detail"]


@needs_prometheus
def test_gate_names_failed_pulls_that_recompute_heals(tmp_path, capsys):
    code, report, _ = run_verify(Scenario(later_kv="failed"), tmp_path, capsys)
    checks = by_name(report)
    assert code == Exit.FAILED
    assert checks["gate-answers"]["status"] == "PASS"  # recompute answered them right
    assert checks["gate-kv-failures"]["status"] == "FAIL"
    assert checks["gate-kv-failures"]["data"]["failed"] >= 3  # each canary's pull (and any not yet scraped before)
    assert checks["gate-kv-bytes"]["status"] == "FAIL"


class ReferenceHandler(BaseHTTPRequestHandler):
    answer = staticmethod(reading_model)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = json.dumps({"choices": [{"message": {"content": self.answer(body["messages"][-1]["content"])}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(text.encode())

    def log_message(self, *args) -> None:
        pass


@needs_prometheus
@pytest.mark.parametrize("reference_reads, status", [(True, "PASS"), (False, "FAIL")], ids=["equal", "different"])
def test_gate_compares_the_answers_with_an_aggregated_reference(reference_reads, status, tmp_path, capsys):
    handler = type(
        "Ref", (ReferenceHandler,), {"answer": staticmethod(reading_model if reference_reads else wrong_reader)}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _, report, _ = run_verify(Scenario(), tmp_path, capsys, "--reference", f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
    checks = by_name(report)
    assert checks["gate-reference"]["status"] == status


def test_canaries_are_the_same_for_a_seed_and_plant_their_word_at_its_depth():
    first, again = canary.canaries(seed=3), canary.canaries(seed=3)
    assert first == again and first != canary.canaries(seed=4)
    for item in first:
        body = item.prompt.split("\n\n")[0]
        at = body.index(item.code_word) / len(body)
        assert abs(at - item.depth) < 0.05, (item.name, at)
        assert reading_model(item.prompt) == item.code_word
        assert item.prompt.count(item.code_word) == 1


def test_judge_reads_counters_around_the_canaries_only():
    items = canary.canaries()
    answers = [c.code_word for c in items]
    before = canary.KvReading(transfers=100, bytes=1e12, failed=2)  # a lifetime's earlier traffic and failures
    healthy = canary.judge(
        items, answers, before, canary.KvReading(103, 1e12 + 3e8, 2), prompt_tokens=[3000] * 3, kv_bytes_per_token=57344
    )
    assert {v.name: v.status for v in healthy} == {
        "gate-answers": "PASS",
        "gate-kv-bytes": "PASS",
        "gate-kv-failures": "PASS",
        "gate-kv-backend": "UNVERIFIED",
    }
    short = canary.judge(
        items, answers, before, canary.KvReading(103, 1e12 + 1e6, 2), prompt_tokens=[3000] * 3, kv_bytes_per_token=57344
    )
    assert next(v for v in short if v.name == "gate-kv-bytes").status == "FAIL"  # pulls, but not the canaries' KV
    ucx = canary.judge(items, answers, before, before, backends=["UCX"], expected_backend="LIBFABRIC")
    assert next(v for v in ucx if v.name == "gate-kv-backend").detail == "decode's NIXL backend UCX, not LIBFABRIC"


def test_the_canary_module_runs_on_the_gpu_machine_with_the_standard_library_alone():
    """gpu_gate.py loads canary.py from its file on a machine with nothing of the project installed."""
    import ast
    import sys
    from pathlib import Path

    tree = ast.parse(Path(canary.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}
