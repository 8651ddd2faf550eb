"""The traffic gate's KV verdicts and counter reader on what a real run saved: the P/D app of
2026-12-02 on one H200 (NIXL over UCX, both roles on the GPU), its decode raylet scraped before and
after verify's three probe requests (a 5,388-token chat, a short chat, a streamed completion)."""

from __future__ import annotations

import gzip

import pytest
from helpers import ROOT

from llm_pd_eks_sizing.realrun import evidence, gpu_gate, render
from llm_pd_eks_tools.ops.verify import canary

RUN = ROOT / "llm_pd_eks_sizing" / "realrun" / "data" / "2026-12-02T1552Z"
PD = evidence.load(RUN, "evidence-pd.json")
KV_PER_TOKEN = gpu_gate.kv_bytes_per_token(
    render.MODEL_CONFIGS / "Qwen" / "Qwen2.5-7B-Instruct"
)  # the run's config.json


def reading(samples: dict[str, float]) -> canary.KvReading:
    """The gate's reading of one saved scrape of the decode raylet (sample line -> value), as the
    verify package's KvReading (gpu_gate loads its own copy of canary.py from the file)."""
    return canary.KvReading(**gpu_gate.decode_reading("\n".join(f"{k} {v}" for k, v in samples.items())).__dict__)


def probe_tokens() -> list[int]:
    return [PD["chat_verify"]["usage"]["prompt_tokens"], PD["chat_short"]["usage"]["prompt_tokens"]]


def test_the_reader_sums_the_decode_raylets_pulls_bytes_and_failures():
    after = reading(PD["nixl_after"]["decode"])
    assert (after.transfers, after.bytes, after.failed) == (3.0, 338165760.0, 0.0)
    assert reading(PD["nixl_before"]["decode"]) == canary.KvReading(0.0, 0.0, 0.0)  # nothing exported yet: 0
    scraped = gzip.open(RUN / "metrics-pd-after-bench.prom.gz", "rt").read().split("# node ")
    decode = next(part for part in scraped if part.startswith("decode"))
    assert reading({}) == canary.KvReading(0.0, 0.0, 0.0)
    assert gpu_gate.decode_reading(decode).transfers == 187  # every probe and benchmark request pulled once


def test_the_kv_verdicts_pass_on_the_runs_healthy_pulls():
    assert KV_PER_TOKEN == 57344  # 28 layers x 4 KV heads x 128 x K and V x 2 bytes
    verdicts = canary.kv_verdicts(
        3, reading(PD["nixl_before"]["decode"]), reading(PD["nixl_after"]["decode"]), probe_tokens(), KV_PER_TOKEN
    )
    assert [(v.name, v.status) for v in verdicts] == [("gate-kv-bytes", "PASS"), ("gate-kv-failures", "PASS")]
    assert verdicts[0].data["bytes"] >= verdicts[0].data["bytes_floor"]


@pytest.mark.parametrize("requests", [4, 10])
def test_more_requests_than_pulls_fail_on_the_same_counters(requests):
    """Requests the decode side answered without pulling (a prefill on decode) show as missing pulls."""
    verdicts = canary.kv_verdicts(
        requests, reading(PD["nixl_before"]["decode"]), reading(PD["nixl_after"]["decode"]), [], None
    )
    assert verdicts[0].status == "FAIL" and f"pulled KV 3 time(s) for {requests} canaries" in verdicts[0].detail
