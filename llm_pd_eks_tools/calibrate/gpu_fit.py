"""Fit the vLLM constants from a GPU calibration run and judge the point query on what it held out.

    python -m llm_pd_eks_tools.calibrate.gpu_fit OUT/gpu-calibration.json [--json] [--stack NAME]

The input is what llm_pd_eks_tools/calibrate/gpu_calibration.py wrote on the GPU machine. The prefill
runs (TTFT at one client against prompt length) and the decode runs (ITL at one client against context)
are fitted (llm_pd_eks_tools/calibrate/fit.py: relative least squares; one TP measured, so the TP term
stays the default row's); the closed-loop sweep is held out and each of its levels is asked of the point
query (`vllm bench serve`'s clients and prompts) at the fitted constants. `--stack NAME` prints the fit
as a calibration/NAME.yaml document (`make size` and the preview read it). A run that cannot be a
measurement (a failed level, no timings, constants at the roofline) is refused in one line.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from llm_pd_eks_tools.cli import ArgumentParser, Exit, ToolError, exit_with, one_line

PROG = "gpu_fit"
TOLERANCE = 0.25  # a held-out level within this of the measurement
LIMIT = 2.0  # and none off by more than this factor


@dataclass(frozen=True)
class Judged:
    label: str
    clients: int
    input: int
    metric: str
    measured: float
    predicted: float

    @property
    def ratio(self) -> float:
        return self.predicted / self.measured


def _measured(run: dict[str, Any], key: str) -> float:
    value = run.get(key)
    if run.get("error") or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        reason = run.get("error") or repr(value)
        raise ToolError(Exit.FAILED, one_line(f"{run.get('label')}: no {key} ({reason})"))
    return float(value)


def fit_model(model_id: str, entry: dict[str, Any], instance_type: str, source: str, date: str) -> Any:
    """The constants the prefill and decode runs of one model give (an `EngineConstants`)."""
    from llm_pd_eks.catalog import gpu_instance_type
    from llm_pd_eks.models import MODELS
    from llm_pd_eks_tools.calibrate.fit import Point, fit
    from llm_pd_eks_tools.sizing import VLLM_BF16

    model, instance = MODELS[model_id], gpu_instance_type(instance_type)
    points = []
    for run in entry["runs"]:
        if run["kind"] == "prefill":
            points.append(Point("ttft", model, instance, 1, 1, run["input_len"], 1, _measured(run, "mean_ttft_ms")))
        elif run["kind"] == "decode":
            itl = _measured(run, "mean_itl_ms")
            points.append(Point("itl", model, instance, 1, 1, run["input_len"], run["output_len"], itl))
    if len({p.kind for p in points}) < 2:
        raise ToolError(Exit.FAILED, f"{model_id}: the run has no prefill or no decode levels to fit")
    found = fit(points, f"GPU calibration {date}", tp_grid=(VLLM_BF16.tp_efficiency,))
    for name, value in (("prefill MFU", found.prefill_mfu), ("decode MBU", found.decode_mbu)):
        if not 0 < value < 1:
            raise ToolError(Exit.FAILED, f"{model_id}: a {name} of {value:g} is at or past the roofline; not fitted")
    from dataclasses import replace

    return replace(
        found,
        data=f"{source} ({model_id}: {len(points)} prefill and decode levels)",
        date=date,
        method="relative least squares (llm_pd_eks_tools/calibrate/fit.py); TP term the default row's",
    )


def judge(model_id: str, entry: dict[str, Any], instance_type: str, constants: Any) -> list[Judged]:
    """Each held-out sweep level asked of the point query at `constants`."""
    from llm_pd_eks.catalog import gpu_instance_type
    from llm_pd_eks.models import MODELS
    from llm_pd_eks_tools.sizing import point_query

    model, instance = MODELS[model_id], gpu_instance_type(instance_type)
    out = []
    for run in entry["runs"]:
        if run["kind"] != "sweep":
            continue
        p, o, n = run["input_len"], run["output_len"], run["clients"]
        answer = point_query(model, instance, 1, p, o, n, constants=constants, prompts=run["prompts"])
        for metric, key, predicted in (
            ("ttft_ms", "mean_ttft_ms", answer.ttft_ms),
            ("itl_ms", "mean_itl_ms", answer.itl_ms),
            ("output_tokens_per_s", "output_throughput", answer.output_tokens_per_s),
        ):
            out.append(Judged(run["label"], n, p, metric, _measured(run, key), predicted))
    return out


def calibration_document(stack: str, model_id: str, instance_type: str, constants: Any, points: int) -> dict:
    """calibration/<stack>.yaml's content for `constants` (llm_pd_eks_tools/sizing/calibration.py)."""
    return {
        "stack": stack,
        "measuredAt": constants.date,
        "modelId": model_id,
        "instanceType": instance_type,
        "tensorParallelSize": 1,
        "constants": {
            "prefillMfu": constants.prefill_mfu,
            "prefillStepS": constants.prefill_step_s,
            "decodeMbu": constants.decode_mbu,
            "decodeStepS": constants.decode_step_s,
            "tpEfficiency": constants.tp_efficiency,
        },
        "method": constants.method,
        "points": points,
        "source": constants.data,
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="gpu-calibration.json from the GPU run")
    parser.add_argument("--json", action="store_true", help="print the fit and the judged levels as JSON")
    parser.add_argument("--stack", help="print the fit as calibration/STACK.yaml (one model in the file)")
    args = parser.parse_args(argv)
    try:
        record = json.loads(args.file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ToolError(Exit.USAGE, one_line(f"{args.file}: {exc}")) from None
    if not isinstance(record, dict) or record.get("kind") != "vllm-gpu-calibration":
        raise ToolError(Exit.USAGE, f"{args.file}: not a gpu_calibration.py record")
    report: dict[str, Any] = {}
    for model_id, entry in record["models"].items():
        constants = fit_model(model_id, entry, record["instance_type"], str(args.file), record["date_utc"])
        judged = judge(model_id, entry, record["instance_type"], constants)
        report[model_id] = {
            "constants": asdict(constants),
            "held_out": [{**asdict(j), "ratio": j.ratio} for j in judged],
        }
        if args.stack:
            import yaml

            points = sum(1 for r in entry["runs"] if r["kind"] in ("prefill", "decode"))
            doc = calibration_document(args.stack, model_id, record["instance_type"], constants, points)
            print(yaml.safe_dump(doc, sort_keys=False), end="")
        elif not args.json:
            c = constants
            print(
                f"{model_id}: prefill MFU {c.prefill_mfu:.3f} + {c.prefill_step_s * 1e3:.2f} ms, decode MBU "
                f"{c.decode_mbu:.3f} + {c.decode_step_s * 1e3:.3f} ms"
            )
            for j in judged:
                mark = (
                    "ok" if abs(j.ratio - 1) <= TOLERANCE else ("MISS" if 1 / LIMIT <= j.ratio <= LIMIT else "OFF 2x")
                )
                figures = f"measured {j.measured:10.1f} model {j.predicted:10.1f} x{j.ratio:.2f}"
                print(f"  {j.label:<22} {j.metric:<20} {figures} {mark}")
    if args.json:
        print(json.dumps(report, indent=2))
    return Exit.OK


if __name__ == "__main__":
    exit_with(PROG, main)
