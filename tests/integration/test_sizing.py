"""`make size`: the roofline arithmetic, the calibration points, the KV band, workload errors, --write."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import DATA, ROOT, STACKS

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import PROJECT
from llm_pd_eks.models import MODELS, ModelSpec
from llm_pd_eks_sizing import size as size_cli
from llm_pd_eks_sizing.model import (
    VLLM_BF16,
    KvBand,
    Replica,
    TokenLengths,
    decode_weight_bytes,
    embedding_params,
    engine_constants,
    kv_band,
    load_workload,
    mg1_wait_quantile,
    parse_workload,
    prefill_flops,
    size,
    usd_per_million_output_tokens,
    vllm_step_budget,
)
from llm_pd_eks_tools.core.cli import Exit, ToolError, run
from llm_pd_eks_tools.core.stack import stack_config

L70 = MODELS["meta-llama/Llama-3.3-70B-Instruct"]
P5 = GPU_INSTANCE_TYPES["p5.48xlarge"]
WORKLOADS = ROOT / "workloads"
GOOD = {
    "requestRate": 2,
    "inputTokens": {"mean": 1000, "cv": 0.5},
    "outputTokens": {"mean": 200},
    "slo": {"ttftMs": 1000, "itlMs": 50, "percentile": 90},
}


# -- arithmetic, checked by hand ------------------------------------------------------------------
def test_forward_flops_is_two_flops_a_parameter_plus_attention():
    # Llama 3.3 70B: 80 layers x 64 heads x 128 = 655,360 attention width
    assert L70.forward_flops(1, 0) == pytest.approx(2 * 70.6e9)
    assert L70.forward_flops(10, 1000) == pytest.approx(10 * (2 * 70.6e9 + 4 * 80 * 64 * 128 * 1000))


def test_prefill_multiplies_non_embedding_parameters_only():
    # Llama-3.3-70B config.json: vocab 128256 x hidden 8192, untied: the embedding and the LM head
    embed, head = embedding_params(L70)
    assert embed == head == 128256 * 8192
    dense = 2 * (70.6e9 - 2 * 128256 * 8192) * 4000
    assert prefill_flops(L70, 4000) == pytest.approx(dense + 4 * 80 * 64 * 128 * 2000 * 4000)


def test_prefill_is_intercept_plus_compute_over_peak_mfu_and_tp_efficiency_plus_allreduce():
    constants = VLLM_BF16
    replica = Replica(L70, P5, 8)
    tp_factor = constants.tp_efficiency**3  # three doublings from TP 1 to TP 8
    # two all-reduces a layer of 4000 x 8192 bf16 activations over NVLink: latency + ring 2 x 7/8 of the bytes
    allreduce = 2 * 80 * (8e-6 + 2 * 7 / 8 * 4000 * 8192 * 2 / 450e9)
    expected = (
        constants.intercepts(L70)[0]
        + prefill_flops(L70, 4000) / (8 * 989e12 * constants.prefill_mfu * tp_factor)
        + allreduce
    )
    assert replica.prefill_seconds(4000) == pytest.approx(expected)
    c, a, b = replica.prefill_coefficients()
    assert c + a * 4000 + b * 4000**2 == pytest.approx(replica.prefill_seconds(4000))


def test_tp_efficiency_makes_doubling_tp_less_than_twice_as_fast():
    one, two = Replica(L70, P5, 4), Replica(L70, P5, 8)
    speedup = one.prefill_seconds(8000) / two.prefill_seconds(8000)
    assert 1.5 < speedup < 2.0


def test_decode_step_is_intercept_plus_weights_kv_and_allreduce_until_the_compute_roof():
    constants = VLLM_BF16
    replica = Replica(L70, P5, 8)
    weights = 131.5 * 2**30 - 128256 * 8192 * 2  # the input embedding is a lookup, not streamed
    assert decode_weight_bytes(L70, 2) == pytest.approx(weights)
    kv = 32 * 3000 * 327_680  # 32 sequences of 3000 tokens at 320 KiB a token (bf16)
    bandwidth = 8 * 3350e9 * constants.decode_mbu  # no TP factor on bandwidth: each GPU streams its shard
    compute = 8 * 989e12 * constants.prefill_mfu * constants.tp_efficiency**3
    dense = 2 * (70.6e9 - 2 * 128256 * 8192)

    def allreduce(tokens: int) -> float:
        return 2 * 80 * (8e-6 + 2 * 7 / 8 * tokens * 8192 * 2 / 450e9)

    assert replica.decode_step_seconds(32, 3000) == pytest.approx(
        constants.intercepts(L70)[1] + max(dense * 32 / compute, weights / bandwidth) + kv / bandwidth + allreduce(32)
    )
    # a huge batch of short sequences crosses the roofline into compute for the linear layers
    huge = replica.decode_step_seconds(20000, 10)
    assert huge == pytest.approx(
        constants.intercepts(L70)[1] + dense * 20000 / compute + 20000 * 10 * 327_680 / bandwidth + allreduce(20000)
    )


def test_unknown_engine_row_names_the_known_ones():
    with pytest.raises(KeyError, match="vllm/bf16"):
        engine_constants("sglang", "bf16")


def test_kv_bytes_come_from_the_one_formula():
    band = kv_band(L70, 10_000, 2, P5)
    assert band.bytes == L70.kv_bytes_per_token(2) * 10_000 == 2 * 80 * 8 * 128 * 2 * 10_000


def test_kv_band_is_per_rank_over_its_own_interfaces():
    # p5.48xlarge: 32 EFA interfaces of 100 Gbit/s for 8 GPUs = 4 per rank; TP 8 moves 1/8 per rank
    band = kv_band(L70, 10_000, 2, P5, tp=8)
    assert band.interfaces_per_rank == 4 and band.interface_gbps == 100
    assert band.line_rate_seconds < band.measured_seconds < band.tcp_seconds
    assert band.line_rate_seconds == pytest.approx(band.bytes / 8 * 8 / 400e9)
    # the dynamo figure: ~9.6 GB/s for one worker on 4 interfaces = 0.192 of each interface's line rate
    assert band.efficiency == pytest.approx(76.8 / 400)
    assert band.measured_seconds == pytest.approx(band.bytes / 8 * 8 / 76.8e9)
    assert band.planning_seconds == band.measured_seconds
    assert "PR #7764" in band.measured_source
    # twice the ranks, half the time: each rank has its own interfaces
    assert kv_band(L70, 10_000, 2, P5, tp=4).planning_seconds == pytest.approx(2 * band.planning_seconds)


def test_kv_band_on_p4d_shares_an_interface_between_two_gpus_and_stays_on_efa():
    # p4d.24xlarge: 4 EFA interfaces for 8 GPUs, GPUDirect RDMA: NIXL/EFA, not a TCP flow
    band = kv_band(L70, 10_000, 2, GPU_INSTANCE_TYPES["p4d.24xlarge"], tp=8)
    assert band.rdma and band.interfaces_per_rank == 0.5
    assert band.measured_gbps == pytest.approx(0.5 * 100 * 76.8 / 400)
    assert band.planning_seconds == band.measured_seconds


def test_kv_band_without_gpudirect_rdma_is_the_tcp_failure_case():
    band = kv_band(L70, 10_000, 2, GPU_INSTANCE_TYPES["g6e.12xlarge"], tp=1)
    assert not band.rdma and band.measured_seconds is None
    assert band.planning_seconds == band.tcp_seconds == pytest.approx(band.bytes * 8 / 10e9)
    assert "failure case" in band.planning_basis


def test_mg1_with_one_length_is_distserve_md1():
    # DistServe §4.1: M/D/1 mean wait R D^2 / (2 (1 - R D)); our tail is exponential with that mean / rho
    rate, d = 2.0, 0.3
    rho, wq = rate * d, rate * d * d / (2 * (1 - rate * d))
    assert mg1_wait_quantile(rate, d, d * d, 0.9) == pytest.approx((wq / rho) * math.log(rho / 0.1))
    assert mg1_wait_quantile(rate, d, d * d, 0.3) == 0.0  # P(wait > 0) = rho = 0.6 < 0.7
    assert mg1_wait_quantile(4.0, d, d * d, 0.9) == math.inf  # rho 1.2: unstable


def test_lognormal_lengths_keep_their_mean_and_spread():
    lengths = TokenLengths(mean=2000, cv=0.5)
    assert lengths.moment(1) == pytest.approx(2000)
    assert lengths.moment(2) - lengths.moment(1) ** 2 == pytest.approx((0.5 * 2000) ** 2)
    assert lengths.quantile(0.5) < 2000 < lengths.quantile(0.9)
    assert TokenLengths(mean=2000).quantile(0.99) == 2000


def test_vllm_step_budget_follows_its_defaults():
    assert vllm_step_budget(P5) == (8192, 1024)  # >= 70 GiB, not A100
    assert vllm_step_budget(GPU_INSTANCE_TYPES["p4de.24xlarge"]) == (2048, 256)  # A100 80 GB excluded
    assert vllm_step_budget(GPU_INSTANCE_TYPES["g6e.12xlarge"]) == (2048, 256)  # 48 GiB


def test_dollars_per_million_tokens():
    assert usd_per_million_output_tokens(36.0, 1000.0) == pytest.approx(10.0)


# -- sizing behaviour -----------------------------------------------------------------------------
def _size(stack: str, **changes) -> object:
    data = {**GOOD, **changes}
    return size(stack, stack_config(stack, ROOT), parse_workload(data))


def test_more_traffic_needs_more_replicas_never_fewer():
    low, high = _size("prod", requestRate=1), _size("prod", requestRate=40)
    for role in ("prefill", "decode"):
        assert high.disaggregated.side(role).replicas >= low.disaggregated.side(role).replicas
    assert high.disaggregated.nodes > low.disaggregated.nodes
    assert high.aggregated.nodes > low.aggregated.nodes


def test_sized_layout_meets_the_objectives_it_was_sized_for():
    result = _size("prod", requestRate=6)
    assert result.disaggregated.side("prefill").ttft_ms <= GOOD["slo"]["ttftMs"]
    assert result.disaggregated.side("decode").itl_ms <= GOOD["slo"]["itlMs"]
    agg = result.aggregated.sides[0]
    assert agg.ttft_ms <= GOOD["slo"]["ttftMs"] and agg.itl_ms <= GOOD["slo"]["itlMs"]


def test_an_itl_below_the_weight_streaming_floor_is_infeasible_both_ways():
    # 131.5 GiB over 8 x 3.35 TB/s at 58 %: ~7.3 ms a step before any KV; 5 ms cannot be met
    result = _size("prod", slo={"ttftMs": 1000, "itlMs": 5, "percentile": 90})
    assert not result.disaggregated.feasible and "ITL objective" in result.disaggregated.reason
    assert not result.aggregated.feasible
    assert result.verdict().startswith("neither layout")


def test_strict_tail_itl_favours_disaggregation():
    # p99 ITL of 30 ms: a prefill chunk riding a decode step stalls it far beyond; separate decode nodes do not
    workload = {
        "requestRate": 10,
        "inputTokens": {"mean": 4000},
        "outputTokens": {"mean": 300},
        "slo": {"ttftMs": 2000, "itlMs": 30, "percentile": 99},
    }
    result = _size("prod", **workload)
    assert result.disaggregated.feasible
    assert not result.aggregated.feasible or result.aggregated.nodes > result.disaggregated.nodes
    assert result.verdict().startswith("disaggregation pays")


def test_cost_is_nodes_times_the_list_price():
    result = _size("prod")
    assert result.price_hourly == pytest.approx(55.04)  # llm_pd_eks/data/prices.json, p5.48xlarge us-east-1
    assert result.disaggregated.hourly == pytest.approx(result.disaggregated.nodes * 55.04)
    tokens_s = GOOD["requestRate"] * GOOD["outputTokens"]["mean"]
    assert result.disaggregated.usd_per_mtok == pytest.approx(result.disaggregated.hourly / (tokens_s * 3600) * 1e6)


def test_a_request_longer_than_max_model_len_is_refused():
    with pytest.raises(ToolError) as info:
        _size("dev", inputTokens={"mean": 9000})
    assert info.value.exit_code == Exit.USAGE and "maxModelLen" in str(info.value)


# -- calibration against published measurements -----------------------------------------------------------
CALIBRATION = yaml.safe_load((DATA / "sizing-calibration" / "points.yaml").read_text())


def _calibration_model(name: str) -> ModelSpec:
    if name in MODELS:
        return MODELS[name]
    shape = CALIBRATION["models"][name]
    return ModelSpec(
        name,
        shape["params_billion"],
        shape["layers"],
        shape["kv_heads"],
        shape["head_dim"],
        shape["params_billion"] * 1e9 * 2 / 2**30,
        attention_heads=shape["attention_heads"],
    )


def predict(point: dict) -> float:
    replica = Replica(
        _calibration_model(point["model"]),
        GPU_INSTANCE_TYPES[point["instance"]],
        point["tp"],
        weight_dtype_bytes=point["weight_bytes"],
        compute_scale=point["compute_scale"],
        constants=engine_constants(point["engine"], point["dtype"]),
    )
    batch, context = point["batch"], point["input"] + point["output"] / 2
    if point["kind"] == "ttft":
        return replica.prefill_seconds(point["input"]) * 1e3
    if point["kind"] == "itl":
        return replica.decode_step_seconds(batch, context) * 1e3
    return (
        batch * replica.prefill_seconds(point["input"])
        + (point["output"] - 1) * replica.decode_step_seconds(batch, context)
    ) * 1e3


def test_calibration_has_at_least_three_points_from_two_sources():
    points = CALIBRATION["points"]
    assert len(points) >= 3 and len({p["source"] for p in points}) >= 2


@pytest.mark.parametrize("point", CALIBRATION["points"], ids=lambda p: p["name"])
def test_calibration_point_within_tolerance(point):
    predicted = predict(point)
    tolerance = CALIBRATION["held_out_tolerance"] if point.get("held_out") else CALIBRATION["tolerance"]
    assert abs(predicted / point["measured_ms"] - 1) <= tolerance, (
        f"{point['name']}: predicted {predicted:.1f} ms, measured {point['measured_ms']} ms"
    )


def _fit_points(engine: str) -> list:
    from llm_pd_eks_sizing.calibrate.fit import Point

    return [
        Point(
            p["kind"],
            _calibration_model(p["model"]),
            GPU_INSTANCE_TYPES[p["instance"]],
            p["tp"],
            p["batch"],
            p["input"],
            p["output"],
            p["measured_ms"],
            p["weight_bytes"],
            p["compute_scale"],
        )
        for p in CALIBRATION["points"]
        if p["engine"] == engine and not p.get("held_out")
    ]


@pytest.mark.parametrize("engine,dtype", [("nim", "fp8"), ("trtllm", "bf16")])
def test_fitted_rows_are_what_the_fit_gives_on_the_points_not_held_out(engine, dtype):
    from llm_pd_eks_sizing.calibrate.fit import fit

    row, refit = engine_constants(engine, dtype), fit(_fit_points(engine), "refit")
    for name in ("prefill_mfu", "prefill_step_s", "decode_mbu", "decode_step_s", "tp_efficiency"):
        assert getattr(refit, name) == pytest.approx(getattr(row, name), rel=0.02, abs=1e-4), name


def test_every_row_is_judged_by_a_held_out_point():
    held = {(p["engine"], p["dtype"]) for p in CALIBRATION["points"] if p.get("held_out")}
    assert {("vllm", "bf16"), ("nim", "fp8"), ("trtllm", "bf16")} <= held


def test_fit_recovers_known_constants_with_a_tp_term():
    # points made by the model itself at set constants, TP 1..8: the fit must find them again
    from dataclasses import replace

    from llm_pd_eks_sizing.calibrate.fit import Point, fit

    truth = replace(
        VLLM_BF16, prefill_step_s=0.012, decode_step_s=0.002, tp_efficiency=0.88, intercepts_per_layer=False
    )
    points = []
    for tp in (1, 2, 4, 8):
        replica = Replica(L70, P5, tp, constants=truth)
        if L70.weights_gib_bf16 / tp > 80 * 0.9:
            continue
        for tokens in (500, 4000):
            points.append(Point("ttft", L70, P5, tp, 1, tokens, 100, replica.prefill_seconds(tokens) * 1e3))
        points.append(Point("itl", L70, P5, tp, 8, 2000, 100, replica.decode_step_seconds(8, 2050) * 1e3))
    found = fit(points, "synthetic")
    assert found.tp_efficiency == pytest.approx(0.88, abs=0.011)
    assert found.prefill_step_s == pytest.approx(0.012, rel=0.1)
    assert found.decode_mbu == pytest.approx(truth.decode_mbu, rel=0.05)


def test_calibration_would_catch_a_wrong_formula():
    # the same points with decode at full bandwidth (MBU 1) miss: the tolerance is not vacuous
    point = next(p for p in CALIBRATION["points"] if p["kind"] == "itl")
    replica = Replica(
        MODELS[point["model"]],
        GPU_INSTANCE_TYPES[point["instance"]],
        point["tp"],
        weight_dtype_bytes=point["weight_bytes"],
        decode_mbu=1.0,
        constants=engine_constants(point["engine"], point["dtype"]),
    )
    predicted = replica.decode_step_seconds(1, point["input"] + point["output"] / 2) * 1e3
    assert abs(predicted / point["measured_ms"] - 1) > CALIBRATION["tolerance"]


# -- workload files -----------------------------------------------------------------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_has_an_example_workload_that_sizes(stack):
    workload = load_workload(WORKLOADS / f"{stack}.yaml")
    result = size(stack, stack_config(stack, ROOT), workload)
    assert result.disaggregated.feasible or result.aggregated.feasible


BAD = [
    (
        "requestRate: 0\ninputTokens: {mean: 10}\noutputTokens: {mean: 10}\nslo: {ttftMs: 1, itlMs: 1, percentile: 90}",
        "requestRate",
    ),
    (
        "requestRate: 1\ninputTokens: {mean: 10}\noutputTokens: {mean: 10}\n"
        "slo: {ttftMs: 1, itlMs: 1, percentile: 100}",
        "slo.percentile",
    ),
    (
        "requestRate: 1\ninputTokens: {mean: 10, sd: 3}\noutputTokens: {mean: 10}\n"
        "slo: {ttftMs: 1, itlMs: 1, percentile: 90}",
        "inputTokens.sd",
    ),
    ("requestRate: 1\ninputTokens: {mean: 10}\nslo: {ttftMs: 1, itlMs: 1, percentile: 90}", "outputTokens"),
    ("requestRate: [1\n", "line 2"),
    ("- just\n- a list\n", "expected a mapping"),
    (
        "requestRate: lots\ninputTokens: {mean: 10}\noutputTokens: {mean: 10}\n"
        "slo: {ttftMs: 1, itlMs: 1, percentile: 90}",
        "requestRate",
    ),
    # one strict model, like the stack config: no duplicate keys, no coercion, camelCase only
    (
        "requestRate: 1\nrequestRate: 9\ninputTokens: {mean: 10}\noutputTokens: {mean: 10}\n"
        "slo: {ttftMs: 1, itlMs: 1, percentile: 90}",
        "'requestRate' is defined twice",
    ),
    (
        "requestRate: 1\ninputTokens: {mean: 10, mean: 20}\noutputTokens: {mean: 10}\n"
        "slo: {ttftMs: 1, itlMs: 1, percentile: 90}",
        "'mean' is defined twice",
    ),
    (
        "requestRate: true\ninputTokens: {mean: 10}\noutputTokens: {mean: 10}\n"
        "slo: {ttftMs: 1, itlMs: 1, percentile: 90}",
        "requestRate: Input should be a valid number",
    ),
    (
        "requestRate: '2'\ninputTokens: {mean: 10}\noutputTokens: {mean: 10}\n"
        "slo: {ttftMs: 1, itlMs: 1, percentile: 90}",
        "requestRate",
    ),
    (
        "request_rate: 1\ninputTokens: {mean: 10}\noutputTokens: {mean: 10}\n"
        "slo: {ttftMs: 1, itlMs: 1, percentile: 90}",
        "request_rate: Extra inputs are not permitted",
    ),
    (
        "requestRate: 1\ninputTokens: {mean: 10}\noutputTokens: {mean: 10}\n"
        "slo: {ttft_ms: 1, itlMs: 1, percentile: 90}",
        "slo.ttft_ms",
    ),
    (
        "base: &b {mean: 10}\nrequestRate: 1\ninputTokens: *b\noutputTokens: {mean: 10}\n"
        "slo: {ttftMs: 1, itlMs: 1, percentile: 90}",
        "alias",
    ),
    ("requestRate: 1\ninputTokens: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
]


@pytest.mark.parametrize("text,needle", BAD, ids=[b[1] for b in BAD])
def test_bad_workload_files_fail_with_one_line_usage(tmp_path, capsys, text, needle):
    path = tmp_path / "w.yaml"
    path.write_text(text)
    code = run("size", size_cli.main, ["--stack", "dev", "--workload", str(path)])
    err = capsys.readouterr().err
    assert code == Exit.USAGE
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_directory_or_huge_file_as_workload_is_usage(tmp_path, capsys):
    assert run("size", size_cli.main, ["--stack", "dev", "--workload", str(tmp_path)]) == Exit.USAGE
    assert "is a directory" in capsys.readouterr().err
    big = tmp_path / "big.yaml"
    big.write_text("#" * (200 * 1024))
    assert run("size", size_cli.main, ["--stack", "dev", "--workload", str(big)]) == Exit.USAGE
    assert "larger than" in capsys.readouterr().err


def test_missing_workload_file_is_usage(tmp_path, capsys):
    assert run("size", size_cli.main, ["--stack", "dev", "--workload", str(tmp_path / "nope.yaml")]) == Exit.USAGE
    assert "no such workload file" in capsys.readouterr().err


def test_unknown_stack_is_usage(capsys):
    code = run("size", size_cli.main, ["--stack", "nostack", "--workload", str(WORKLOADS / "dev.yaml")])
    assert code == Exit.USAGE and "no stack file" in capsys.readouterr().err


# -- the CLI and --write -----------------------------------------------------------------------------------
def test_cli_prints_both_layouts_the_verdict_and_the_band(capsys):
    code = run("size", size_cli.main, ["--stack", "prod", "--workload", str(WORKLOADS / "prod.yaml")])
    out = capsys.readouterr().out
    assert code == Exit.OK
    for needle in (
        "disaggregated (P:D",
        "aggregated (no disaggregation",
        "verdict:",
        "per million output tokens",
        "per rank (TP 8, 4 EFA interface(s) of 100 Gbit/s each)",
        "line-rate bound 400 Gbit/s",
        "NIXL/EFA at 0.192 of line rate 76.8 Gbit/s",
        "one TCP flow 10 Gbit/s",
    ):
        assert needle in out


def _checkout(tmp_path: Path) -> Path:
    for name in ("Pulumi.yaml", *(f"Pulumi.{s}.yaml" for s in STACKS)):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(WORKLOADS, tmp_path / "workloads")  # the workloads the preview prices
    return tmp_path


def test_write_updates_bounds_keeps_comments_and_validates(tmp_path, capsys):
    root = _checkout(tmp_path)
    before = (root / "Pulumi.prod.yaml").read_text()
    code = run(
        "size",
        size_cli.main,
        ["--stack", "prod", "--workload", str(WORKLOADS / "prod.yaml"), "--write", "--root", str(root)],
    )
    assert code == Exit.OK, capsys.readouterr().err
    after = (root / "Pulumi.prod.yaml").read_text()
    comments = [line.strip() for line in before.splitlines() if line.strip().startswith("#") or " # " in line]
    assert comments and all(any(c in line for line in after.splitlines()) for c in comments)
    config = stack_config("prod", root)  # still a valid stack, read as the program reads it
    result = size("prod", config, load_workload(WORKLOADS / "prod.yaml"))
    recommended = result.recommended()
    assert recommended is not None and config.serving.mode == recommended.mode  # the verdict's mode, written
    assert recommended.mode == "aggregated"  # prod's workload: 3 aggregated nodes against 4 for P/D
    assert f"serving.mode={recommended.mode}" in capsys.readouterr().out
    side = recommended.side("aggregated")
    assert config.serving.aggregated.max_replicas == side.replicas
    assert config.serving.aggregated.tensor_parallel_size == side.tp
    assert config.gpu_nodes.max_size >= recommended.nodes
    assert "prefill: {tensorParallelSize: 8" in after  # flow style kept
    # Serve autoscaling: the target is what a sized replica holds (Little's law), the cap above it
    assert config.serving.aggregated.target_ongoing_requests == math.ceil(side.concurrency)
    assert config.serving.aggregated.max_ongoing_requests > config.serving.aggregated.target_ongoing_requests
    assert config.serving.aggregated.upscale_delay_s == 30.0 and config.serving.aggregated.downscale_delay_s == 600.0


def test_write_refuses_a_workload_the_preview_does_not_price(tmp_path, capsys):
    root = _checkout(tmp_path)
    other = tmp_path / "other.yaml"
    other.write_text((WORKLOADS / "dev.yaml").read_text())
    before = (root / "Pulumi.prod.yaml").read_text()
    code = run("size", size_cli.main, ["--stack", "prod", "--workload", str(other), "--write", "--root", str(root)])
    err = capsys.readouterr().err
    assert code == Exit.USAGE and "--write sizes for workloads/prod.yaml, the workload the preview prices" in err
    assert (root / "Pulumi.prod.yaml").read_text() == before


def test_the_routing_lines_follow_the_verdict(capsys):
    config = stack_config("prod", ROOT)
    result = size("prod", config, load_workload(WORKLOADS / "prod.yaml"))
    lines = "\n".join(size_cli.routing_lines(result))
    assert result.recommended().mode == "aggregated"
    assert (
        lines.index("for serving.mode aggregated (the verdict above)")
        < lines.index("not the verdict's mode, for comparison: with serving.mode disaggregated")
        < lines.index("decodeOnlyBelowTokens at this load")
    )


def test_write_finds_keys_spelt_without_the_project_prefix(tmp_path, capsys):
    # The Pulumi CLI reads `serving:` as `llm-pd-eks:serving`; so does the writer (no KeyError, exit 70).
    root = _checkout(tmp_path)
    stack_path = root / "Pulumi.prod.yaml"
    stack_path.write_text(stack_path.read_text().replace(f"{PROJECT}:serving:", "serving:"))
    assert f"{PROJECT}:serving:" not in stack_path.read_text()
    code = run(
        "size",
        size_cli.main,
        ["--stack", "prod", "--workload", str(WORKLOADS / "prod.yaml"), "--write", "--root", str(root)],
    )
    assert code == Exit.OK, capsys.readouterr().err
    config = stack_config("prod", root)
    result = size("prod", config, load_workload(WORKLOADS / "prod.yaml"))
    sized = result.recommended().side("aggregated")  # prod's verdict: aggregated
    assert config.serving.aggregated.max_replicas == sized.replicas
    written = yaml.safe_load(stack_path.read_text())["config"]
    assert f"{PROJECT}:serving" not in written  # written where it stood, under the unprefixed key
    assert written["serving"]["mode"] == "aggregated"
    assert written["serving"]["aggregated"]["maxReplicas"] == sized.replicas


def test_write_refuses_a_section_given_with_and_without_the_prefix(tmp_path, capsys):
    root = _checkout(tmp_path)
    stack_path = root / "Pulumi.prod.yaml"
    text = stack_path.read_text()
    stack_path.write_text(text.replace("config:\n", "config:\n  gpuNodes: {}\n", 1))
    code = run(
        "size",
        size_cli.main,
        ["--stack", "prod", "--workload", str(WORKLOADS / "prod.yaml"), "--write", "--root", str(root)],
    )
    err = capsys.readouterr().err
    assert code == Exit.USAGE and "gpuNodes" in err and err.count("\n") == 1, err
    assert stack_path.read_text() == text.replace("config:\n", "config:\n  gpuNodes: {}\n", 1)  # nothing written


def test_write_with_json_prints_one_json_document_and_nothing_else(tmp_path, capsys):
    import json

    root = _checkout(tmp_path)
    code = run(
        "size",
        size_cli.main,
        ["--stack", "prod", "--workload", str(WORKLOADS / "prod.yaml"), "--write", "--json", "--root", str(root)],
    )
    out = capsys.readouterr().out
    assert code == Exit.OK
    document = json.loads(out)  # the whole of stdout parses
    assert document["written"]["mode"] == document["recommended"] == "aggregated"
    assert document["written"]["aggregated"]["maxReplicas"] == document["aggregated"]["sides"][0]["replicas"]
    assert "targetOngoingRequests" in document["written"]["aggregated"]


def test_make_size_write_json_stdout_is_pure_json(tmp_path):
    import json

    root = _checkout(tmp_path)  # a copy: the tool writes the stack file beside its own code
    for name in ("Makefile", "requirements.txt", "requirements-preview.txt", "requirements-dev.txt"):
        shutil.copy(ROOT / name, root / name)
    for name in ("llm_pd_eks_tools", "llm_pd_eks_sizing", "llm_pd_eks"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run(
        [
            "make",
            "-s",
            "size",
            "STAMP=",
            f"PY={sys.executable}",
            "STACK=prod",
            f"WORKLOAD={WORKLOADS / 'prod.yaml'}",
            "WRITE=1",
            "JSON=1",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["written"]["gpuNodes"]["maxSize"] >= 2


# -- the point query ----------------------------------------------------------------------------------
def _point(*extra: str) -> subprocess.CompletedProcess:
    args = [
        "--point",
        "--model",
        "meta-llama/Llama-3.3-70B-Instruct",
        "--instance",
        "p5.48xlarge",
        "--tp",
        "8",
        "--input",
        "6000",
        "--output",
        "400",
        "--concurrency",
        "16",
        *extra,
    ]
    return subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_sizing.size", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_point_query_answers_in_json_with_the_five_figures():
    import json

    for mode in ("aggregated", "disaggregated"):
        proc = _point("--mode", mode, "--json")
        assert proc.returncode == 0, proc.stderr
        answer = json.loads(proc.stdout)
        for key in ("ttft_ms", "itl_ms", "e2e_ms", "output_tokens_per_s", "kv_transfer_ms"):
            assert answer[key] >= 0, key
        assert answer["e2e_ms"] == pytest.approx(answer["ttft_ms"] + 399 * answer["itl_ms"])
        # closed loop: Little's law, concurrency = rate x e2e
        assert answer["output_tokens_per_s"] / 400 * answer["e2e_ms"] / 1e3 == pytest.approx(16, rel=1e-3)
        assert (answer["kv_transfer_ms"] > 0) == (mode == "disaggregated")


def test_point_query_one_client_is_prefill_handoff_and_first_step():
    from llm_pd_eks_sizing.model import point_query
    from llm_pd_eks_sizing.model.kv import kv_transfer

    answer = point_query(L70, P5, 8, 6000, 400, 1, "disaggregated")
    replica = Replica(L70, P5, 8)
    kv = kv_transfer(L70, 6000, 2, P5, 8)
    assert answer.kv_transfer_ms == pytest.approx(kv.seconds * 1e3)
    # one client, nothing queued: the prompt alone, its KV handoff, the decode replica's first step
    prefill = replica.step_seconds(0, 0, 6000, 3000)
    first = replica.decode_step_seconds(1, 6200)
    assert answer.ttft_ms == pytest.approx((prefill + kv.seconds + first) * 1e3)
    assert answer.itl_ms == pytest.approx(first * 1e3)
    more = point_query(L70, P5, 8, 6000, 400, 32, "disaggregated")
    assert more.itl_ms > answer.itl_ms and more.output_tokens_per_s > answer.output_tokens_per_s


POINT_BAD = [
    (["--point"], "--point needs --model"),
    (
        [
            "--point",
            "--model",
            "nope/x",
            "--instance",
            "p5.48xlarge",
            "--tp",
            "8",
            "--input",
            "1",
            "--output",
            "1",
            "--concurrency",
            "1",
        ],
        "not a model this project knows",
    ),
    (
        [
            "--point",
            "--model",
            "meta-llama/Llama-3.3-70B-Instruct",
            "--instance",
            "m7i.xlarge",
            "--tp",
            "8",
            "--input",
            "1",
            "--output",
            "1",
            "--concurrency",
            "1",
        ],
        "choose one of",
    ),
    (
        [
            "--point",
            "--model",
            "meta-llama/Llama-3.3-70B-Instruct",
            "--instance",
            "p5.48xlarge",
            "--tp",
            "1",
            "--input",
            "1",
            "--output",
            "1",
            "--concurrency",
            "1",
        ],
        "runs at TP 2, 4, 8",
    ),
    (["--point", "--tp", "three"], "not a whole number"),
    (["--point", "--tp", "0"], "must be at least 1"),
    (["--point", "--mode", "sideways"], "invalid choice"),
    (["--stack", "prod"], "--stack and --workload are required"),
    (["--bogus"], "unrecognized arguments"),
]


@pytest.mark.parametrize("argv,needle", POINT_BAD, ids=[b[1] for b in POINT_BAD])
def test_point_query_bad_arguments_are_one_line_exit_2(capsys, argv, needle):
    code = run("size", size_cli.main, argv)
    err = capsys.readouterr().err
    assert code == Exit.USAGE and needle in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_write_refuses_when_the_disaggregated_layout_cannot_meet_the_objectives(tmp_path, capsys):
    root = _checkout(tmp_path)
    workload = root / "workloads" / "prod.yaml"  # the workload the preview prices
    workload.write_text(yaml.safe_dump({**GOOD, "slo": {"ttftMs": 1000, "itlMs": 5, "percentile": 90}}))
    before = (root / "Pulumi.prod.yaml").read_text()
    code = run("size", size_cli.main, ["--stack", "prod", "--workload", str(workload), "--write", "--root", str(root)])
    assert code == Exit.FAILED and "nothing written" in capsys.readouterr().err
    assert (root / "Pulumi.prod.yaml").read_text() == before


def test_module_entry_point_exits_with_usage_on_a_bad_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("requestRate: -1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_sizing.size", "--stack", "dev", "--workload", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == Exit.USAGE and "Traceback" not in proc.stderr


def test_kvband_as_dict_round_trips_for_the_preview():
    band = kv_band(L70, 1000, 2, P5, tp=8)
    d = band.as_dict()
    fields = (
        "tokens",
        "bytes",
        "tp",
        "interfaces_per_rank",
        "interface_gbps",
        "rdma",
        "efficiency",
        "measured_source",
        "tcp_gbps",
        "calibrated",
    )
    assert KvBand(**{k: d[k] for k in fields}) == band
    assert d["planning_seconds"] == band.planning_seconds


def test_exit_code_is_failed_only_when_no_layout_meets_the_objectives(tmp_path, capsys):
    tight = tmp_path / "tight.yaml"
    tight.write_text(yaml.safe_dump({**GOOD, "slo": {"ttftMs": 1000, "itlMs": 5, "percentile": 90}}))
    assert run("size", size_cli.main, ["--stack", "prod", "--workload", str(tight)]) == Exit.FAILED
    # staging: disaggregation cannot meet its TTFT over the unmeasured (TCP-floor) KV path, aggregated can
    assert run("size", size_cli.main, ["--stack", "staging", "--workload", str(WORKLOADS / "staging.yaml")]) == Exit.OK
    assert "cannot meet the objectives" in capsys.readouterr().out


def test_sizing_page_calibration_table_shows_what_the_model_predicts():
    section = (ROOT / "docs" / "sizing.md").read_text()
    rows = [line for line in section.splitlines() if line.startswith("| ") and " ms" not in line.split("|")[1]]
    shown = [float(cells.split("|")[3]) for cells in rows if cells.split("|")[3].strip().replace(".", "").isdigit()]
    assert shown == [round(predict(p), 1) for p in CALIBRATION["points"]]


def test_tp_options_are_powers_of_two_whose_shards_fit():
    from llm_pd_eks_sizing.model import tp_options

    assert tp_options(L70, P5) == [2, 4, 8]  # 131.5 GiB: 65.8 GiB a GPU at TP 2 fits 72 GiB of 80; TP 1 does not
    assert tp_options(L70, GPU_INSTANCE_TYPES["p4d.24xlarge"]) == [4, 8]  # 40 GiB GPUs
    assert tp_options(MODELS["Qwen/Qwen2.5-7B-Instruct"], GPU_INSTANCE_TYPES["g6e.12xlarge"]) == [1, 2, 4]


@pytest.mark.parametrize("stack", STACKS)
def test_placement_search_is_never_worse_than_the_stacks_tp(stack):
    result = size(stack, stack_config(stack, ROOT), load_workload(WORKLOADS / f"{stack}.yaml"))
    found = result.placement
    if result.disaggregated.feasible:
        assert found.disaggregated_nodes is not None and found.disaggregated_nodes <= result.disaggregated.nodes
    if result.aggregated.feasible:
        assert found.aggregated is not None and found.aggregated.nodes <= result.aggregated.nodes


def test_non_finite_numbers_are_refused():
    with pytest.raises(ToolError) as info:
        parse_workload({**GOOD, "requestRate": float("inf")})
    assert info.value.exit_code == Exit.USAGE and "requestRate" in str(info.value)


@pytest.mark.parametrize("instance", GPU_INSTANCE_TYPES.values(), ids=lambda t: t.name)
def test_catalog_sizing_figures_are_physical(instance):
    assert instance.peak_bf16_dense_tflops > 0 and instance.memory_bandwidth_gbytes_s > 0
    # ridge points (FLOPs per byte): A10G ~117, A100 ~150-200, H100 ~295, L40S ~419 -- a typo by 10x leaves the band
    assert 50 < instance.peak_bf16_dense_tflops * 1e3 / instance.memory_bandwidth_gbytes_s < 500
    assert instance.single_flow_tcp_gbps < instance.network_gbps
    if instance.nixl_efa_measured_gbps is not None:
        assert instance.nixl_efa_measured_gbps <= instance.network_gbps and instance.nixl_efa_measured_source
    else:
        assert instance.nixl_efa_measured_source is None


def test_disaggregated_ttft_counts_the_decode_replicas_first_step():
    from llm_pd_eks_sizing.model import size_prefill

    workload = parse_workload(GOOD)
    replica = Replica(L70, P5, 8)
    without, with_step = size_prefill(replica, workload, 0.0), size_prefill(replica, workload, 0.0, 0.05)
    assert without.replicas == with_step.replicas
    assert with_step.ttft_ms - without.ttft_ms == pytest.approx(50.0)
    result = _size("prod")
    decode_itl = result.disaggregated.side("decode").itl_ms
    # prod: TP 8 prefill; the handoff at the p-th prompt's message size (nixlbench's rate for it)
    from llm_pd_eks_sizing.model.kv import kv_transfer

    kv = kv_transfer(L70, result.band.tokens, 2, P5, 8)
    recomputed = size_prefill(replica, workload, kv.seconds / result.band.tokens, decode_itl / 1e3)
    assert result.disaggregated.side("prefill").ttft_ms == pytest.approx(recomputed.ttft_ms)


# -- GPU memory from EC2's data, the H200 row from the probe ------------------------------------------------
def test_gpu_memory_is_ec2s_figure_as_moto_carries_it():
    import gzip
    import json
    import os

    import moto

    from llm_pd_eks_sizing.model import gpu_memory_gib

    data = json.loads(
        gzip.open(os.path.join(os.path.dirname(moto.__file__), "ec2", "resources", "instance_types.json.gz")).read()
    )
    for name, instance in GPU_INSTANCE_TYPES.items():  # the one GPU table, as EC2's own data has it
        assert data[name]["GpuInfo"]["Gpus"][0]["MemoryInfo"]["SizeInMiB"] == instance.gpu_memory_mib, name
        assert gpu_memory_gib(instance) == instance.gpu_memory_mib / 1024
    assert gpu_memory_gib(GPU_INSTANCE_TYPES["g6e.12xlarge"]) == pytest.approx(44.7, abs=0.05)  # not 48


def test_vllm_bf16_row_is_bounded_by_the_h200_probe():
    import json

    probe = json.loads((ROOT / "llm_pd_eks_sizing" / "calibrate" / "data" / "h200-probe.json").read_text())
    assert probe["device"]["name"] == "NVIDIA H200"
    peak, bandwidth = GPU_INSTANCE_TYPES["p5en.48xlarge"].peak_bf16_dense_tflops, 4800.0
    gemm = [r["tflops"] / peak for r in probe["gemm"] if r["tp"] == 1 and r["tokens"] >= 1024]
    attention = [r["tflops"] / peak for r in probe["attention"] if r["tp"] == 1]
    # prefill MFU below the GEMMs' own fraction of peak (attention and non-GEMM ops pull it down)
    assert max(attention) < VLLM_BF16.prefill_mfu < min(gemm)
    # a decode step streams the weights no faster than the device copies memory
    assert VLLM_BF16.decode_mbu < probe["copy"]["gb_per_s_read_plus_write"] / bandwidth
    tp8 = next(r["tflops"] for r in probe["gemm"] if r["tp"] == 8 and r["tokens"] == 1024)
    tp1 = next(r["tflops"] for r in probe["gemm"] if r["tp"] == 1 and r["tokens"] == 1024)
    assert VLLM_BF16.tp_efficiency == pytest.approx((tp8 / tp1) ** (1 / 3), abs=0.01)
