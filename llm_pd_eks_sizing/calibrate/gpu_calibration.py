"""Run on the GPU machine: measure one vLLM engine the way the sizing model describes it, one command.

    python3 llm_pd_eks_sizing/calibrate/gpu_calibration.py --out "$OUT" [--model ID ...] [--budget-s 500]

For each model (a real config.json under llm_pd_eks_sizing/realrun/models/, dummy weights: `load_format
dummy`, a byte-level tokenizer built here and padded to the model's vocabulary) it starts the release's
vLLM OpenAI server at TP 1, bf16, prefix caching off, default chunked prefill, and runs vLLM's own
benchmark, `vllm bench serve` (random fixed-length prompts, `--ignore-eos`, closed loop, one warm-up
request). The benchmark runs in this process (`vllm.benchmarks.serve.main`, what the `vllm bench serve`
command calls) so vLLM is imported once, not once a level:

* prefill: TTFT at one client, prompts of 128 to 16k tokens, one output token;
* decode: ITL at one client, contexts of 256 to 16k tokens, 64 output tokens;
* harness: `make calibrate ENDPOINT=...`'s own measuring client (`HARNESS`, a module of this project
  that needs only the standard library and pydantic, which vLLM brings) at the 1k-token sweep's first
  levels, so the tool's figures meet vLLM's own on a real engine;
* sweep: 1 to 256 clients at 1k, 128 and 8k-token prompts, 128 output tokens (a level whose prompt
  tokens would exceed `MAX_PROMPT_TOKENS` is skipped and said so).

Everything goes to OUT/gpu-calibration.json (rewritten after every run, so a stop keeps what was
measured): the device, versions, the engine's scheduler limits from its log, and each run's `vllm bench
serve` scalars; the server's log tail goes beside it. `python -m llm_pd_eks_sizing.calibrate.gpu_fit
OUT/gpu-calibration.json` fits the constants from the prefill and decode runs and judges the point
query on the sweep it held out. Standard library only (plus the machine's `vllm` and `tokenizers`), so
it runs with nothing of this project installed; only the harness level imports `HARNESS`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = HERE.parent / "realrun" / "models"
DEFAULT_MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-32B-Instruct")
PORT = 8100
WORK = Path("/tmp/gpu-calibration")
RESULTS = WORK / "bench"  # vllm bench serve's result files: kept off OUT (a device call returns 8 files)
HARNESS = "llm_pd_eks_sizing.calibrate.bench"  # make calibrate's measuring client
HARNESS_CLIENTS = (1, 4, 16)
PREFILL_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
DECODE_CONTEXTS = (256, 1024, 4096, 16384)
DECODE_OUTPUT = 64
SWEEP_INPUTS = (1024, 128, 8192)  # the workload-like length first: a budget stop keeps it
SWEEP_CLIENTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SWEEP_OUTPUT = 128
PROMPTS_PER_CLIENT = 2
MAX_PROMPT_TOKENS = 1_200_000  # a sweep level past this would not end inside the device's command limit
MAX_MODEL_LEN = 16384 + 512
START_TIMEOUT_S = 420
RUN_TIMEOUT_S = 420
LOG_TAIL_BYTES = 200_000
# the engine's scheduler limits, as its start-up log states them (vllm/config/scheduler.py, 0.26.0)
ENGINE_LIMITS = {
    "max_num_batched_tokens": re.compile(r"max_num_batched_tokens[=:\s]+(\d+)"),
    "max_num_seqs": re.compile(r"max_num_seqs[=:\s]+(\d+)"),
    "gpu_kv_cache_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"),
}


def log(*parts: object) -> None:
    print("[gpu-calibration]", *parts, file=sys.stderr, flush=True)


def build_tokenizer(config: dict, into: Path) -> None:
    """A byte-level BPE trained on generated text, padded with filler tokens to the model's vocabulary
    so every id a dummy-weight model samples decodes; the config's bos/eos ids are special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # type: ignore[import-not-found]

    eos = config.get("eos_token_id")
    specials = {f"<|special_{i}|>": i for i in ([eos] if isinstance(eos, int) else list(eos or []))}
    if isinstance(config.get("bos_token_id"), int):
        specials[f"<|special_{config['bos_token_id']}|>"] = config["bos_token_id"]
    # "hi" is in the corpus so the harness's prompts (" ".join(["hi"] * n)) are n tokens, as on a real vocabulary
    words = "hi prefill reads every prompt token once while decode streams weights and the kv cache hi".split()
    corpus = [" ".join(words[(i * 5 + j) % len(words)] for j in range(32)) + f" {i}" for i in range(3000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=1024, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    )
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    taken = set(vocab.values()) | set(specials.values())
    filler = (i for i in range(config["vocab_size"]) if i not in taken)
    for n, i in enumerate(filler):
        vocab[f"f{n:06d}"] = i
    vocab.update(specials)
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    spec["added_tokens"] = [{"id": i, "content": t, **flags} for t, i in specials.items()]
    into.mkdir(parents=True, exist_ok=True)
    (into / "config.json").write_text(json.dumps(config))
    (into / "tokenizer.json").write_text(json.dumps(spec))
    first_eos = next(iter(specials), None)
    (into / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": first_eos,
                "model_max_length": config["max_position_embeddings"],
                "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}",
            }
        )
    )
    (into / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))


