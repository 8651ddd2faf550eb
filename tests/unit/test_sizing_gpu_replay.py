"""The GPU calibration of the release's engine, replayed: the stacks' vLLM row is the fit the saved run
gives, and the point query meets the levels the fit held out (llm_pd_eks_sizing/calibrate/data/
gpu-calibration-2026-12-04/: vLLM 0.26.0 on one H200, Llama-3.1-8B and Qwen2.5-32B)."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
from helpers import ROOT

from llm_pd_eks_sizing.calibrate import gpu_calibration, gpu_fit
from llm_pd_eks_sizing.model import VLLM_BF16
from llm_pd_eks_sizing.model.engine import CALIBRATION_RUN
from llm_pd_eks_tools.core.cli import Exit, ToolError, run

RUN = ROOT / CALIBRATION_RUN
FILES = sorted(RUN.glob("*.json"))
MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-32B-Instruct")
TOLERANCE, LIMIT = gpu_fit.TOLERANCE, gpu_fit.LIMIT
# held-out levels the row misses by more than the tolerance (docs/sizing.md, "the GPU calibration"): the
# 8B's short prompts wait ~7 ms longer for their first token than its prefill-only levels show, and two
# clients of the 32B drift apart after their first wave instead of sharing a step
KNOWN_MISSES = {
    ("meta-llama/Llama-3.1-8B-Instruct", "sweep-in128-c1", "ttft_ms"),
    ("meta-llama/Llama-3.1-8B-Instruct", "sweep-in128-c2", "ttft_ms"),
    ("meta-llama/Llama-3.1-8B-Instruct", "sweep-in128-c8", "ttft_ms"),
    ("meta-llama/Llama-3.1-8B-Instruct", "sweep-in128-c256", "ttft_ms"),
    ("meta-llama/Llama-3.1-8B-Instruct", "sweep-in1024-c32", "ttft_ms"),
    ("meta-llama/Llama-3.1-8B-Instruct", "sweep-in1024-c256", "ttft_ms"),
    ("Qwen/Qwen2.5-32B-Instruct", "sweep-in1024-c2", "ttft_ms"),
    ("Qwen/Qwen2.5-32B-Instruct", "sweep-in1024-c4", "ttft_ms"),
    ("Qwen/Qwen2.5-32B-Instruct", "harness-in1024-c4", "ttft_ms"),
}


@pytest.fixture(scope="module")
def record() -> dict:
    return gpu_fit.load_records(FILES)


@pytest.fixture(scope="module")
def judged(record) -> list[tuple[str, gpu_fit.Judged]]:
    model, level = gpu_fit.ceiling_level(record)
    return [
        (m, j)
        for m, entry in record["models"].items()
        for j in gpu_fit.judge(m, entry, record["instance_type"], VLLM_BF16, (model, level["label"]))
    ]


def test_the_run_is_the_releases_engine_on_the_gpu_of_p5en():
    for path in FILES:
        found = json.loads(path.read_text())
        versions = found["versions"]
        assert (versions["vllm"], versions["torch"]) == ("0.26.0", "2.11.0+cu130"), path.name
        assert versions["gpu"].startswith("NVIDIA H200") and found["instance_type"] == "p5en.48xlarge"
        assert found["engine"] == {
            "dtype": "bfloat16",
            "prefix_caching": False,
            "load_format": "dummy",
            "chunked_prefill": "default",
        }
        assert found["date_utc"].startswith("2026-12-04")
    assert (RUN / "SOURCE").is_file()


def test_every_planned_level_was_measured_once_or_skipped_for_its_size(record):
    assert sorted(record["models"]) == sorted(MODELS)
    planned = {run[1] for run in gpu_calibration.plan()}
    for model_id, entry in record["models"].items():
        labels = Counter(run["label"] for run in entry["runs"])
        assert max(labels.values()) == 1 and set(labels) <= planned
        missing = planned - set(labels)
        assert missing == {"sweep-in8192-c128", "sweep-in8192-c256"}, (model_id, missing)
        assert all(run.get("failed", 0) == 0 and not run.get("error") for run in entry["runs"])


def test_the_engine_limits_are_what_the_servers_logs_state(record, tmp_path):
    for path, log in zip(FILES, ("server-8b.log.gz", "server-32b-rest.log.gz", "server-32b.log.gz")):
        plain = tmp_path / log.removesuffix(".gz")
        plain.write_bytes(gzip.decompress((RUN / log).read_bytes()))
        (entry,) = json.loads(path.read_text())["models"].values()
        assert gpu_calibration.engine_limits(plain) == entry["engine"], log
        assert entry["engine"]["max_num_batched_tokens"] == 8192  # the budget the stepped scheduler uses


def test_the_stacks_row_is_the_fit_the_saved_run_gives(record):
    found = gpu_fit.fit_stream(record, gpu_fit.fit_row(record, "replay"))
    assert found.intercepts_per_layer and VLLM_BF16.intercepts_per_layer
    for name in ("prefill_mfu", "prefill_step_s", "decode_mbu", "decode_step_s", "stream_token_s"):
        assert getattr(found, name) == pytest.approx(getattr(VLLM_BF16, name), rel=2e-3), name
    assert VLLM_BF16.tp_efficiency == 0.90  # not in the run (TP 1): the kernel probe's


def test_each_models_own_fit_agrees_with_the_one_row_a_layer(record):
    # one row for both depths holds because the per-step cost beyond the roofline scales with the layers
    row = gpu_fit.fit_row(record, "replay")
    for model_id, entry in record["models"].items():
        alone = gpu_fit.fit_model(model_id, entry, record["instance_type"], "replay", record["date_utc"])
        layers = gpu_fit_model_layers(model_id)
        assert alone.prefill_step_s == pytest.approx(row.prefill_step_s * layers, rel=0.1), model_id
        assert alone.decode_step_s == pytest.approx(row.decode_step_s * layers, rel=0.25), model_id
        assert alone.prefill_mfu == pytest.approx(row.prefill_mfu, rel=0.06), model_id
        assert alone.decode_mbu == pytest.approx(row.decode_mbu, rel=0.04), model_id


def gpu_fit_model_layers(model_id: str) -> int:
    from llm_pd_eks.models import MODELS as TABLE

    return TABLE[model_id].layers


@pytest.mark.parametrize("model_id", MODELS)
def test_the_held_out_levels_meet_the_point_query(judged, model_id):
    mine = [j for m, j in judged if m == model_id]
    assert len(mine) >= 3 * 27  # the sweep's levels and the harness's (less the one fitted), three metrics each
    within = [j for j in mine if abs(j.ratio - 1) <= TOLERANCE]
    assert len(within) >= 0.9 * len(mine), [(j.label, j.metric, round(j.ratio, 2)) for j in mine if j not in within]
    assert all(1 / LIMIT <= j.ratio <= LIMIT for j in mine)  # none beyond 2x


def test_the_misses_are_the_known_ones(judged):
    misses = {(m, j.label, j.metric) for m, j in judged if abs(j.ratio - 1) > TOLERANCE}
    assert misses <= KNOWN_MISSES, misses - KNOWN_MISSES
    now_fit = KNOWN_MISSES - misses
    assert not now_fit, f"now within the tolerance, take them off KNOWN_MISSES and docs/sizing.md: {now_fit}"


def test_itl_and_throughput_meet_every_held_out_level(judged):
    assert all(abs(j.ratio - 1) <= TOLERANCE for _, j in judged if j.metric != "ttft_ms")


def test_make_calibrates_client_measures_what_vllms_own_benchmark_measures(record):
    for model_id, entry in record["models"].items():
        runs = {run["label"]: run for run in entry["runs"]}
        for clients in gpu_calibration.HARNESS_CLIENTS:
            harness, bench = runs[f"harness-in1024-c{clients}"], runs[f"sweep-in1024-c{clients}"]
            assert harness["mean_itl_ms"] == pytest.approx(bench["mean_itl_ms"], rel=0.03), (model_id, clients)
            # the first token: the same within the first wave's share (the harness sends 4 prompts a client)
            assert harness["mean_ttft_ms"] == pytest.approx(bench["mean_ttft_ms"], rel=0.2), (model_id, clients)
            assert harness["total_output_tokens"] == harness["prompts"] * harness["output_len"]


def test_the_fit_prints_the_row_and_every_held_out_level(capsys):
    assert run("gpu_fit", gpu_fit.main, [str(p) for p in FILES]) == Exit.OK
    out = capsys.readouterr().out
    assert out.startswith("one row, intercepts a layer: prefill MFU 0.658")
    assert out.count(" ok\n") + out.count(" MISS\n") == out.count("\n  sweep-") + out.count("\n  harness-")
    assert "OFF 2x" not in out


def test_a_level_measured_in_two_parts_is_refused(tmp_path):
    twice = tmp_path / "again.json"
    twice.write_bytes(FILES[0].read_bytes())
    with pytest.raises(ToolError) as info:
        gpu_fit.load_records([FILES[0], twice])
    assert info.value.exit_code == Exit.USAGE and "is measured twice" in str(info.value)
