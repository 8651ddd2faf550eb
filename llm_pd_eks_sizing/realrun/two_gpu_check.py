"""The two-GPU run's record, and what it measured set beside the sizing model for the same workload.

    python -m llm_pd_eks_sizing.realrun.two_gpu_check llm_pd_eks_sizing/realrun/data/two-gpu/<run>

reads `run-two.json` (the record: `RunRecord`), `evidence-two-pd.json` and `evidence-two-agg.json`
(what gpu_two wrote) and checks three things:

* **KV by size**: the bytes the decode side pulled per request at each prompt length, against the
  sizing model's message (`sizing.kv.KvMessage`: whole 16-token blocks x the model's KV bytes a token,
  prefill TP 1), within two blocks and 2 %; one pull per request. Bytes do not depend on the fabric,
  so this holds for EFA too.
* **The hop and the KV handoff per size** (reported, not judged): at one client, P/D's median TTFT over
  aggregated's is the hop plus the handoff; NIXL's own transfer time is the handoff, the rest the hop
  (the model assumes `routing.HOP_ASSUMED_S`). UCX between two GPUs of one host, not EFA: the model's
  EFA handoff (`sizing.kv.kv_transfer`) is printed beside it and never compared.
* **The P/D-vs-aggregated verdict** per load: the sizing model's point query (`sizing.point.point_query`:
  one prefill and one decode engine against two aggregated engines sharing the clients) with the KV
  handoff at the rates measured here, against the run's output throughput; each says P/D, aggregated,
  or a draw (within VERDICT_MARGIN), and they must agree.

Exit 0: every check agrees; 1: one does not (each named); 2: the folder or its record cannot be read
(one line). Functions take the files' contents, so tests replay saved runs and synthetic ones alike;
a record marked `synthetic` is refused as a measurement (`measured_only`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.models import MODELS
from llm_pd_eks_sizing.model.kv import KvMessage, kv_transfer
from llm_pd_eks_sizing.model.point import point_query
from llm_pd_eks_sizing.model.routing import HOP_ASSUMED_S
from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, exit_with

KV_DTYPE_BYTES = 2  # the dev stack's kv_cache_dtype "auto" on a bf16 model
BYTES_TOLERANCE = 0.02  # beyond two blocks: the model's bytes a token against vLLM's layout
VERDICT_MARGIN = 0.10  # throughputs within 10 % of each other are a draw
DATA = Path(__file__).resolve().parent / "data" / "two-gpu"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Wheel(_Strict):
    """One wheel installed on the machine."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.+-]+\.whl$", description="The wheel's file name.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the wheel file, hex.")


