"""What a real run saved (`data/<run>/`), read back: the run record, its scrapes and its benchmark table.

A run folder holds `run.json` (when, on what, with which command and commit), `evidence-pd.json` and
`evidence-agg.json` (what `gpu_main` wrote: Serve's status, the probes, NIXL's counters before and
after, the NIXL log lines, `vllm bench serve` rows) and `metrics-pd.prom.gz` (every node's Ray metrics
endpoint after the probe requests, each block headed `# node <raylet>`; its `ray_vllm_*` and `ray_serve_*`
families with every label, gzip). A run of the routing arms holds `evidence-mix-prefix-pd.json` and
`evidence-mix-prefix.json` (per client count: every request's timings, the load's percentiles, each
role's and replica's prefix-cache hit rate, NIXL's pulls) and `evidence-mix-pd.json` and
`evidence-mix-cond.json` (per load and prompt class the same, and the P/D path counter), beside the P/D
run's files or in a folder of its own; routing_evidence.py and mix_evidence.py read those, and doc.py
writes docs/real-run.md's tables from them.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    node: str  # the raylet that exported it: head | prefill | decode
    name: str
    labels: dict[str, str]
    value: float


def runs() -> list[Path]:
    """Every saved run, oldest first."""
    return sorted(p for p in DATA.iterdir() if (p / "run.json").is_file()) if DATA.is_dir() else []


def latest() -> Path:
    """The newest saved run of the P/D phase (a folder may hold only the prefix-routing arms)."""
    found = [r for r in runs() if (r / "evidence-pd.json").is_file()]
    if not found:
        raise FileNotFoundError(f"no real run saved under {DATA}")
    return found[-1]


def load(run: Path, name: str) -> dict[str, Any]:
    return json.loads((run / name).read_text())


def scrape_text(run: Path, name: str) -> str:
    """A saved scrape (`<name>.prom.gz`)."""
    return gzip.decompress((run / f"{name}.prom.gz").read_bytes()).decode()


def samples(text: str) -> list[Sample]:
    """The samples of a saved scrape (Prometheus text format), tagged with the node block they came from."""
    node, out = "", []
    for line in text.splitlines():
        if line.startswith("# node "):
            node = line.removeprefix("# node ").strip()
            continue
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        labels = dict(LABEL.findall(match.group(2) or ""))
        out.append(Sample(node, match.group(1), labels, value))
    return out


def metric_types(text: str) -> dict[str, str]:
    """`# TYPE name kind` lines of a saved scrape."""
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            out[name] = kind.strip()
    return out


def bench_table(pd: dict[str, Any], agg: dict[str, Any]) -> list[dict[str, Any]]:
    """P/D against aggregated, one row per load: TTFT and ITL medians/p99 (ms), output tokens/s."""
    rows = []
    by_clients = {r["clients"]: r for r in agg.get("bench", [])}
    for row in pd.get("bench", []):
        other = by_clients.get(row["clients"], {})
        for arm, r in (("P/D", row), ("aggregated", other)):
            if "median_ttft_ms" not in r:
                continue
            rows.append(
                {
                    "arm": arm,
                    "clients": r["clients"],
                    "prompts": r["prompts"],
                    "input_len": r["input_len"],
                    "output_len": r["output_len"],
                    "median_ttft_ms": r["median_ttft_ms"],
                    "p99_ttft_ms": r["p99_ttft_ms"],
                    "median_itl_ms": r["median_itl_ms"],
                    "p99_itl_ms": r["p99_itl_ms"],
                    "output_throughput": r["output_throughput"],
                }
            )
    return rows


def ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"
