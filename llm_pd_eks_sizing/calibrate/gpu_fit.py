"""Fit the vLLM constants from a GPU calibration run and judge the point query on what it held out.

    python -m llm_pd_eks_sizing.calibrate.gpu_fit FILE [FILE ...] [--json] [--stack NAME]

The input is what llm_pd_eks_sizing/calibrate/gpu_calibration.py wrote on the GPU machine. The prefill
runs (TTFT at one client against prompt length) and the decode runs (ITL at one client against context)
are fitted (llm_pd_eks_sizing/calibrate/fit.py: relative least squares; one TP measured, so the TP term
stays the default row's); the closed-loop sweep is held out and each of its levels is asked of the point
query (`vllm bench serve`'s clients and prompts) at the fitted constants. `--stack NAME` prints the fit
as a calibration/NAME.yaml document (`make size` and the preview read it). A run that cannot be a
measurement (a failed level, no timings, constants at the roofline) is refused in one line. Several
files are one run in parts (a second call measured the levels a budget cut): their models' levels are
merged by label, a label measured twice is refused.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional

import yaml

from llm_pd_eks.catalog import gpu_instance_type
from llm_pd_eks.models import MODELS
from llm_pd_eks_sizing.calibrate.fit import Point, fit
from llm_pd_eks_sizing.model import VLLM_BF16, point_query
from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, exit_with, one_line

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


def _points(model_id: str, entry: dict[str, Any], instance_type: str) -> list[Any]:
    """The prefill (TTFT at one client) and decode (ITL at one client) levels of one model as fit points."""
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
    return points


def _fitted(points: list[Any], label: str, source: str, date: str, per_layer: bool) -> Any:

    found = fit(points, f"GPU calibration {date}", tp_grid=(VLLM_BF16.tp_efficiency,), per_layer=per_layer)
    for name, value in (("prefill MFU", found.prefill_mfu), ("decode MBU", found.decode_mbu)):
        if not 0 < value < 1:
            raise ToolError(Exit.FAILED, f"{label}: a {name} of {value:g} is at or past the roofline; not fitted")
    per = "; intercepts a layer" if per_layer else ""
    return replace(
        found,
        data=f"{source} ({label}: {len(points)} prefill and decode levels)",
        date=date,
        method=f"relative least squares (llm_pd_eks_sizing/calibrate/fit.py){per}; TP term the default row's",
    )


def fit_model(model_id: str, entry: dict[str, Any], instance_type: str, source: str, date: str) -> Any:
    """The constants the prefill and decode runs of one model give (an `EngineConstants`)."""
    return _fitted(_points(model_id, entry, instance_type), model_id, source, date, per_layer=False)


def fit_row(record: dict[str, Any], source: str) -> Any:
    """One row for every model of the run: the same fit over all their prefill and decode levels, the
    intercepts a layer (what the stacks' vLLM row is: `llm_pd_eks_sizing/model/engine.py: VLLM_BF16`)."""
    points = [p for m, e in record["models"].items() for p in _points(m, e, record["instance_type"])]
    return _fitted(points, " + ".join(record["models"]), source, record["date_utc"], per_layer=True)


def ceiling_level(record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(model, run) of the sweep level with the highest output throughput: where the API server's
    stream, not the GPU, is likeliest to be the ceiling (the level the stream cost is fitted on)."""
    levels = [(m, r) for m, e in record["models"].items() for r in e["runs"] if r["kind"] == "sweep"]
    if not levels:
        raise ToolError(Exit.FAILED, "the run has no sweep levels: nothing to hold out")
    return max(levels, key=lambda level: _measured(level[1], "output_throughput"))


def fit_stream(record: dict[str, Any], row: Any) -> Any:
    """`row` with the API server's seconds a streamed token that make the ceiling level's output
    throughput what was measured (bisection: the throughput falls as the cost grows); 0 where the GPU
    alone already comes out at or below the measurement."""
    model_id, run = ceiling_level(record)
    model, instance = MODELS[model_id], gpu_instance_type(record["instance_type"])
    measured = _measured(run, "output_throughput")

    def throughput(cost: float) -> float:
        at = replace(row, stream_token_s=cost)
        p, o, n = run["input_len"], run["output_len"], run["clients"]
        return point_query(model, instance, 1, p, o, n, constants=at, prompts=run["prompts"]).output_tokens_per_s

    if throughput(0.0) <= measured:
        return row
    low, high = 0.0, 1e-3
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if throughput(mid) > measured else (low, mid)
    return replace(
        row,
        stream_token_s=round((low + high) / 2, 7),
        method=row.method + f"; stream cost fitted on {model_id} {run['label']}",
    )


def judge(
    model_id: str, entry: dict[str, Any], instance_type: str, constants: Any, fitted: tuple[str, str] = ("", "")
) -> list[Judged]:
    """Each held-out level (the sweep, and the harness levels make calibrate's own client measured)
    asked of the point query at `constants` (`fitted`: the (model, label) the stream cost was fitted
    on, not held out)."""
    model, instance = MODELS[model_id], gpu_instance_type(instance_type)
    out = []
    for run in entry["runs"]:
        if run["kind"] not in ("sweep", "harness") or (model_id, run["label"]) == fitted:
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
    """calibration/<stack>.yaml's content for `constants` (llm_pd_eks_sizing/model/calibration.py)."""
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


def _constants_line(c: Any) -> str:
    unit = " a layer" if c.intercepts_per_layer else ""
    return (
        f"prefill MFU {c.prefill_mfu:.3f} + {c.prefill_step_s * 1e3:.4g} ms{unit}, "
        f"decode MBU {c.decode_mbu:.3f} + {c.decode_step_s * 1e3:.4g} ms{unit}"
    )


def load_records(paths: list[Path]) -> dict[str, Any]:
    """One record from the files of one run: the same instance type, each level measured once."""
    merged: dict[str, Any] = {}
    for path in paths:
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ToolError(Exit.USAGE, one_line(f"{path}: {exc}")) from None
        if not isinstance(record, dict) or record.get("kind") != "vllm-gpu-calibration":
            raise ToolError(Exit.USAGE, f"{path}: not a gpu_calibration.py record")
        if not merged:
            merged = {**record, "models": {}, "files": []}
        elif record["instance_type"] != merged["instance_type"]:
            raise ToolError(Exit.USAGE, f"{path}: {record['instance_type']}, not {merged['instance_type']}: two runs")
        merged["files"].append(str(path))
        merged["date_utc"] = min(merged["date_utc"], record["date_utc"])
        for model_id, entry in record["models"].items():
            into = merged["models"].setdefault(model_id, {"runs": [], "skipped": []})
            have = {run["label"] for run in into["runs"]}
            for run in entry["runs"]:
                if run["label"] in have:
                    raise ToolError(Exit.USAGE, f"{path}: {model_id} {run['label']} is measured twice")
                into["runs"].append(run)
            into["skipped"] += entry.get("skipped", [])
            into["engine"] = into.get("engine") or entry.get("engine")
    for entry in merged["models"].values():  # a level one part skipped and another measured is measured
        labels = {run["label"] for run in entry["runs"]}
        entry["skipped"] = [s for s in dict.fromkeys(entry["skipped"]) if s.split(":")[0] not in labels]
    return merged


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, nargs="+", help="gpu-calibration.json from the GPU run (its parts)")
    parser.add_argument("--json", action="store_true", help="print the fit and the judged levels as JSON")
    parser.add_argument("--stack", help="print the fit as calibration/STACK.yaml (one model in the file)")
    args = parser.parse_args(argv)
    record = load_records(args.file)
    source = " + ".join(record["files"])
    row = fit_stream(record, fit_row(record, source))
    ceiling_model, ceiling = ceiling_level(record)
    fitted = (ceiling_model, ceiling["label"])
    report: dict[str, Any] = {"row": asdict(row), "stream_fitted_on": list(fitted), "models": {}}
    if not args.json and not args.stack:
        print(f"one row, intercepts a layer: {_constants_line(row)}")
        print(f"  stream {row.stream_token_s * 1e6:.1f} us a token, fitted on {fitted[0]} {fitted[1]} (not held out)")
    for model_id, entry in record["models"].items():
        constants = fit_model(model_id, entry, record["instance_type"], source, record["date_utc"])
        judged = judge(model_id, entry, record["instance_type"], row, fitted)
        report["models"][model_id] = {
            "constants": asdict(constants),
            "held_out": [{**asdict(j), "ratio": j.ratio} for j in judged],
        }
        if args.stack:
            points = sum(1 for r in entry["runs"] if r["kind"] in ("prefill", "decode"))
            doc = calibration_document(args.stack, model_id, record["instance_type"], constants, points)
            print(yaml.safe_dump(doc, sort_keys=False), end="")
        elif not args.json:
            print(f"{model_id} alone: {_constants_line(constants)}; held out, asked at the one row:")
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
