"""Run on the GPU machine: the rendered P/D app on the release's Ray, vLLM and NIXL, measured.

    python3 gpu_main.py BUNDLE OUT pd     # raylets, P/D app, probes, NIXL counters, verify's checks, bench
    python3 gpu_main.py BUNDLE OUT agg    # the aggregated app on the same raylets, bench
    python3 gpu_main.py BUNDLE OUT mix-pd     # short and long prompts through plain P/D
    python3 gpu_main.py BUNDLE OUT mix-cond   # the same through P/D with decode-only below the sized threshold
    python3 gpu_main.py BUNDLE OUT stop

Standard library only (plus the wheels' `ray`, `vllm` and `tokenizers`), so it runs under the
machine's Python with nothing of this project installed. BUNDLE is what `render` wrote; everything the
run shows goes to OUT as JSON and text (evidence-<phase>.json, metrics-<phase>.prom, ...).
The raylets are started in their own process session so the `agg` phase finds them still running.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HEAD_PORT = 6379
DASHBOARD = "http://127.0.0.1:8265"
SERVE = "http://127.0.0.1:8000"
METRICS_PORTS = {"head": 8080, "prefill": 8081, "decode": 8082}
MODEL_DIR = Path("/tmp/realrun/model")
TEMP_DIR = "/tmp/ray"
# What NIXL prints when a backend comes up (the pattern `make verify` reads the worker logs with).
NIXL_BACKEND_LINE = re.compile(r"NIXL\s+\w+\s+\S+\s+Backend (\w+) was instantiated")
LONG_PROMPT_WORDS = 3000  # as verify's chat-completion check
LOADS = ((1, 8), (8, 48), (32, 128))  # (clients, prompts): vllm bench serve --max-concurrency / --num-prompts
INPUT_LEN, OUTPUT_LEN = 1024, 128
# The decode-only arm against plain P/D: prompts well below and well above the sized threshold.
MIX_LOADS = ((8, 48, 128), (8, 48, 4096))  # (clients, prompts, input tokens)
THRESHOLD_KEY = "llm_pd_eks_decode_only_below_tokens"  # the decode LLMConfig's experimental_configs key
START_TIMEOUT_S = 420


def log(*parts: object) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def http(method: str, url: str, body: object | None = None, timeout: float = 60) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            return reply.status, reply.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


# --- the model: the real config.json, dummy weights, a tokenizer built here --------------------------

SPECIALS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(bundle: Path) -> None:
    """A byte-level BPE trained in seconds on generated text, padded to the model's vocabulary so every
    id a dummy-weight model samples decodes (filler tokens are ASCII, which byte-level maps to itself)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # type: ignore[import-not-found]

    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    config = json.loads((bundle / "model" / "config.json").read_text())
    (MODEL_DIR / "config.json").write_text(json.dumps(config))
    vocab_size = config["vocab_size"]
    words = "the prefill phase reads every token of this prompt once decode receives kv cache over network".split()
    corpus = [
        " ".join(words[(i * 7 + j) % len(words)] for j in range(40)) + f" {i} {i * 31 % 977}" for i in range(4000)
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=2048, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    )
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    taken = set(vocab.values()) | set(SPECIALS.values())
    for n, i in enumerate(i for i in range(vocab_size) if i not in taken):
        vocab[f"zz{n:06d}"] = i
    vocab.update(SPECIALS)
    added = {
        t: {"content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for t in SPECIALS
    }
    spec["added_tokens"] = [{"id": i, **added[t]} for t, i in SPECIALS.items()]
    (MODEL_DIR / "tokenizer.json").write_text(json.dumps(spec))
    (MODEL_DIR / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "bos_token": None,
                "model_max_length": config["max_position_embeddings"],
                "chat_template": CHAT_TEMPLATE,
                "added_tokens_decoder": {str(i): added[t] for t, i in SPECIALS.items()},
            }
        )
    )
    (MODEL_DIR / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))


# --- the cluster: the head and one raylet per role, as KubeRay would start them ---------------------


def ray_cmd() -> list[str]:
    return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"]


