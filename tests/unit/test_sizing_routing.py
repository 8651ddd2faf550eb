"""Where serving.routing's features pay, in the sizing model's own terms (llm_pd_eks_sizing/model/routing.py)."""

from __future__ import annotations

import dataclasses

import pytest

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.models import MODELS
from llm_pd_eks_sizing.model.engine import Replica
from llm_pd_eks_sizing.model.routing import _disaggregation_pays, decode_only_threshold, prefix_routing
from llm_pd_eks_sizing.model.workload import parse_workload

QWEN = MODELS["Qwen/Qwen2.5-7B-Instruct"]
P5EN = GPU_INSTANCE_TYPES["p5en.48xlarge"]


def test_the_threshold_is_where_the_hop_and_handoff_start_to_cost_less_than_the_stall() -> None:
    found = decode_only_threshold(QWEN, P5EN, hop_s=0.02)
    assert found.tokens is not None and found.tokens > 1
    replica = Replica(QWEN, P5EN, 1)
    assert _disaggregation_pays(replica, P5EN, found.tokens, found.hop_s)
    assert not _disaggregation_pays(replica, P5EN, found.tokens - 1, found.hop_s)
    assert "assumed" in found.text()


def test_a_dearer_hop_keeps_longer_prompts_on_decode() -> None:
    cheap = decode_only_threshold(QWEN, P5EN, hop_s=0.002).tokens
    dear = decode_only_threshold(QWEN, P5EN, hop_s=0.02).tokens
    assert cheap is not None and dear is not None and dear > cheap


def test_without_gpudirect_rdma_the_handoff_is_dearer_so_the_threshold_rises() -> None:
    rdma = dataclasses.replace(P5EN, name="rdma-twin")
    tcp = dataclasses.replace(P5EN, name="tcp-twin", efa_rdma_read=False)
    with_rdma = decode_only_threshold(QWEN, rdma).tokens
    without = decode_only_threshold(QWEN, tcp).tokens
    assert with_rdma is not None and (without is None or without > with_rdma)


def test_prefix_affinity_saves_nothing_with_one_replica_or_prefixes_that_fit_everywhere() -> None:
    one = prefix_routing(QWEN, P5EN, shared_prefix_tokens=2000, distinct_prefixes=5000, replicas=1)
    assert one.saved_s == 0 and one.hit_rate_random == one.hit_rate_affinity
    few = prefix_routing(QWEN, P5EN, shared_prefix_tokens=2000, distinct_prefixes=3, replicas=4)
    assert few.hit_rate_random == few.hit_rate_affinity == 1.0 and few.saved_s == 0


def test_prefix_affinity_pays_when_the_prefixes_outgrow_one_replicas_cache() -> None:
    many = prefix_routing(QWEN, P5EN, shared_prefix_tokens=2000, distinct_prefixes=5000, replicas=4)
    assert many.hit_rate_affinity > many.hit_rate_random and many.saved_s > 0
    assert many.hit_rate_affinity == pytest.approx(min(1.0, 4 * many.hit_rate_random))


def test_a_prefix_asked_a_few_times_misses_once_on_each_replica_it_reaches() -> None:
    """Four asks of prefixes that fit: affinity misses the first (3/4 hit); spread over two replicas
    the asks reach 2(1 - 1/16) = 1.875 of them on average, each a first miss (2.125/4 hit)."""
    fits = prefix_routing(QWEN, P5EN, shared_prefix_tokens=2000, distinct_prefixes=3, replicas=2, asks=4)
    assert fits.hit_rate_affinity == pytest.approx(0.75)
    assert fits.hit_rate_random == pytest.approx(2.125 / 4)
    one = prefix_routing(QWEN, P5EN, shared_prefix_tokens=2000, distinct_prefixes=3, replicas=1, asks=4)
    assert one.hit_rate_random == one.hit_rate_affinity == pytest.approx(0.75)


def test_a_kv_cache_set_in_bytes_is_the_cache_the_prefixes_compete_for() -> None:
    """2 GiB of Qwen2.5-7B's 57,344-byte tokens holds 37,449 tokens: 0.76 of 24 x 2,048 spread over
    every replica, all of it with affinity over two."""
    small = prefix_routing(QWEN, P5EN, 2048, 24, replicas=2, cache_bytes=2 * 2**30)
    assert small.hit_rate_random == pytest.approx(2 * 2**30 / 57_344 / (24 * 2048))
    assert small.hit_rate_affinity == 1.0


def test_a_replica_sent_a_few_asks_holds_only_the_prefixes_it_was_sent() -> None:
    """Four asks over two replicas: each replica is sent 15/16 of the 24 prefixes (22.5), so a cache
    of 18 holds 0.8 of what it sees, not 0.75 of all; times the 2.125/4 of asks that can hit."""
    cache = 18 * 2048 * 57_344
    spread = prefix_routing(QWEN, P5EN, 2048, 24, replicas=2, asks=4, cache_bytes=cache)
    assert spread.hit_rate_random == pytest.approx(18 / 22.5 * 2.125 / 4)
    assert spread.hit_rate_affinity == pytest.approx(0.75)


def test_a_workload_may_name_its_shared_prefix_and_nothing_else_new() -> None:
    base = {
        "requestRate": 1,
        "inputTokens": {"mean": 1000, "cv": 0.5},
        "outputTokens": {"mean": 100, "cv": 0.5},
        "slo": {"ttftMs": 1000, "itlMs": 50, "percentile": 90},
    }
    parsed = parse_workload({**base, "sharedPrefix": {"tokens": 1500, "distinct": 20}})
    assert parsed.shared_prefix is not None and parsed.shared_prefix.distinct == 20
    with pytest.raises(Exception, match="sharedPrefix"):
        parse_workload({**base, "sharedPrefix": {"tokens": 0}})


