"""`make calibrate`: the sweep against a loopback fake that streams with set timings, the fit, the
calibration file make size and the preview then use, and every way a run fails writing nothing."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from calibrate_fakes import FakeOpenAi
from helpers import DATA, ROOT, STACKS

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.models import MODELS
from llm_pd_eks.system_nodes import SYSTEM_LABELS
from llm_pd_eks_sizing import size as size_cli
from llm_pd_eks_sizing.calibrate import cli as calibrate_cli
from llm_pd_eks_sizing.calibrate.bench import SweepPoint, check_result, parse_nixlbench, sweep_plan
from llm_pd_eks_sizing.calibrate.job import RESULT_BEGIN, RESULT_END, calibration_job, parse_results
from llm_pd_eks_sizing.model import VLLM_BF16, Replica, load_calibration, load_workload, size
from llm_pd_eks_tools.core.cli import Exit, ToolError, run
from llm_pd_eks_tools.core.stack import stack_config

CALIBRATION_DATA = DATA / "sizing-calibration"
QWEN = MODELS["Qwen/Qwen2.5-7B-Instruct"]  # dev: Qwen 7B on p4d.24xlarge, TP 1
P4D = GPU_INSTANCE_TYPES["p4d.24xlarge"]
# a slow decode (MBU 0.15: ~80 ms a token) keeps sleep overshoot on a loaded machine small beside it
TRUTH = replace(
    VLLM_BF16,
    prefill_mfu=0.5,
    prefill_step_s=0.02,
    decode_mbu=0.15,
    decode_step_s=0.004,
    intercepts_per_layer=False,  # make calibrate fits a stack's one model: intercepts a step
)
WORKLOAD = {
    "requestRate": 1,
    "inputTokens": {"mean": 1200},
    "outputTokens": {"mean": 10},
    "slo": {"ttftMs": 2000, "itlMs": 100, "percentile": 90},
}


def _checkout(tmp_path: Path) -> Path:
    for name in ("Pulumi.yaml", *(f"Pulumi.{s}.yaml" for s in STACKS)):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "dev.yaml").write_text(yaml.safe_dump(WORKLOAD))
    return tmp_path


def _fake(**kwargs) -> FakeOpenAi:
    replica = Replica(QWEN, P4D, 1, constants=TRUTH)
    return FakeOpenAi(
        ttft=replica.prefill_seconds, itl=lambda streams, ctx: replica.decode_step_seconds(streams, ctx), **kwargs
    )


def _calibrate(root: Path, endpoint: str, *extra: str) -> int:
    nixl = str(CALIBRATION_DATA / "nixlbench-libfabric.txt")
    return run(
        "calibrate",
        calibrate_cli.main,
        ["--stack", "dev", "--endpoint", endpoint, "--root", str(root), "--nixlbench-output", nixl, *extra],
    )


def test_calibrate_against_the_fake_fits_its_constants_and_make_size_uses_them(tmp_path, capsys):
    root = _checkout(tmp_path)
    fake = _fake()
    try:
        code = _calibrate(root, fake.url, "--timeout", "300")
    finally:
        fake.close()
    err = capsys.readouterr().err
    assert code == Exit.OK, err
    assert "[calibrate] [1/4] in300-out10-c1" in err and "[calibrate] wrote calibration/dev.yaml" in err  # progress
    found = load_calibration("dev", root, stack_config("dev", root))
    assert found is not None and found.model_id == QWEN.model_id and found.instance_type == "p4d.24xlarge"
    # the fake streams the model at TRUTH: the fit finds it back (sleep overshoot on a loaded machine only
    # ever makes the measured times longer, so the efficiencies may come out a little low)
    c = found.constants
    assert c.prefill_mfu == pytest.approx(TRUTH.prefill_mfu, rel=0.25)
    assert c.decode_mbu == pytest.approx(TRUTH.decode_mbu, rel=0.25)
    # nixlbench: 5.61 GB/s per worker over one rank's half interface (50 Gbit/s line rate) on p4d
    assert found.kv_efficiency == pytest.approx(5.611392 * 8 / 50)
    assert found.kv_rows()[-1] == (67108864, pytest.approx(5.611392)) and len(found.kv_rows()) == 5
    # make size and the preview read it, and say so
    result = size("dev", stack_config("dev", root), load_workload(root / "workloads" / "dev.yaml"), root)
    assert result.calibration == "calibration/dev.yaml" and result.band.calibrated
    assert result.band.efficiency == pytest.approx(found.kv_efficiency)
    code = run(
        "size",
        size_cli.main,
        ["--stack", "dev", "--workload", str(root / "workloads" / "dev.yaml"), "--root", str(root)],
    )
    assert code == Exit.OK and "from calibration/dev.yaml (make calibrate)" in capsys.readouterr().out


def test_a_partial_run_writes_nothing(tmp_path, capsys):
    root = _checkout(tmp_path)
    fake = _fake(fail_after=3)  # the fourth request gets HTTP 500
    try:
        code = _calibrate(root, fake.url, "--timeout", "300")
    finally:
        fake.close()
    err = capsys.readouterr().err
    assert code == Exit.FAILED and "nothing written" in err and "HTTP 500" in err
    assert not (root / "calibration").exists()


def test_a_run_past_its_timeout_stops_and_writes_nothing(tmp_path, capsys):
    root = _checkout(tmp_path)
    fake = _fake(stall_s=30.0)  # every first token 30 s late
    try:
        code = _calibrate(root, fake.url, "--timeout", "2")
    finally:
        fake.close()
    assert code == Exit.FAILED and "nothing written" in capsys.readouterr().err
    assert not (root / "calibration").exists()


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--stack", "dev", "--timeout", "nan"], "expected seconds"),
        (["--stack", "dev", "--timeout", "0"], "expected seconds"),
        (["--stack", "nostack", "--endpoint", "http://127.0.0.1:9"], "no stack file"),
        (["--stack", "dev", "--endpoint", "ftp://x"], "expected http://host:port"),
        (
            ["--stack", "dev", "--endpoint", "http://127.0.0.1:9", "--nixlbench-output", "/nonexistent/nixl.txt"],
            "--nixlbench-output",
        ),
    ],
)
def test_bad_arguments_are_one_line_exit_2(tmp_path, capsys, argv, needle):
    root = _checkout(tmp_path)
    code = run("calibrate", calibrate_cli.main, [*argv, "--root", str(root)])
    err = capsys.readouterr().err
    assert code == Exit.USAGE and needle in err, err
    assert [line for line in err.splitlines() if not line.startswith("[calibrate]")] == [err.strip().splitlines()[-1]]
    assert not (root / "calibration").exists()


def test_a_nixlbench_output_without_its_table_is_refused_before_any_run(tmp_path, capsys):
    root = _checkout(tmp_path)
    bad = tmp_path / "nixl.txt"
    bad.write_text("Backend: LIBFABRIC\nerror: no EFA device\n")
    code = run(
        "calibrate",
        calibrate_cli.main,
        ["--stack", "dev", "--endpoint", "http://127.0.0.1:9", "--nixlbench-output", str(bad), "--root", str(root)],
    )
    assert code == Exit.USAGE and "no result rows" in capsys.readouterr().err


def test_nixlbench_table_is_read_by_its_header():
    assert parse_nixlbench((CALIBRATION_DATA / "nixlbench-libfabric.txt").read_text()) == pytest.approx(5.611392)


def test_a_recorded_vllm_bench_result_is_read_and_a_partial_one_refused():
    recorded = json.loads((CALIBRATION_DATA / "vllm-bench-result.json").read_text())
    point = SweepPoint(137, 195, 5, prompts_per_client=2)  # 10 prompts, as recorded
    values = check_result(point, recorded)
    assert values["mean_ttft_ms"] == pytest.approx(126.869, rel=1e-4)
    with pytest.raises(ToolError, match="only 9 of 10 requests completed"):
        check_result(point, {**recorded, "completed": 9})
    with pytest.raises(ToolError, match="lacks mean_itl_ms"):
        check_result(point, {k: v for k, v in recorded.items() if k != "mean_itl_ms"})


def test_the_job_runs_vllm_bench_serve_on_the_system_nodes_and_its_log_is_read():
    config = stack_config("prod", ROOT)
    plan = sweep_plan(load_workload(ROOT / "workloads" / "prod.yaml"))
    job = calibration_job(
        "prod", config.serving.image, config.serving.model_id, config.serving.endpoint_name, plan, 1800
    )
    spec = job["spec"]
    assert job["apiVersion"] == "batch/v1" and spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 1800
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == SYSTEM_LABELS and pod["restartPolicy"] == "Never"
    script = pod["containers"][0]["command"][-1]
    for flag in (
        "vllm bench serve",
        "--dataset-name random",
        "--random-input-len 6000",
        "--ignore-eos",
        "--max-concurrency 16",
        "--request-rate inf",
        "--save-result",
        "--result-filename",
    ):
        assert flag in script, flag
    assert f"http://{config.serving.endpoint_name}.llm-serving.svc:8000" in script
    recorded = (CALIBRATION_DATA / "vllm-bench-result.json").read_text()
    log = "\n".join(f"{RESULT_BEGIN} {p.name}\n{recorded}\n{RESULT_END}" for p in plan)
    assert set(parse_results(log, plan)) == {p.name for p in plan}
    with pytest.raises(ToolError, match="lacks results"):
        parse_results(log.split(RESULT_END)[0], plan)


def test_a_calibration_for_another_model_or_type_is_refused(tmp_path, capsys):
    root = _checkout(tmp_path)
    (root / "calibration").mkdir()
    good = {
        "stack": "dev",
        "measuredAt": "2026-12-01T00:00:00Z",
        "modelId": "meta-llama/Llama-3.3-70B-Instruct",
        "instanceType": "p5.48xlarge",
        "tensorParallelSize": 8,
        "points": 5,
        "source": "x",
        "constants": {
            "prefillMfu": 0.6,
            "prefillStepS": 0.01,
            "decodeMbu": 0.7,
            "decodeStepS": 0.001,
            "tpEfficiency": 0.9,
        },
    }
    (root / "calibration" / "dev.yaml").write_text(yaml.safe_dump(good))
    code = run(
        "size",
        size_cli.main,
        ["--stack", "dev", "--workload", str(root / "workloads" / "dev.yaml"), "--root", str(root)],
    )
    assert code == Exit.USAGE and "re-run make calibrate STACK=dev" in capsys.readouterr().err
    (root / "calibration" / "dev.yaml").write_text(yaml.safe_dump({**good, "constants": {"prefillMfu": 2}}))
    code = run(
        "size",
        size_cli.main,
        ["--stack", "dev", "--workload", str(root / "workloads" / "dev.yaml"), "--root", str(root)],
    )
    assert code == Exit.USAGE and "calibration/dev.yaml" in capsys.readouterr().err


def _instant(**kwargs) -> FakeOpenAi:
    return FakeOpenAi(ttft=lambda tokens: 0.0, itl=lambda streams, ctx: 0.0, **kwargs)


@pytest.mark.parametrize(
    "fake,needle",
    [
        ({}, "at or past the GPU's roofline"),  # streams instantly: no roofline allows it
        ({"error_line": True}, "streamed an error line"),
        ({"token_factor": 10}, "tokens streamed for max_tokens 10"),
        # the server counts three tokens a prompt word (another vocabulary): not the point's prompt length
        ({"prompt_factor": 3}, "input tokens a request against"),
    ],
    ids=["instant", "error-line", "ten-times-the-tokens", "server-counts-another-prompt"],
)
def test_an_impossible_measurement_writes_nothing(tmp_path, capsys, fake, needle):
    root = _checkout(tmp_path)
    server = _instant(**fake)
    try:
        code = _calibrate(root, server.url, "--timeout", "120")
    finally:
        server.close()
    err = capsys.readouterr().err
    assert code == Exit.FAILED and needle in err and "nothing written" in err, err
    assert not (root / "calibration").exists()


def test_a_vllm_bench_result_that_cannot_be_this_point_is_refused():
    recorded = json.loads((CALIBRATION_DATA / "vllm-bench-result.json").read_text())
    point = SweepPoint(137, 195, 5, prompts_per_client=2)
    with pytest.raises(ToolError, match="streams instantly"):
        check_result(point, {**recorded, "mean_ttft_ms": 0.0})
    with pytest.raises(ToolError, match="output tokens a request against 195 asked"):
        check_result(point, {**recorded, "total_output_tokens": 19450})
    with pytest.raises(ToolError, match="requests failed"):
        check_result(point, {**recorded, "failed": 1})


@pytest.mark.parametrize(
    "bandwidth,needle", [("nan", "not a positive number"), ("-1.0", "not a positive number"), ("80.0", "line rate")]
)
def test_an_impossible_nixlbench_output_is_refused_before_any_run(tmp_path, capsys, bandwidth, needle):
    root = _checkout(tmp_path)
    text = (CALIBRATION_DATA / "nixlbench-libfabric.txt").read_text().replace("5.611392", bandwidth)
    bad = tmp_path / "nixl.txt"
    bad.write_text(text)
    code = run(
        "calibrate",
        calibrate_cli.main,
        ["--stack", "dev", "--endpoint", "http://127.0.0.1:9", "--nixlbench", str(bad), "--root", str(root)],
    )
    err = capsys.readouterr().err
    assert code == Exit.USAGE and needle in err, err
    assert len([line for line in err.splitlines() if not line.startswith("[calibrate]")]) == 1