def start_raylets(bundle: Path) -> dict[str, list[str]]:
    raylets = json.loads((bundle / "raylets.json").read_text())
    # the decode-only arm's runtime module on the Python path, as the ConfigMap puts it in the pods
    runtime = str((bundle / "runtime").resolve())
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), runtime) if p)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=path)
    head = raylets["head"]
    cmd = [
        *ray_cmd(),
        "start",
        "--head",
        f"--port={HEAD_PORT}",
        f"--temp-dir={TEMP_DIR}",
        "--disable-usage-stats",
        f"--num-cpus={head['num-cpus']}",
        f"--num-gpus={head['num-gpus']}",
        "--dashboard-host=127.0.0.1",
        f"--metrics-export-port={METRICS_PORTS['head']}",
        "--object-store-memory=2000000000",
    ]
    started = {"head": cmd[3:]}
    run_detached(cmd, env)
    for n, role in enumerate(("prefill", "decode")):
        spec = raylets[role]["start"]
        base = 20000 + n * 1000
        cmd = [
            *ray_cmd(),
            "start",
            f"--address=127.0.0.1:{HEAD_PORT}",
            "--disable-usage-stats",
            f"--num-gpus={spec['num-gpus']}",
            f"--num-cpus={spec['num-cpus']}",
            f"--resources={json.dumps(spec['resources'])}",
            f"--object-store-memory={spec['object-store-memory']}",
            f"--metrics-export-port={METRICS_PORTS[role]}",
            f"--node-manager-port={base + 1}",
            f"--object-manager-port={base + 2}",
            f"--dashboard-agent-listen-port={base + 3}",
            f"--dashboard-agent-grpc-port={base + 4}",
            f"--runtime-env-agent-port={base + 5}",
            f"--min-worker-port={base + 100}",
            f"--max-worker-port={base + 999}",
        ]
        role_env = dict(env, **raylets[role]["env"], VLLM_HOST_IP="127.0.0.1")
        started[role] = cmd[3:]
        run_detached(cmd, role_env)
    return started


def run_detached(cmd: list[str], env: dict[str, str]) -> None:
    """`ray start` in a new session: its daemons outlive this command (the next phase uses them)."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, start_new_session=True)
    log("ray start ->", proc.returncode, proc.stdout[-400:].strip().replace("\n", " | "))
    if proc.returncode != 0:
        raise SystemExit(f"ray start failed: {proc.stderr[-2000:]}")


def ray_status() -> str:
    proc = subprocess.run(
        [*ray_cmd(), "status", f"--address=127.0.0.1:{HEAD_PORT}"], capture_output=True, text=True, timeout=60
    )
    return proc.stdout


# --- Serve: deploy as KubeRay does (PUT the serve config to the dashboard), wait for RUNNING ----------


def deploy(config: dict) -> dict:
    for _ in range(12):  # the dashboard may still be coming up
        status, text = http("PUT", f"{DASHBOARD}/api/serve/applications/", config, timeout=60)
        log("PUT serve config ->", status, text[:300])
        if status == 200:
            break
        time.sleep(5)
    deadline = time.monotonic() + START_TIMEOUT_S
    last: dict = {}
    while time.monotonic() < deadline:
        status, text = http("GET", f"{DASHBOARD}/api/serve/applications/", timeout=30)
        if status == 200:
            last = json.loads(text)
            app = last.get("applications", {}).get("llm", {})
            state = app.get("status")
            log("app llm:", state, {d: v.get("status") for d, v in app.get("deployments", {}).items()})
            if state == "RUNNING":
                return last
            if state in ("DEPLOY_FAILED", "UNHEALTHY"):
                break
        time.sleep(10)
    return last


# --- probes -------------------------------------------------------------------------------------------


def long_prompt() -> str:
    words = (
        "The prefill phase reads every token of this prompt once; the decode phase then receives the KV "
        "cache over the network and continues. "
    ).split()
    return " ".join(words[i % len(words)] for i in range(LONG_PROMPT_WORDS)) + "\nSummarise the text in one sentence."


def chat(model: str, content: str, max_tokens: int = 16) -> dict:
    started = time.monotonic()
    body = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "messages": [{"role": "user", "content": content}],
    }
    status, text = http("POST", f"{SERVE}/v1/chat/completions", body, timeout=300)
    out: dict[str, object] = {"status": status, "seconds": round(time.monotonic() - started, 3)}
    try:
        reply = json.loads(text)
        out["usage"] = reply.get("usage")
        out["content_chars"] = len(reply["choices"][0]["message"]["content"] or "")
        out["finish_reason"] = reply["choices"][0].get("finish_reason")
    except (ValueError, KeyError, IndexError, TypeError):
        out["error"] = text[:500]
    return out


def stream(model: str) -> dict:
    body = {"model": model, "prompt": "The decode phase", "max_tokens": 24, "stream": True, "ignore_eos": True}
    req = urllib.request.Request(
        f"{SERVE}/v1/completions",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    chunks, done, first = 0, False, None
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=300) as reply:
            for raw in reply:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                chunks += 1
                first = first or round(time.monotonic() - started, 3)
    except (urllib.error.URLError, OSError) as exc:
        return {"error": str(exc), "chunks": chunks}
    return {"chunks": chunks, "done": done, "first_chunk_s": first, "seconds": round(time.monotonic() - started, 3)}


def scrape() -> dict[str, str]:
    return {
        node: http("GET", f"http://127.0.0.1:{port}/metrics", timeout=30)[1] for node, port in METRICS_PORTS.items()
    }


def nixl_samples(text: str, prefix: str = "ray_vllm_nixl") -> dict[str, float]:
    """Every sample line whose name starts with `prefix` (name{labels} -> value): NIXL's by default."""
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
    return out