def test_make_size_says_where_each_routing_feature_pays(tmp_path, capsys) -> None:
    from llm_pd_eks_sizing import size as size_cli
    from llm_pd_eks_tools.core.cli import Exit, run

    workload = tmp_path / "w.yaml"
    workload.write_text(
        "requestRate: 4\ninputTokens: {mean: 1500, cv: 0.8}\noutputTokens: {mean: 300, cv: 0.6}\n"
        "slo: {ttftMs: 1500, itlMs: 50, percentile: 90}\nsharedPrefix: {tokens: 1200, distinct: 40}\n"
    )
    assert run("size", size_cli.main, ["--stack", "dev", "--workload", str(workload)]) == Exit.OK
    out = capsys.readouterr().out
    # an idle prefill stage: the stall exceeds the hop at every length
    assert "decodeOnlyBelowTokens, idle prefill stage: decode-only never pays here" in out
    # at the sized load the P/D path also waits in the prefill queue, so shorter prompts pay on decode
    (line,) = [x for x in out.splitlines() if "decodeOnlyBelowTokens at this load" in x]
    assert "requests/s a prefill replica, mean queue wait" in line and "disaggregate prompts of" in line
    assert "prefixAware (prefill): hit rate" in out


# --- under load: the prefill queue the P/D path waits in and decode-only skips ----------------------


def lognormal_partial_moment(mean: float, cv: float, k: int, at_least: float, steps: int = 200_000) -> float:
    """E[L^k; L >= at_least] by the midpoint rule over the lognormal's log-density (the oracle)."""
    import math

    s2 = math.log1p(cv**2)
    mu, s = math.log(mean) - s2 / 2, math.sqrt(s2)
    lo, hi = max(math.log(at_least), mu - 12 * s), mu + 12 * s
    width = (hi - lo) / steps
    total = 0.0
    for i in range(steps):
        x = lo + (i + 0.5) * width
        total += math.exp(k * x) * math.exp(-((x - mu) ** 2) / (2 * s2)) / (s * math.sqrt(2 * math.pi)) * width
    return total


@pytest.mark.parametrize(("k", "at_least"), [(0, 500.0), (1, 2000.0), (2, 4000.0), (4, 1000.0)])
def test_the_tail_moments_are_the_lognormals(k: int, at_least: float) -> None:
    from llm_pd_eks_sizing.model.workload import TokenLengths

    lengths = TokenLengths(mean=1500, cv=0.8)
    oracle = lognormal_partial_moment(1500, 0.8, k, at_least)
    assert lengths.partial_moment(k, at_least) == pytest.approx(oracle, rel=1e-6)
    assert lengths.partial_moment(k, 0) == lengths.moment(k)


def test_fixed_lengths_have_all_or_none_of_their_moment_above_a_threshold() -> None:
    from llm_pd_eks_sizing.model.workload import TokenLengths

    fixed = TokenLengths(mean=1000, cv=0)
    assert (fixed.partial_moment(2, 1000), fixed.partial_moment(2, 1001)) == (1e6, 0.0)


def test_the_queue_wait_with_every_prompt_queued_is_the_prefill_sides_pollaczek_khinchine_mean() -> None:
    from llm_pd_eks_sizing.model.queueing import _service_moments
    from llm_pd_eks_sizing.model.routing import prefill_queue_wait
    from llm_pd_eks_sizing.model.workload import TokenLengths

    replica, lengths, rate = Replica(QWEN, P5EN, 1), TokenLengths(mean=1500, cv=0.8), 4.0
    mean_s, second_s = _service_moments(*replica.prefill_coefficients(), lengths)
    wait = prefill_queue_wait(replica, lengths, rate)
    assert wait(1) == pytest.approx(rate * second_s / (2 * (1 - rate * mean_s)), rel=1e-9)
    waits = [wait(t) for t in (1, 256, 1024, 4096, 16384)]
    assert waits == sorted(waits, reverse=True) and waits[-1] < waits[0] / 10  # fewer prompts queued, less wait
    assert prefill_queue_wait(replica, lengths, 1 / mean_s)(1) == float("inf")  # a saturated queue


def test_a_queue_wait_keeps_longer_prompts_on_decode_and_none_is_the_idle_answer() -> None:
    idle = decode_only_threshold(QWEN, P5EN, hop_s=0.02)
    assert decode_only_threshold(QWEN, P5EN, hop_s=0.02, queue_wait_s=lambda t: 0.0).tokens == idle.tokens
    waited = decode_only_threshold(QWEN, P5EN, hop_s=0.02, queue_wait_s=lambda t: 0.05)
    assert idle.tokens is not None and waited.tokens is not None and waited.tokens > idle.tokens
    replica = Replica(QWEN, P5EN, 1)
    # the same rule as a dearer hop: a constant 50 ms wait is a 70 ms hop
    assert waited.tokens == decode_only_threshold(QWEN, P5EN, hop_s=0.07).tokens
    assert not _disaggregation_pays(replica, P5EN, waited.tokens - 1, 0.02, lambda t: 0.05)
    assert "the prefill queue's mean wait at this load" in waited.text() and "queue" not in idle.text()
