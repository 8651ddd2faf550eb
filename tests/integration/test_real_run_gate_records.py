"""The traffic gate's three arms as they ran on one H100 on 2026-12-07 (NIXL over UCX, both P/D
engines on the GPU, dummy weights): each arm's saved canary answers and decode-side NIXL counters
judged again by `canary.judge`, the code `make verify` runs. The healthy P/D arm passes the KV
checks; the arm whose every pull fails still answers every canary, as the aggregated engine does,
and only the KV checks catch it."""

from __future__ import annotations

import pytest
from helpers import ROOT

from llm_pd_eks_sizing.realrun import evidence, gpu_gate, render
from llm_pd_eks_tools.ops.verify import canary

RUN = ROOT / "llm_pd_eks_sizing" / "realrun" / "data" / "2026-12-07T0741Z"
AGG = evidence.load(RUN, "evidence-gate-agg.json")
KV_PER_TOKEN = gpu_gate.kv_bytes_per_token(render.MODEL_CONFIGS / "Qwen" / "Qwen2.5-7B-Instruct")


def judged(arm: str) -> dict[str, canary.Verdict]:
    """The arm's verdicts from its saved evidence, with the aggregated arm's answers as the reference
    (that arm ran last, so the run itself judged the P/D arms without one)."""
    saved = evidence.load(RUN, f"evidence-{arm}.json")
    rows = saved["canaries"]
    found = canary.judge(
        canary.canaries(words=saved["canary_words"]),
        [row["answer"] for row in rows],
        canary.KvReading(**saved["decode_before"]),
        canary.KvReading(**saved["decode_after"]),
        prompt_tokens=[row["prompt_tokens"] for row in rows],
        kv_bytes_per_token=KV_PER_TOKEN,
        backends=saved["nixl_backends"],
        expected_backend=gpu_gate.NIXL_BACKEND,
        reference=[row["answer"] for row in AGG["canaries"]],
        known_answers=False,
    )
    return {v.name: v for v in found}


@pytest.mark.parametrize("arm", ["gate", "gate-broken"])
def test_judged_again_each_arm_gives_the_verdicts_it_recorded(arm):
    saved = evidence.load(RUN, f"evidence-{arm}.json")
    again = judged(arm)
    assert {v["name"]: v["status"] for v in saved["gate"]} == {
        name: v.status for name, v in again.items() if name != "gate-reference"
    }


def test_the_healthy_arm_pulled_each_canarys_kv_once_and_failed_none():
    verdicts = judged("gate")
    assert verdicts["gate-kv-bytes"].status == "PASS" and verdicts["gate-kv-failures"].status == "PASS"
    data = verdicts["gate-kv-bytes"].data
    assert data["pulls"] == 3 and data["failed"] == 0 and data["bytes"] >= data["bytes_floor"]


def test_the_broken_arm_answers_like_the_reference_and_fails_only_on_the_kv_checks():
    verdicts = judged("gate-broken")
    assert verdicts["gate-reference"].status == "PASS"  # recomputed on decode: the same answers
    assert {n: v.status for n, v in verdicts.items() if v.status == "FAIL"} == {
        "gate-kv-bytes": "FAIL",
        "gate-kv-failures": "FAIL",
    }
    assert verdicts["gate-kv-bytes"].data["pulls"] == 0 and verdicts["gate-kv-failures"].data["failed"] == 3
    chat = evidence.load(RUN, "evidence-gate-broken.json")["today"]["chat_completion"]
    assert chat["status"] == 200 and chat["content_chars"] > 0  # verify's chat check passes on it


def test_the_canaries_were_the_short_ones_the_run_sends_and_fit_the_engines_context():
    for arm in ("gate", "gate-broken", "gate-agg"):
        saved = evidence.load(RUN, f"evidence-{arm}.json")
        assert saved["canary_words"] == gpu_gate.CANARY_WORDS
        assert all(row["status"] == 200 and 0 < row["prompt_tokens"] < 8192 for row in saved["canaries"])