def nixl_log_lines() -> list[str]:
    lines = []
    for path in sorted(Path(TEMP_DIR, "session_latest", "logs").glob("worker-*.out")):
        for line in path.read_text(errors="replace").splitlines():
            if NIXL_BACKEND_LINE.search(line) or ("NixlConnector" in line and "backend" in line.lower()):
                lines.append(f"{path.name}: {line[:400]}")
    return lines[:200]


def bench(model: str, label: str, out: Path, loads: tuple = ()) -> list[dict]:
    results = []
    for clients, prompts, input_len in loads or tuple((c, p, INPUT_LEN) for c, p in LOADS):
        name = f"bench-{label}-c{clients}-i{input_len}.json" if loads else f"bench-{label}-c{clients}.json"
        cmd = [
            sys.executable,
            "-m",
            "vllm.entrypoints.cli.main",
            "bench",
            "serve",
            "--backend",
            "openai",
            "--base-url",
            SERVE,
            "--endpoint",
            "/v1/completions",
            "--model",
            model,
            "--tokenizer",
            str(MODEL_DIR),
            "--dataset-name",
            "random",
            f"--random-input-len={input_len}",
            f"--random-output-len={OUTPUT_LEN}",
            f"--num-prompts={prompts}",
            f"--max-concurrency={clients}",
            "--ignore-eos",
            "--seed=0",
            "--percentile-metrics=ttft,tpot,itl,e2el",
            "--metric-percentiles=50,90,99",
            "--save-result",
            f"--result-dir={out / 'bench'}",
            f"--result-filename={name}",
            "--disable-tqdm",
        ]
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        log(f"bench {label} c={clients} ->", proc.returncode, f"{time.monotonic() - started:.0f}s")
        row: dict = {
            "clients": clients,
            "prompts": prompts,
            "input_len": input_len,
            "output_len": OUTPUT_LEN,
            "rc": proc.returncode,
        }
        try:
            data = json.loads((out / "bench" / name).read_text())
            row.update({k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        except (OSError, ValueError):
            row["stderr"] = proc.stderr[-1500:]
        results.append(row)
    return results


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("ray", "vllm", "nixl", "nixl-cu13", "torch", "transformers", "tokenizers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    out["gpu"] = smi.stdout.strip()
    out["python"] = sys.version.split()[0]
    return out


def phase_pd(bundle: Path, out: Path) -> dict:
    build_tokenizer(bundle)
    evidence: dict = {
        "phase": "pd",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": versions(),
    }
    evidence["ray_start"] = start_raylets(bundle)
    time.sleep(5)
    evidence["ray_status_before"] = ray_status()
    config = json.loads((bundle / "serve-pd.json").read_text())
    model = config["applications"][0]["args"]["decode_config"]["model_loading_config"]["model_id"]
    evidence["serve_status"] = deploy(config)
    app = evidence["serve_status"].get("applications", {}).get("llm", {})
    evidence["app_status"] = app.get("status")
    if app.get("status") != "RUNNING":
        return evidence
    evidence["ray_status_running"] = ray_status()
    status, text = http("GET", f"{SERVE}/v1/models")
    evidence["models"] = {
        "status": status,
        "ids": [m.get("id") for m in json.loads(text).get("data", [])] if status == 200 else text[:300],
    }
    before = scrape()
    evidence["chat_verify"] = chat(model, long_prompt())  # verify's chat-completion request
    evidence["chat_short"] = chat(model, "Say hello.", max_tokens=8)
    evidence["stream"] = stream(model)
    time.sleep(12)  # a metrics export interval (Ray: 10 s) after the requests
    after = scrape()
    evidence["nixl_before"] = {n: nixl_samples(t) for n, t in before.items()}
    evidence["nixl_after"] = {n: nixl_samples(t) for n, t in after.items()}
    (out / "metrics-pd.prom").write_text("".join(f"# node {n}\n{t}\n" for n, t in after.items()))
    evidence["nixl_log_lines"] = nixl_log_lines()
    evidence["bench"] = bench(model, "pd", out)
    time.sleep(12)
    final = scrape()
    evidence["nixl_after_bench"] = {n: nixl_samples(t) for n, t in final.items()}
    (out / "metrics-pd-after-bench.prom").write_text("".join(f"# node {n}\n{t}\n" for n, t in final.items()))
    return evidence


def phase_agg(bundle: Path, out: Path) -> dict:
    evidence: dict = {"phase": "agg", "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if http("GET", f"{DASHBOARD}/api/version", timeout=10)[0] != 200:  # a fresh machine: start the cluster
        build_tokenizer(bundle)
        evidence["versions"] = versions()
        evidence["ray_start"] = start_raylets(bundle)
    config = json.loads((bundle / "serve-agg.json").read_text())
    model = config["applications"][0]["args"]["llm_configs"][0]["model_loading_config"]["model_id"]
    evidence["serve_status"] = deploy(config)
    app = evidence["serve_status"].get("applications", {}).get("llm", {})
    evidence["app_status"] = app.get("status")
    if app.get("status") == "RUNNING":
        evidence["chat_short"] = chat(model, "Say hello.", max_tokens=8)
        evidence["bench"] = bench(model, "agg", out)
    return evidence


def phase_mix(bundle: Path, out: Path, arm: str) -> dict:
    """Short and long prompts through one P/D arm: `pd` as rendered, or `cond` (decode-only below the
    sized threshold); the decode-only path's counter scraped after."""
    evidence: dict = {"phase": f"mix-{arm}", "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if http("GET", f"{DASHBOARD}/api/version", timeout=10)[0] != 200:
        build_tokenizer(bundle)
        evidence["versions"] = versions()
        evidence["ray_start"] = start_raylets(bundle)
    config = json.loads((bundle / f"serve-{arm}.json").read_text())
    decode = config["applications"][0]["args"]["decode_config"]
    model = decode["model_loading_config"]["model_id"]
    evidence["decode_only_below_tokens"] = decode.get("experimental_configs", {}).get(THRESHOLD_KEY)
    evidence["serve_status"] = deploy(config)
    app = evidence["serve_status"].get("applications", {}).get("llm", {})
    evidence["app_status"] = app.get("status")
    if app.get("status") == "RUNNING":
        evidence["bench"] = bench(model, f"mix-{arm}", out, MIX_LOADS)
        time.sleep(12)
        evidence["paths"] = {node: nixl_samples(text, "ray_llm_pd_eks_pd_path") for node, text in scrape().items()}
    return evidence


def failure_logs(out: Path) -> None:
    """The lines that say why, from the Serve controller, replicas and workers' stderr."""
    logs = Path(TEMP_DIR, "session_latest", "logs")
    keep = re.compile(r"Error|error|Traceback|exception|Exception|FAILED|failed|CUDA|NIXL|nixl|OOM|Killed")
    lines = []
    for pattern in ("serve/controller_*.log", "serve/replica_*.log", "worker-*.err", "raylet*.out", "gcs_server.out"):
        for path in sorted(logs.glob(pattern)):
            hits = [line[:500] for line in path.read_text(errors="replace").splitlines() if keep.search(line)]
            if hits:
                lines.append(f"== {path.name}")
                lines.extend(hits[-60:])
    (out / "failure.txt").write_text("\n".join(lines[-3000:]) + "\n")


def main() -> int:
    bundle, out, phase = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    out.mkdir(parents=True, exist_ok=True)
    if phase == "stop":
        subprocess.run([*ray_cmd(), "stop", "--force"], timeout=120)
        return 0
    if phase in ("mix-pd", "mix-cond"):
        evidence = phase_mix(bundle, out, phase.split("-")[1])
    else:
        evidence = {"pd": phase_pd, "agg": phase_agg}[phase](bundle, out)
    (out / f"evidence-{phase}.json").write_text(json.dumps(evidence, indent=1, default=str) + "\n")
    log("evidence written:", phase, evidence.get("app_status"))
    if evidence.get("app_status") != "RUNNING":
        failure_logs(out)
    return 0 if evidence.get("app_status") == "RUNNING" else 1


if __name__ == "__main__":
    raise SystemExit(main())