def healthy() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_server(model_dir: Path, name: str, logs: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        name,
        "--load-format",
        "dummy",
        "--dtype",
        "bfloat16",
        "--tensor-parallel-size",
        "1",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--no-enable-prefix-caching",
        "--port",
        str(PORT),
    ]
    log("starting", " ".join(cmd))
    out = logs.open("w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}; see {logs}")
        if healthy():
            return proc
        time.sleep(5)
    stop_server(proc)
    raise RuntimeError(f"the server was not healthy within {START_TIMEOUT_S} s; see {logs}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def bench_args(name: str, tokenizer: Path, label: str, inp: int, outp: int, clients: int, prompts: int) -> list[str]:
    """`vllm bench serve`'s arguments for one level (what follows `vllm bench serve` on its command line)."""
    return [
        "--backend",
        "openai",
        "--base-url",
        f"http://127.0.0.1:{PORT}",
        "--endpoint",
        "/v1/completions",
        "--model",
        name,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random",
        f"--random-input-len={inp}",
        f"--random-output-len={outp}",
        f"--num-prompts={prompts}",
        f"--max-concurrency={clients}",
        "--request-rate=inf",
        "--num-warmups=1",
        "--ignore-eos",
        "--seed=0",
        "--percentile-metrics=ttft,tpot,itl,e2el",
        "--metric-percentiles=50,90,99",
        "--save-result",
        f"--result-dir={RESULTS}",
        f"--result-filename={label}.json",
        "--disable-tqdm",
    ]


def bench(
    name: str, tokenizer: Path, label: str, inp: int, outp: int, clients: int, prompts: int, timeout: float
) -> dict:
    """One `vllm bench serve` level, run in this process; its saved result's scalars, or why it failed."""
    import asyncio
    import contextlib

    from vllm.benchmarks.serve import add_cli_args, main_async  # type: ignore[import-not-found]
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args(bench_args(name, tokenizer, label, inp, outp, clients, prompts))
    row: dict = {"label": label, "input_len": inp, "output_len": outp, "clients": clients, "prompts": prompts}
    started = time.monotonic()
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (WORK / "bench.log").open("a") as sink, contextlib.redirect_stdout(sink):
        try:
            asyncio.run(asyncio.wait_for(main_async(args), timeout))
        except Exception as exc:  # a failed level is recorded as such; the next level still runs
            return {**row, "error": f"{type(exc).__name__}: {exc}"[:1500]}
    row["wall_s"] = round(time.monotonic() - started, 1)
    try:
        data = json.loads((RESULTS / f"{label}.json").read_text())
    except (OSError, ValueError) as exc:
        return {**row, "error": f"no result file ({exc})"}
    row.update({k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return row


def harness(name: str, inp: int, outp: int, clients: int, timeout: float) -> dict:
    """One level measured by make calibrate's own client against the live server."""
    root = str(HERE.parent.parent)  # the working tree's root: the project's packages
    if root not in sys.path:
        sys.path.insert(0, root)
    bench_module = importlib.import_module(HARNESS)
    point = bench_module.SweepPoint(inp, outp, clients)
    row: dict = {
        "label": f"harness-in{inp}-c{clients}",
        "input_len": inp,
        "output_len": outp,
        "clients": clients,
        "prompts": point.num_prompts,
    }
    started = time.monotonic()
    try:
        result = bench_module.measure(f"http://127.0.0.1:{PORT}", name, point, time.monotonic() + timeout)
    except Exception as exc:  # the harness failing against a real engine is the finding
        return {**row, "error": f"{type(exc).__name__}: {exc}"[:1500]}
    row["wall_s"] = round(time.monotonic() - started, 1)
    row.update({k: v for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return row


def engine_limits(log_path: Path) -> dict[str, float]:
    """The scheduler limits and KV capacity the server's start-up log states."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    found: dict[str, float] = {}
    for key, pattern in ENGINE_LIMITS.items():
        match = pattern.search(text)
        if match:
            found[key] = float(match.group(1).replace(",", ""))
    return found


def keep_log_tail(log_path: Path, into: Path) -> None:
    if log_path.exists():
        data = log_path.read_bytes()
        into.write_bytes(data[:20_000] + b"\n...\n" + data[-LOG_TAIL_BYTES:] if len(data) > LOG_TAIL_BYTES else data)


def plan(only: re.Pattern[str] | None = None) -> list[tuple[str, str, int, int, int, int]]:
    """(kind, label, input, output, clients, prompts) of every run, in order; `only` keeps the labels it
    matches (searched, not anchored)."""
    runs = [("prefill", f"prefill-in{p}", p, 1, 1, 3) for p in PREFILL_LENGTHS]
    runs += [("decode", f"decode-in{c}", c, DECODE_OUTPUT, 1, 2) for c in DECODE_CONTEXTS]
    runs += [("harness", f"harness-in1024-c{c}", 1024, SWEEP_OUTPUT, c, 4 * c) for c in HARNESS_CLIENTS]
    for inp in SWEEP_INPUTS:
        for clients in SWEEP_CLIENTS:
            prompts = max(4, PROMPTS_PER_CLIENT * clients)
            runs.append(("sweep", f"sweep-in{inp}-c{clients}", inp, SWEEP_OUTPUT, clients, prompts))
    return [run for run in runs if only is None or only.search(run[1])]


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for module in ("vllm", "torch", "tokenizers"):
        try:
            found[module] = __import__(module).__version__
        except Exception as exc:  # a missing module is itself the fact to record
            found[module] = f"unavailable ({type(exc).__name__})"
    try:
        found["gpu"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        found["gpu"] = f"unavailable ({type(exc).__name__})"
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_calibration", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for gpu-calibration.json and logs")
    parser.add_argument("--model", action="append", help="Hugging Face id under realrun/models (repeatable)")
    parser.add_argument("--budget-s", type=float, default=500.0, help="stop starting runs after this many seconds")
    parser.add_argument("--instance-type", default="p5en.48xlarge", help="the EC2 type whose GPU this is")
    parser.add_argument(
        "--only",
        type=re.compile,
        help="run only the levels whose label matches this regex (the rest of a model a budget cut: a second call)",
    )
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    record: dict = {
        "kind": "vllm-gpu-calibration",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": versions(),
        "instance_type": args.instance_type,
        "tp": 1,
        "engine": {"dtype": "bfloat16", "prefix_caching": False, "load_format": "dummy", "chunked_prefill": "default"},
        "models": {},
    }
    path = args.out / "gpu-calibration.json"
    for model_id in args.model or DEFAULT_MODELS:
        config = json.loads((MODELS / model_id / "config.json").read_text())
        model_dir = WORK / model_id.replace("/", "--")
        build_tokenizer(config, model_dir)
        entry: dict = {"runs": [], "skipped": []}
        record["models"][model_id] = entry
        if time.monotonic() > deadline:
            entry["skipped"].append("the budget ran out before the server started")
            break
        server_log = WORK / f"server-{model_dir.name}.log"
        started = time.monotonic()
        try:
            proc = start_server(model_dir, model_id, server_log)
        except RuntimeError as exc:  # recorded with the log tail; the next model still runs
            entry["error"] = str(exc)
            keep_log_tail(server_log, args.out / server_log.name)
            path.write_text(json.dumps(record, indent=1))
            continue
        entry["server_start_s"] = round(time.monotonic() - started, 1)
        entry["engine"] = engine_limits(server_log)
        path.write_text(json.dumps(record, indent=1))
        try:
            for kind, label, inp, outp, clients, prompts in plan(args.only):
                if time.monotonic() > deadline:
                    entry["skipped"].append(f"{label}: the budget ran out")
                    continue
                if inp * prompts > MAX_PROMPT_TOKENS:
                    entry["skipped"].append(f"{label}: {inp * prompts:,} prompt tokens exceed {MAX_PROMPT_TOKENS:,}")
                    continue
                # a level never runs far past the budget: the device's command limit would cut the log
                timeout = max(30.0, min(RUN_TIMEOUT_S, deadline - time.monotonic() + 60))
                if kind == "harness":
                    row = harness(model_id, inp, outp, clients, timeout)
                else:
                    row = bench(model_id, model_dir, label, inp, outp, clients, prompts, timeout)
                entry["runs"].append({"kind": kind, **row})
                log(
                    label,
                    "->",
                    row.get("mean_ttft_ms"),
                    "ms TTFT,",
                    row.get("mean_itl_ms"),
                    "ms ITL",
                    row.get("error", ""),
                )
                path.write_text(json.dumps(record, indent=1))
        finally:
            stop_server(proc)
            keep_log_tail(server_log, args.out / server_log.name)
        path.write_text(json.dumps(record, indent=1))
    log("wrote", path)
    return 0


if __name__ == "__main__":
    # The tools' runner from the checkout the machine runs (llm_pd_eks_tools/core: the standard library only).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    importlib.import_module("llm_pd_eks_tools.core.cli").exit_with("gpu_calibration", main)
