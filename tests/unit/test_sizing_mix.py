"""The sizing model's prompt mix (llm_pd_eks_sizing/model/mix.py): closed loops of short and long prompts
sharing the P/D path's prefill queue, and decode-only taking the short ones out of it."""

from __future__ import annotations

import pytest

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.models import MODELS
from llm_pd_eks_sizing.model.engine import Replica
from llm_pd_eks_sizing.model.mix import MixClass, _mva, mix_load

REPLICA = Replica(MODELS["Qwen/Qwen2.5-7B-Instruct"], GPU_INSTANCE_TYPES["p5en.48xlarge"], 1)
SHORT, LONG = MixClass("short", 8, 128, 128), MixClass("long", 8, 4096, 128)
SLOW_STAGE = 200e-6  # seconds a prompt token holds the prefill stage beyond its prefill (a slow handoff)


def test_one_client_never_queues_and_cycles_through_its_demand_and_delay() -> None:
    residence, throughput = _mva([0.5], [1.5], [1])
    assert residence == [0.5] and throughput == [pytest.approx(0.5)]


def test_many_clients_saturate_the_station_at_one_over_its_demand() -> None:
    _, throughput = _mva([0.5], [1.0], [60])
    assert throughput[0] == pytest.approx(2.0, rel=1e-6)


def test_a_request_waits_for_the_work_ahead_at_that_works_own_service_time() -> None:
    residence, throughput = _mva([0.01, 1.0], [0.5, 0.5], [8, 8])
    assert residence[1] - 1.0 > 5  # behind most of the other long requests
    assert residence[0] > 5  # a short request waits as long: the long work ahead of it is the same
    assert throughput[0] == pytest.approx(throughput[1], rel=0.1)


def test_through_pd_short_prompts_reach_their_first_token_as_late_as_long_ones_behind_a_slow_stage() -> None:
    found = mix_load(REPLICA, [SHORT, LONG], stage_s=lambda n: SLOW_STAGE * n)
    assert found["short"].ttft_s == pytest.approx(found["long"].ttft_s, rel=0.05)
    assert found["short"].queue_s > 10 * (REPLICA.prefill_seconds(128) + SLOW_STAGE * 128)
    assert not found["short"].decode_only and not found["long"].decode_only


def test_decode_only_takes_the_short_prompts_out_of_the_queue_and_the_long_ones_wait_less() -> None:
    pd = mix_load(REPLICA, [SHORT, LONG], stage_s=lambda n: SLOW_STAGE * n)
    cond = mix_load(REPLICA, [SHORT, LONG], stage_s=lambda n: SLOW_STAGE * n, decode_only_below=1024)
    assert cond["short"].decode_only and not cond["long"].decode_only
    assert cond["short"].queue_s == 0 and cond["short"].ttft_s < pd["short"].ttft_s / 50
    assert cond["short"].ttft_s == pytest.approx(REPLICA.prefill_seconds(128) + cond["short"].itl_s)
    assert cond["long"].queue_s < pd["long"].queue_s
    assert cond["long"].itl_s > pd["long"].itl_s  # the decode replica now prefills the short prompts too


def test_a_handoff_the_prefill_replica_need_not_wait_for_is_a_delay_not_a_queue() -> None:
    queued = mix_load(REPLICA, [LONG], stage_s=lambda n: SLOW_STAGE * n)
    delayed = mix_load(REPLICA, [LONG], handoff_s=lambda n: SLOW_STAGE * n)
    assert delayed["long"].throughput_rps > 2 * queued["long"].throughput_rps
    assert delayed["long"].queue_s < queued["long"].queue_s


def test_a_threshold_below_every_prompt_is_plain_pd() -> None:
    plain = mix_load(REPLICA, [SHORT, LONG], stage_s=lambda n: SLOW_STAGE * n)
    assert mix_load(REPLICA, [SHORT, LONG], stage_s=lambda n: SLOW_STAGE * n, decode_only_below=128) == plain
