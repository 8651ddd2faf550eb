"""The benchmarks `make calibrate` runs and how their output is read.

vLLM's own benchmark, `vllm bench serve` (vllm-project/vllm, vllm/benchmarks/serve.py): a closed-loop
sweep (`--max-concurrency C`, `--request-rate inf`) of fixed-length random prompts (`--dataset-name
random --random-input-len I --random-output-len O --ignore-eos`), each run saving one JSON result
(`--save-result --result-dir D --result-filename F`) whose keys this module reads: `completed`,
`num_prompts`, `total_input_tokens`, `total_output_tokens`, `mean_ttft_ms`,
`mean_itl_ms`, `mean_tpot_ms`, `output_throughput`.

NIXL's benchmark, `nixlbench` (ai-dynamo/nixl, benchmark/nixlbench): `--backend LIBFABRIC
--initiator_seg_type VRAM --target_seg_type VRAM --etcd_endpoints URL`, one initiator on a prefill
node and one target on a decode node; it prints a table whose `B/W (GB/Sec)` column is the
per-worker throughput (nixlbench README, "Understanding Benchmark Output").
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Optional

from llm_pd_eks_sizing.model import Workload
from llm_pd_eks_tools.core.cli import Exit, ToolError, one_line
from llm_pd_eks_tools.core.io_safety import http_lines

RESULT_KEYS = (
    "completed",
    "num_prompts",
    "total_input_tokens",
    "total_output_tokens",
    "mean_ttft_ms",
    "mean_itl_ms",
    "mean_tpot_ms",
    "output_throughput",
)
CONCURRENCY_SWEEP = (1, 4, 16)
REQUEST_TIMEOUT_S = 600.0  # one request's whole stream, headers included (and never past the run's deadline)
MAX_STREAM_BYTES = 64 * 2**20  # one streamed reply: an SSE event of a few hundred bytes per token
PROMPTS_PER_CLIENT = 4  # each concurrency level sends C x this many prompts


@dataclass(frozen=True)
class SweepPoint:
    input_tokens: int
    output_tokens: int
    concurrency: int
    prompts_per_client: int = PROMPTS_PER_CLIENT

    @property
    def num_prompts(self) -> int:
        return self.concurrency * self.prompts_per_client

    @property
    def name(self) -> str:
        return f"in{self.input_tokens}-out{self.output_tokens}-c{self.concurrency}"


def sweep_plan(
    workload: Workload, concurrency: tuple[int, ...] = CONCURRENCY_SWEEP, output_cap: Optional[int] = None
) -> list[SweepPoint]:
    """The workload's mean lengths at each concurrency, plus a quarter-length prompt alone (two prompt
    sizes at concurrency 1 separate the per-forward intercept from the compute term)."""
    inp = max(1, round(workload.input_tokens.mean))
    out = max(2, round(workload.output_tokens.mean))
    if output_cap is not None:
        out = min(out, output_cap)
    return [SweepPoint(max(1, inp // 4), out, 1), *(SweepPoint(inp, out, c) for c in concurrency)]


def vllm_bench_args(model_id: str, base_url: str, point: SweepPoint, result_dir: str) -> list[str]:
    """The `vllm bench serve` command line for one sweep point."""
    return [
        "vllm",
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--model",
        model_id,
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--dataset-name",
        "random",
        "--random-input-len",
        str(point.input_tokens),
        "--random-output-len",
        str(point.output_tokens),
        "--ignore-eos",
        "--max-concurrency",
        str(point.concurrency),
        "--num-prompts",
        str(point.num_prompts),
        "--request-rate",
        "inf",
        "--save-result",
        "--result-dir",
        result_dir,
        "--result-filename",
        f"{point.name}.json",
    ]


def nixlbench_args(etcd_endpoints: str, max_block_size: int = 64 * 2**20) -> list[str]:
    return [
        "nixlbench",
        "--etcd_endpoints",
        etcd_endpoints,
        "--backend",
        "LIBFABRIC",
        "--initiator_seg_type",
        "VRAM",
        "--target_seg_type",
        "VRAM",
        "--max_block_size",
        str(max_block_size),
    ]


def check_result(point: SweepPoint, result: Any) -> dict[str, float]:
    """One `vllm bench serve` result, refused unless complete (every prompt answered)."""
    if not isinstance(result, dict):
        raise ToolError(Exit.FAILED, f"{point.name}: the benchmark result is not a JSON object")
    missing = [k for k in RESULT_KEYS if not isinstance(result.get(k), (int, float))]
    if missing:
        raise ToolError(Exit.FAILED, f"{point.name}: the benchmark result lacks {', '.join(missing)}")
    if result["num_prompts"] != point.num_prompts:
        raise ToolError(
            Exit.FAILED,
            f"{point.name}: the result is for {result['num_prompts']} prompts, the sweep "
            f"point sends {point.num_prompts}; not this run's result",
        )
    if result["completed"] < point.num_prompts:
        raise ToolError(
            Exit.FAILED,
            f"{point.name}: only {result['completed']} of {point.num_prompts} requests "
            "completed; a partial run is not fitted (nothing written)",
        )
    values = {k: float(result[k]) for k in RESULT_KEYS}
    if not all(math.isfinite(v) and v >= 0 for v in values.values()):
        raise ToolError(Exit.FAILED, f"{point.name}: the benchmark result has non-finite or negative figures")
    if isinstance(result.get("failed"), (int, float)) and result["failed"] > 0:
        raise ToolError(Exit.FAILED, f"{point.name}: {result['failed']:g} requests failed; nothing is fitted on it")
    return check_physical(point, values)


# what a result's token counts may stray from the sweep point's before it is not that point's measurement
TOKEN_RATIO_LIMIT = 2.0


def check_physical(point: SweepPoint, values: dict[str, float]) -> dict[str, float]:
    """Refuse a result no engine produces: no time to a first token or between tokens (a server that
    streams instantly), or far more or fewer tokens than the point asked."""
    if values["mean_ttft_ms"] <= 0 or (point.output_tokens > 1 and values["mean_itl_ms"] <= 0):
        raise ToolError(
            Exit.FAILED, f"{point.name}: a TTFT or ITL of 0 ms is a server that streams instantly, not an engine"
        )
    completed = max(values["completed"], 1.0)
    for key, asked in (("total_input_tokens", point.input_tokens), ("total_output_tokens", point.output_tokens)):
        mean = values[key] / completed
        if not asked / TOKEN_RATIO_LIMIT <= mean <= asked * TOKEN_RATIO_LIMIT:
            raise ToolError(
                Exit.FAILED,
                f"{point.name}: {mean:,.0f} {key.split('_')[1]} tokens a request against {asked:,} asked; "
                "not this sweep point's measurement; nothing written",
            )
    return values


def parse_nixlbench(text: str) -> float:
    """Per-worker GB/s of the largest block nixlbench reported (its `B/W (GB/Sec)` column)."""
    return max(parse_nixlbench_rows(text))[1]


def parse_nixlbench_rows(text: str) -> list[tuple[int, float]]:
    """Every (block bytes, per-worker GB/s) row of nixlbench's table; `nan` stays nan for the check."""
    rows: list[tuple[int, float]] = []
    header: Optional[list[str]] = None
    for line in text.splitlines():
        if "Block Size (B)" in line and "B/W (GB/Sec)" in line:
            # columns are padded to 15+ characters; names contain single spaces
            header = [c.strip() for c in line.split("  ") if c.strip()]
            continue
        parts = line.split()
        if header is None or len(parts) != len(header):
            continue
        try:
            rows.append((int(parts[0]), float(parts[header.index("B/W (GB/Sec)")])))
        except ValueError:
            continue
    if not rows:
        raise ToolError(Exit.FAILED, "nixlbench: no result rows (a `Block Size (B) ... B/W (GB/Sec)` table)")
    return sorted(rows)