class RunRecord(_Strict):
    """run-two.json: when the two-GPU run ran, on what, from which code and commands."""

    gpu_count: Literal[2] = Field(description="GPUs of the one host the run used: always 2.")
    gpus: list[str] = Field(min_length=2, max_length=2, description="`nvidia-smi -L` lines, one per GPU.")
    topology: str = Field(description="`nvidia-smi topo -m`: NVLink or PCIe between the two GPUs.")
    gpu_model: str = Field(min_length=1, description="The GPUs' model as nvidia-smi names it.")
    date_utc: str = Field(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", description="When the record was written.")
    python: str = Field(pattern=r"^3\.\d+\.\d+$", description="The machine's Python that ran the phases.")
    versions: dict[str, str] = Field(description="ray, vllm, nixl, torch, ... as installed; gpu: driver and memory.")
    wheels: list[Wheel] = Field(min_length=1, description="Every wheel installed from the packed chunks.")
    commit: str = Field(min_length=7, description="The commit the bundle was rendered from.")
    model_id: str = Field(description="The served model (dummy weights of its real shape).")
    instance_type: str = Field(description="The EC2 type whose GPU the machine has (the bundle's).")
    fabric: str = Field(pattern=r"UCX.*no EFA", description="How KV moved: NIXL's UCX backend, never EFA here.")
    synthetic: bool = Field(description="True only for made-up test inputs; a measured run is false.")
    commands: list[str] = Field(min_length=1, description="Every phase command, in the order run.")
    arms: list[str] = Field(description="The arms whose evidence the run saved (pd, agg, tp2).")


def parse_record(data: Any) -> RunRecord:
    """The record validated; ValueError naming every bad field on one line."""
    try:
        record = RunRecord.model_validate(data)
    except ValidationError as exc:
        raise ValueError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from None
    missing = {"ray", "vllm", "nixl", "gpu"} - set(record.versions)
    if missing:
        raise ValueError(f"versions: {sorted(missing)} missing")
    return record


def measured_only(record: RunRecord) -> RunRecord:
    if record.synthetic:
        raise ValueError("the record is marked synthetic: made-up inputs are never a measurement")
    return record


def _loads(evidence: dict[str, Any]) -> dict[tuple[int, int], dict[str, Any]]:
    """(clients, prompt tokens) -> the load's row, for the loads that ran and finished every request."""
    out = {}
    for row in evidence.get("loads", []):
        if "skipped" not in row and row.get("rc") == 0 and row.get("completed") == row.get("prompts"):
            out[(row["clients"], row["input_len"])] = row
    return out


@dataclass(frozen=True)
class KvBySize:
    tokens: int
    pulls: float
    requests: int
    bytes_per_pull: float
    model_bytes: int
    xfer_ms_per_pull: float
    agrees: bool


def kv_by_size(model_id: str, pd: dict[str, Any]) -> list[KvBySize]:
    """Per prompt length (the P/D arm's loads), the decode side's bytes a pull against the model's."""
    model = MODELS[model_id]
    rows: dict[int, list[dict[str, Any]]] = {}
    for (_, tokens), row in sorted(_loads(pd).items()):
        rows.setdefault(tokens, []).append(row)
    out = []
    for tokens, found in rows.items():
        decode = [r["nixl"]["decode"] for r in found]
        pulls = sum(d["pulls"] for d in decode)
        moved = sum(d["bytes"] for d in decode)
        seconds = sum(d["xfer_s"] for d in decode)
        requests = sum(r["completed"] for r in found)
        message = KvMessage.of(model, tokens, KV_DTYPE_BYTES, 1)
        per_pull = moved / pulls if pulls else 0.0
        block = message.rank_bytes / message.blocks
        slack = 2 * block + BYTES_TOLERANCE * message.rank_bytes
        agrees = pulls == requests and abs(per_pull - message.rank_bytes) <= slack
        out.append(
            KvBySize(tokens, pulls, requests, per_pull, message.rank_bytes, 1e3 * seconds / max(pulls, 1), agrees)
        )
    return out


def ucx_rows(sizes: list[KvBySize]) -> list[tuple[int, float]]:
    """(message bytes, GB/s) as measured here: the handoff's rate by size, for the model's point query."""
    return sorted(
        (int(s.bytes_per_pull), s.bytes_per_pull / (s.xfer_ms_per_pull / 1e3) / 1e9)
        for s in sizes
        if s.xfer_ms_per_pull > 0
    )


@dataclass(frozen=True)
class Hop:
    tokens: int
    pd_ttft_ms: float
    agg_ttft_ms: float
    handoff_ms: float
    hop_ms: float
    model_efa_handoff_ms: float


def hops(record: RunRecord, pd: dict[str, Any], agg: dict[str, Any], sizes: list[KvBySize]) -> list[Hop]:
    """At one client: P/D's median TTFT over aggregated's, split into NIXL's handoff and the hop."""
    model, instance = MODELS[record.model_id], GPU_INSTANCE_TYPES[record.instance_type]
    handoff = {s.tokens: s.xfer_ms_per_pull for s in sizes}
    a, p = _loads(agg), _loads(pd)
    out = []
    for (clients, tokens), row in sorted(p.items()):
        if clients != 1 or (1, tokens) not in a or tokens not in handoff:
            continue
        over = row["median_ttft_ms"] - a[(1, tokens)]["median_ttft_ms"]
        efa = kv_transfer(model, tokens, KV_DTYPE_BYTES, instance, 1).seconds * 1e3
        out.append(
            Hop(
                tokens,
                row["median_ttft_ms"],
                a[(1, tokens)]["median_ttft_ms"],
                handoff[tokens],
                over - handoff[tokens],
                efa,
            )
        )
    return out


def _winner(pd: float, agg: float) -> str:
    if pd > agg * (1 + VERDICT_MARGIN):
        return "P/D"
    if agg > pd * (1 + VERDICT_MARGIN):
        return "aggregated"
    return "a draw"


@dataclass(frozen=True)
class Verdict:
    clients: int
    tokens: int
    output_tokens: int
    pd_tok_s: float
    agg_tok_s: float
    model_pd_tok_s: float
    model_agg_tok_s: float
    measured: str
    model: str

    @property
    def agrees(self) -> bool:
        return self.measured == self.model


def verdicts(
    record: RunRecord, pd: dict[str, Any], agg: dict[str, Any], rows: list[tuple[int, float]]
) -> list[Verdict]:
    """Per load both arms ran: which layout gave more output tokens a second, measured and modelled
    (P/D: one prefill and one decode engine, the handoff at the measured rates; aggregated: two
    engines, the clients split between them)."""
    model, instance = MODELS[record.model_id], GPU_INSTANCE_TYPES[record.instance_type]
    a = _loads(agg)
    out = []
    for load, row in sorted(_loads(pd).items()):
        if load not in a:
            continue
        clients, tokens = load
        o = int(row["output_len"])
        dis = point_query(model, instance, 1, tokens, o, clients, "disaggregated", KV_DTYPE_BYTES, kv_rows=rows or None)
        halves = [n for n in (clients - clients // 2, clients // 2) if n > 0]
        aggregated = sum(
            point_query(model, instance, 1, tokens, o, n, "aggregated", KV_DTYPE_BYTES).output_tokens_per_s
            for n in halves
        )
        measured_pd, measured_agg = float(row["output_throughput"]), float(a[load]["output_throughput"])
        out.append(
            Verdict(
                clients,
                tokens,
                o,
                measured_pd,
                measured_agg,
                dis.output_tokens_per_s,
                aggregated,
                _winner(measured_pd, measured_agg),
                _winner(dis.output_tokens_per_s, aggregated),
            )
        )
    return out


@dataclass
class Report:
    record: RunRecord
    sizes: list[KvBySize]
    hops: list[Hop]
    verdicts: list[Verdict]
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        head = "SYNTHETIC INPUTS, NOT A MEASUREMENT. " if self.record.synthetic else ""
        out = [
            f"{head}Two-GPU run of {self.record.date_utc} on {self.record.gpu_count} x {self.record.gpu_model}, "
            f"{self.record.fabric}; {self.record.model_id}, sized as {self.record.instance_type}."
        ]
        for s in self.sizes:
            out.append(
                f"KV {s.tokens:>6,} tokens: {s.bytes_per_pull / 2**20:8.1f} MiB a pull "
                f"(model {s.model_bytes / 2**20:.1f}), "
                f"{s.pulls:g} pulls for {s.requests} requests, {s.xfer_ms_per_pull:.1f} ms a pull (UCX) "
                f"{'agrees' if s.agrees else 'DISAGREES'}"
            )
        for h in self.hops:
            out.append(
                f"hop + handoff {h.tokens:>6,} tokens: P/D TTFT {h.pd_ttft_ms:.1f} ms - aggregated "
                f"{h.agg_ttft_ms:.1f} ms = handoff {h.handoff_ms:.1f} ms (UCX) + hop {h.hop_ms:.1f} ms "
                f"(model: hop {HOP_ASSUMED_S * 1e3:.0f} ms assumed, handoff {h.model_efa_handoff_ms:.1f} ms "
                "over EFA, not comparable)"
            )
        for v in self.verdicts:
            out.append(
                f"verdict {v.clients:>2} clients x {v.tokens:>6,} tokens: measured {v.measured} "
                f"({v.pd_tok_s:,.0f} vs {v.agg_tok_s:,.0f} tok/s), model {v.model} "
                f"({v.model_pd_tok_s:,.0f} vs {v.model_agg_tok_s:,.0f}) {'agrees' if v.agrees else 'DISAGREES'}"
            )
        return out + [f"problem: {p}" for p in self.problems]


def check(record_data: Any, pd: dict[str, Any], agg: dict[str, Any]) -> Report:
    """The whole comparison from the three files' contents."""
    record = parse_record(record_data)
    sizes = kv_by_size(record.model_id, pd)
    report = Report(record, sizes, hops(record, pd, agg, sizes), verdicts(record, pd, agg, ucx_rows(sizes)))
    if not sizes:
        report.problems.append("the P/D arm has no finished load with NIXL figures")
    if not report.verdicts:
        report.problems.append("no load that both arms finished")
    report.problems += [
        f"KV of {s.tokens:,}-token prompts: {s.bytes_per_pull:,.0f} B a pull against the model's "
        f"{s.model_bytes:,} B, {s.pulls:g} pulls for {s.requests} requests"
        for s in sizes
        if not s.agrees
    ]
    report.problems += [
        f"{v.clients} clients x {v.tokens:,} tokens: measured {v.measured}, the model {v.model}"
        for v in report.verdicts
        if not v.agrees
    ]
    return report


def load_run(folder: Path) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    record, pd, agg = (
        json.loads((folder / name).read_text())
        for name in ("run-two.json", "evidence-two-pd.json", "evidence-two-agg.json")
    )
    return record, pd, agg


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(
        prog="python -m llm_pd_eks_sizing.realrun.two_gpu_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument("folder", type=Path, help="the folder gpu_two.py saved its record and evidence in")
    folder = parser.parse_args(argv).folder
    try:
        report = check(*load_run(folder))
    except (OSError, ValueError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ToolError(
            Exit.USAGE, f"{folder}: {why} (give the folder gpu_two.py's record and evidence were saved in)"
        ) from None
    print("\n".join(report.lines()))
    return 1 if report.problems else 0


if __name__ == "__main__":
    exit_with("realrun-two-gpu-check", main)
