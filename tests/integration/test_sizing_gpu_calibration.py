"""The GPU calibration run (llm_pd_eks_sizing/calibrate/gpu_calibration.py) and its fit (gpu_fit.py):
the runner needs nothing of this project and plans the three measurements the model needs; the fit finds
known constants back from a record the model itself wrote, and refuses records no engine produces."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace

import pytest
from helpers import ROOT

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.models import MODELS
from llm_pd_eks_sizing.calibrate import gpu_calibration, gpu_fit
from llm_pd_eks_sizing.model import VLLM_BF16, Replica, point_query
from llm_pd_eks_tools.core.cli import Exit, run

RUNNER = ROOT / "llm_pd_eks_sizing" / "calibrate" / "gpu_calibration.py"
CONFIGS = ROOT / "llm_pd_eks_sizing" / "realrun" / "models"
L8 = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
P5EN = GPU_INSTANCE_TYPES["p5en.48xlarge"]
TRUTH = replace(
    VLLM_BF16,
    prefill_mfu=0.62,
    prefill_step_s=0.004,
    decode_mbu=0.68,
    decode_step_s=0.0006,
    intercepts_per_layer=False,
    stream_token_s=0.0,
)


def test_the_runner_imports_nothing_of_this_project():
    tree = ast.parse(RUNNER.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"llm_pd_eks", "llm_pd_eks_tools", "llm_pd_eks_sizing", "pydantic", "yaml"}, imported


def test_the_harness_level_is_make_calibrates_own_client_and_needs_no_pulumi():
    """The one project module the GPU run loads (by name, for its harness level) is the measuring client
    `make calibrate ENDPOINT=` uses, and it loads on what vLLM brings (no Pulumi, no YAML library)."""
    import subprocess
    import sys

    from llm_pd_eks_sizing.calibrate import bench, cli

    assert gpu_calibration.HARNESS == bench.__name__ and cli.measure is bench.measure
    probe = (
        f"import sys, importlib; importlib.import_module({gpu_calibration.HARNESS!r}); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pulumi', 'yaml', 'grpc', 'boto3', 'ruamel'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_the_runner_plans_the_three_measurements():
    runs = gpu_calibration.plan()
    prefill = [r for r in runs if r[0] == "prefill"]
    assert [r[2] for r in prefill] == [128, 256, 512, 1024, 2048, 4096, 8192, 16384] and {r[4] for r in prefill} == {1}
    decode = [r for r in runs if r[0] == "decode"]
    assert [r[2] for r in decode] == [256, 1024, 4096, 16384] and {r[4] for r in decode} == {1}
    harness = [r for r in runs if r[0] == "harness"]
    assert {(r[2], r[4]) for r in harness} == {(1024, c) for c in gpu_calibration.HARNESS_CLIENTS}
    assert runs.index(harness[-1]) < min(runs.index(r) for r in runs if r[0] == "sweep")  # before a budget stop
    sweep = [r for r in runs if r[0] == "sweep"]
    assert {r[2] for r in sweep} == {128, 1024, 8192} and {r[4] for r in sweep} == {1, 2, 4, 8, 16, 32, 64, 128, 256}
    assert all(r[5] >= r[4] for r in runs)  # at least one prompt a client: the loop is closed at that level
    assert gpu_calibration.MAX_MODEL_LEN >= 16384 + gpu_calibration.DECODE_OUTPUT


def test_a_second_call_runs_only_the_levels_a_budget_cut():
    rest = gpu_calibration.plan(re.compile(r"sweep-in8192|sweep-in128-c256$"))
    assert next(r[1] for r in rest) == "sweep-in128-c256" and {r[0] for r in rest} == {"sweep"}
    assert [r[4] for r in rest if r[2] == 8192] == list(gpu_calibration.SWEEP_CLIENTS)
    assert len(rest) == 1 + len(gpu_calibration.SWEEP_CLIENTS)


@pytest.mark.parametrize("model_id", (*gpu_calibration.DEFAULT_MODELS, "Qwen/Qwen2.5-7B-Instruct"))
def test_the_vendored_configs_are_the_model_table(model_id):
    config = json.loads((CONFIGS / model_id / "config.json").read_text())
    spec = MODELS[model_id]
    assert (config["num_hidden_layers"], config["num_key_value_heads"]) == (spec.layers, spec.kv_heads)
    assert config["hidden_size"] // config["num_attention_heads"] == spec.head_dim
    assert config["num_attention_heads"] == spec.attention_heads
    shapes = (spec.vocab_size, spec.hidden_size, spec.tie_word_embeddings)
    assert (config["vocab_size"], config["hidden_size"], config["tie_word_embeddings"]) == shapes
    assert (CONFIGS / model_id / "SOURCE").is_file()


def _record(truth=TRUTH, **changes) -> dict:
    """What the runner would write if the engine were the model at `truth`."""
    replica = Replica(L8, P5EN, 1, constants=truth)
    runs = []
    for kind, label, inp, out, clients, prompts in gpu_calibration.plan():
        if kind == "prefill":
            row = {"mean_ttft_ms": replica.prefill_seconds(inp) * 1e3, "mean_itl_ms": 0.0}
        elif kind == "decode":
            row = {"mean_ttft_ms": 1.0, "mean_itl_ms": replica.decode_step_seconds(1, inp + out / 2) * 1e3}
        else:
            if inp * prompts > gpu_calibration.MAX_PROMPT_TOKENS:
                continue
            a = point_query(L8, P5EN, 1, inp, out, clients, constants=truth, prompts=prompts)
            row = {"mean_ttft_ms": a.ttft_ms, "mean_itl_ms": a.itl_ms, "output_throughput": a.output_tokens_per_s}
        runs.append(
            {
                "kind": kind,
                "label": label,
                "input_len": inp,
                "output_len": out,
                "clients": clients,
                "prompts": prompts,
                **row,
                **changes.get(label, {}),
            }
        )
    return {
        "kind": "vllm-gpu-calibration",
        "date_utc": "2026-12-03T00:00:00Z",
        "instance_type": "p5en.48xlarge",
        "tp": 1,
        "models": {L8.model_id: {"runs": runs, "skipped": []}},
    }


def test_the_fit_finds_known_constants_and_the_held_out_sweep_agrees():
    entry = _record()["models"][L8.model_id]
    found = gpu_fit.fit_model(L8.model_id, entry, "p5en.48xlarge", "gpu-calibration.json", "2026-12-03")
    assert found.prefill_mfu == pytest.approx(TRUTH.prefill_mfu, rel=0.02)
    assert found.prefill_step_s == pytest.approx(TRUTH.prefill_step_s, rel=0.05)
    assert found.decode_mbu == pytest.approx(TRUTH.decode_mbu, rel=0.02)
    assert found.decode_step_s == pytest.approx(TRUTH.decode_step_s, rel=0.05)
    assert found.date == "2026-12-03" and "gpu-calibration.json" in found.data and found.method
    judged = gpu_fit.judge(L8.model_id, entry, "p5en.48xlarge", found)
    assert judged and all(abs(j.ratio - 1) <= 0.05 for j in judged)


def test_the_fit_writes_a_calibration_make_size_reads(tmp_path, capsys):
    import yaml

    from llm_pd_eks_sizing.model import Calibration

    path = tmp_path / "gpu-calibration.json"
    path.write_text(json.dumps(_record()))
    assert run("gpu_fit", gpu_fit.main, [str(path), "--stack", "dev"]) == Exit.OK
    doc = Calibration.model_validate(yaml.safe_load(capsys.readouterr().out))
    assert doc.model_id == L8.model_id and doc.constants.decode_mbu == pytest.approx(TRUTH.decode_mbu, rel=0.02)


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"prefill-in1024": {"error": "HTTP 500"}}, "prefill-in1024: no mean_ttft_ms (HTTP 500)"),
        ({"decode-in256": {"mean_itl_ms": 0.0}}, "decode-in256: no mean_itl_ms"),
    ],
)
def test_a_record_with_a_failed_or_empty_level_is_refused(tmp_path, capsys, change, needle):
    path = tmp_path / "gpu-calibration.json"
    path.write_text(json.dumps(_record(**change)))
    assert run("gpu_fit", gpu_fit.main, [str(path)]) == Exit.FAILED
    assert needle in capsys.readouterr().err


def test_a_record_faster_than_the_roofline_is_refused(tmp_path, capsys):
    path = tmp_path / "gpu-calibration.json"
    path.write_text(json.dumps(_record(truth=replace(TRUTH, prefill_mfu=3.0, prefill_step_s=0.0))))
    assert run("gpu_fit", gpu_fit.main, [str(path)]) == Exit.FAILED
    assert "at or past the roofline" in capsys.readouterr().err