# -- a measuring client for an endpoint reached directly (a port-forward, or a test's fake) ----------------
class _Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ttft: list[float] = []
        self.itl: list[float] = []
        self.tpot: list[float] = []
        self.input_tokens = 0
        self.output_tokens = 0
        self.completed = 0
        self.errors: list[str] = []


def _one_request(
    url: urllib.parse.SplitResult, model_id: str, point: SweepPoint, stats: _Stats, deadline: float
) -> None:
    body = json.dumps(
        {
            "model": model_id,
            "prompt": " ".join(["hi"] * point.input_tokens),
            "max_tokens": point.output_tokens,
            "ignore_eos": True,
            "stream": True,
            # the server's own token counts in a last chunk (OpenAI's stream_options, which vLLM honours):
            # the prompt of n words is n tokens only on some vocabularies
            "stream_options": {"include_usage": True},
        }
    ).encode()

    if deadline - time.monotonic() <= 0:
        raise TimeoutError("deadline passed")
    start = time.monotonic()
    stamps: list[float] = []
    usage: dict[str, Any] = {}
    lines = http_lines(
        "POST",
        f"http://{url.netloc}{url.path.rstrip('/')}/v1/completions",
        end=min(deadline, start + REQUEST_TIMEOUT_S),
        max_bytes=MAX_STREAM_BYTES,
        body=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        for raw in lines:  # server-sent events, one `data: {...}` line per token
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            if '"error"' in data:  # vLLM streams a failure as a data line with an error object
                raise RuntimeError(one_line(f"the server streamed an error line: {data}", 160))
            now = time.monotonic()
            try:
                event = json.loads(data)
            except ValueError:
                raise RuntimeError(one_line(f"the server streamed a line that is not JSON: {data}", 160)) from None
            if isinstance(event, dict) and isinstance(event.get("usage"), dict):
                usage = event["usage"]
            if not isinstance(event, dict) or event.get("choices"):  # the usage chunk carries no choice
                stamps.append(now)
    finally:
        lines.close()
    if len(stamps) < point.output_tokens:
        raise RuntimeError(f"{len(stamps)} of {point.output_tokens} tokens streamed")
    if len(stamps) > point.output_tokens:
        raise RuntimeError(f"{len(stamps)} tokens streamed for max_tokens {point.output_tokens}: not this request")
    with stats.lock:
        stats.ttft.append(stamps[0] - start)
        stats.itl.extend(b - a for a, b in itertools.pairwise(stamps))
        stats.tpot.append((stamps[-1] - stamps[0]) / max(1, len(stamps) - 1))
        stats.input_tokens += _counted(usage, "prompt_tokens", point.input_tokens)
        stats.output_tokens += _counted(usage, "completion_tokens", len(stamps))
        stats.completed += 1


def _counted(usage: dict[str, Any], key: str, fallback: int) -> int:
    """The server's count where it gave one (a prompt of n words may be more or fewer tokens), else ours."""
    value = usage.get(key)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else fallback


def measure(endpoint: str, model_id: str, point: SweepPoint, deadline: float) -> dict[str, Any]:
    """One sweep point against `endpoint`, closed loop, reported with `vllm bench serve`'s result keys."""
    url = urllib.parse.urlsplit(endpoint)
    if url.scheme != "http" or not url.hostname:
        raise ToolError(Exit.USAGE, f"--endpoint {endpoint!r}: expected http://host:port")
    stats, queue = _Stats(), list(range(point.num_prompts))
    queue_lock = threading.Lock()

    def client() -> None:
        while True:
            with queue_lock:
                if not queue or stats.errors:
                    return
                queue.pop()
            try:
                _one_request(url, model_id, point, stats, deadline)
            except Exception as exc:  # every failure of a request is a failed run
                with stats.lock:
                    stats.errors.append(one_line(f"{type(exc).__name__}: {exc}", 120))

    start = time.monotonic()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(point.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 5.0)
    duration = time.monotonic() - start
    if stats.errors or any(t.is_alive() for t in threads):
        raise ToolError(
            Exit.FAILED,
            f"{point.name}: {stats.completed} of {point.num_prompts} requests completed"
            f" ({stats.errors[0] if stats.errors else 'deadline passed'}); nothing written",
        )

    def mean(xs: list[float]) -> float:
        return 1e3 * sum(xs) / len(xs) if xs else 0.0

    return {
        "completed": stats.completed,
        "num_prompts": point.num_prompts,
        "max_concurrency": point.concurrency,
        "backend": "llm_pd_eks_sizing.calibrate (a measuring client with vllm bench serve's result keys)",
        "total_input_tokens": stats.input_tokens,
        "total_output_tokens": stats.output_tokens,
        "mean_ttft_ms": mean(stats.ttft),
        "mean_itl_ms": mean(stats.itl),
        "mean_tpot_ms": mean(stats.tpot),
        "output_throughput": stats.output_tokens / duration,
        "duration": duration,
    }


Progress = Callable[[str], None]
