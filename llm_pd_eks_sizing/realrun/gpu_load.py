"""The load the real run puts on the served app, and what it reads back (used by gpu_main).

- probes and `vllm bench serve` (random prompts, closed loop at fixed client counts);
- the prefix-repetition workload of the prefix-routing arms: PREFIX_COUNT distinct shared prefixes of
  PREFIX_TOKENS tokens, each request one prefix and a short suffix of its own, every prefix asked
  PREFIX_REPEATS times in a seeded shuffled order, sent by a closed loop of streaming clients that
  time each request's first token and the tokens after it;
- vLLM's prefix-cache counters (`vllm:prefix_cache_queries` / `vllm:prefix_cache_hits`, tokens looked
  up / found; exported by Ray as `ray_vllm_prefix_cache_{queries,hits}_total`, llm_pd_eks/metrics.py)
  read from two scrapes into a hit rate per role and per replica.

Standard library only, like gpu_main: it runs under the GPU machine's Python with the release's wheels.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

SERVE = "http://127.0.0.1:8000"
MODEL_DIR = Path("/tmp/realrun/model")
LOADS = ((1, 8), (8, 48), (32, 128))  # (clients, prompts): vllm bench serve --max-concurrency / --num-prompts
# allowed for one `vllm bench serve` before the first has shown its time: its vLLM import, then the load
BENCH_FLOOR_S = 45.0
INPUT_LEN, OUTPUT_LEN = 1024, 128
# The words the run's tokenizer is trained on (gpu_main.build_tokenizer): each a token of its own there,
# so a prefix of N of them is close to N tokens before it is fitted exactly.
WORDS = "the prefill phase reads every token of this prompt once decode receives kv cache over network".split()

PREFIX_COUNT, PREFIX_TOKENS, PREFIX_REPEATS = 24, 2048, 4
SUFFIX_WORDS = 8  # after "Request <n>:", so no two requests share more than their prefix
PREFIX_OUTPUT_TOKENS = 32
PREFIX_CONCURRENCIES = (4, 8, 16)
# A request that gets no byte for this long ends its load as stalled (its clients send nothing more):
# a router that stops routing (as PrefixCacheAffinityRouter did on a 2-core machine, docs/real-run.md)
# then costs one timeout, not a timeout per request. Far above any TTFT the arms see under load.
STALL_S = 60.0
STALLED_BEFORE = "a load before it stalled"
PREFIX_HITS, PREFIX_QUERIES = "ray_vllm_prefix_cache_hits_total", "ray_vllm_prefix_cache_queries_total"
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


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


# --- probes and vllm bench serve ------------------------------------------------------------------


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


def next_load_fits(deadline: Optional[float], last_s: float, wait_s: float = 0.0, floor_s: float = 0.0) -> bool:
    """Whether a load started now ends before `deadline` (time.monotonic; None: no deadline), taking
    1.5x the load before (never less than `floor_s`) and then `wait_s` for the scrape after it."""
    return deadline is None or time.monotonic() + max(floor_s, 1.5 * last_s) + wait_s <= deadline


def bench(model: str, label: str, out: Path, loads: tuple = (), deadline: Optional[float] = None) -> list[dict]:
    """`vllm bench serve` at each load in turn. A load that would run past `deadline` (time.monotonic:
    1.5x the load before, and never less than BENCH_FLOOR_S) is a skipped row."""
    results = []
    last = 0.0
    for clients, prompts, input_len in loads or tuple((c, p, INPUT_LEN) for c, p in LOADS):
        name = f"bench-{label}-c{clients}-i{input_len}.json" if loads else f"bench-{label}-c{clients}.json"
        row: dict = {"clients": clients, "prompts": prompts, "input_len": input_len, "output_len": OUTPUT_LEN}
        if not next_load_fits(deadline, last, floor_s=BENCH_FLOOR_S):
            results.append({**row, "skipped": "the phase's time budget"})
            continue
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
        last = time.monotonic() - started
        log(f"bench {label} c={clients} ->", proc.returncode, f"{last:.0f}s")
        row["rc"] = proc.returncode
        try:
            data = json.loads((out / "bench" / name).read_text())
            row.update({k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        except (OSError, ValueError):
            row["stderr"] = proc.stderr[-1500:]
        results.append(row)
    return results


# --- the prefix-repetition workload -----------------------------------------------------------------


def word_count(text: str) -> int:
    """The token count where no tokenizer is at hand: one token a word."""
    return len(text.split())


def fitted_prefix(rng: random.Random, tokens: int, count_tokens: Callable[[str], int]) -> tuple[str, int]:
    """Random words from WORDS, as many as make `tokens` tokens by `count_tokens` (or the most that stay
    within it, where one word is more than one token): the text and its token count."""
    words = [rng.choice(WORDS) for _ in range(tokens)]
    n = len(words)
    for _ in range(12):  # each word ~1 token: the gap shrinks to 0 in a step or two
        got = count_tokens(" ".join(words[:n]))
        if got == tokens:
            break
        n = max(1, n + tokens - got)
        words.extend(rng.choice(WORDS) for _ in range(max(0, n - len(words))))
    while n > 1 and count_tokens(" ".join(words[:n])) > tokens:
        n -= 1
    text = " ".join(words[:n])
    return text, count_tokens(text)


def prefix_workload(
    seed: int,
    count: int = PREFIX_COUNT,
    tokens: int = PREFIX_TOKENS,
    repeats: int = PREFIX_REPEATS,
    count_tokens: Optional[Callable[[str], int]] = None,
) -> list[dict[str, Any]]:
    """`count` distinct prefixes of `tokens` tokens, each asked `repeats` times with a suffix of its own,
    in a shuffled order: the same list for the same seed. A suffix starts with a space, so a byte-level
    tokenizer splits there and the prefix's tokens (and cache blocks) are the same in every request."""
    rng = random.Random(seed)
    count_tokens = count_tokens or word_count
    prefixes = [fitted_prefix(rng, tokens, count_tokens) for _ in range(count)]
    order = [p for p in range(count) for _ in range(repeats)]
    rng.shuffle(order)
    requests = []
    for n, p in enumerate(order):
        suffix = f" Request {seed}-{n}: " + " ".join(rng.choice(WORDS) for _ in range(SUFFIX_WORDS)) + "."
        text, prefix_tokens = prefixes[p]
        requests.append({"n": n, "prefix": p, "prefix_tokens": prefix_tokens, "prompt": text + suffix})
    return requests


def streamed_completion(
    model: str, prompt: str, max_tokens: int = PREFIX_OUTPUT_TOKENS, timeout_s: float = STALL_S
) -> dict[str, Any]:
    """One streamed /v1/completions request, timed: TTFT (first text chunk), ITL (mean time per output
    token after the first: Ray Serve LLM sends several tokens a chunk, so chunk gaps are not token gaps),
    end to end, and the token counts of the server's usage chunk. No byte for `timeout_s`: a row with
    `stalled` set."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        f"{SERVE}/v1/completions",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    started = time.monotonic()
    first = last = None
    usage: dict[str, Any] = {}
    status, chunks = 0, 0
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as reply:
            status = reply.status
            for raw in reply:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line.removeprefix("data:"))
                usage = chunk.get("usage") or usage
                if any(c.get("text") for c in chunk.get("choices", [])):
                    now = time.monotonic() - started
                    first = now if first is None else first
                    last, chunks = now, chunks + 1
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "error": exc.read().decode(errors="replace")[:300]}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        timed_out = isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError)
        return {"status": status, "error": str(exc)[:300], **({"stalled": True} if timed_out else {})}
    out = {"status": status, "chunks": chunks, "e2e_s": round(time.monotonic() - started, 4)}
    output = usage.get("completion_tokens")
    out.update(prompt_tokens=usage.get("prompt_tokens"), output_tokens=output)
    if first is not None:
        out["ttft_s"] = round(first, 4)
        if isinstance(output, int) and output > 1 and last is not None:
            out["itl_s"] = round((last - first) / (output - 1), 5)
    return out


def closed_loop(
    requests: list[dict[str, Any]], clients: int, send: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[dict[str, Any]]:
    """`clients` threads, each sending the next request as soon as its previous one finished, in list
    order; one row per request (its workload fields, when it started, the client, what `send` measured).
    Once a row comes back `stalled`, no client sends another: the rest are rows with `not_sent` set."""
    rows: list[dict[str, Any]] = [
        {**{key: v for key, v in r.items() if key != "prompt"}, "not_sent": True} for r in requests
    ]
    lock, started, stalled = threading.Lock(), time.monotonic(), threading.Event()
    queue = iter(range(len(requests)))

    def client(k: int) -> None:
        while not stalled.is_set():
            with lock:
                i = next(queue, None)
            if i is None:
                return
            at = time.monotonic() - started
            request = requests[i]
            rows[i] = {
                **{key: v for key, v in request.items() if key != "prompt"},
                "client": k,
                "start_s": round(at, 4),
                **send(request),
            }
            if rows[i].get("stalled"):
                stalled.set()

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rows


def percentile(values: list[float], q: float) -> Optional[float]:
    """The q-th percentile, linear between the closest ranks (numpy's default), or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(rows: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """A load's figures: requests answered, TTFT and ITL median/p90/p99 in ms, output tokens per second."""
    ok = [r for r in rows if r.get("status") == 200 and "ttft_s" in r]
    out: dict[str, Any] = {"requests": len(rows), "completed": len(ok), "wall_s": round(wall_s, 2)}
    if any(r.get("stalled") for r in rows):
        out["stalled"] = True
    for key, name in (("ttft_s", "ttft_ms"), ("itl_s", "itl_ms")):
        values = [r[key] * 1000 for r in ok if key in r]
        for q in (50, 90, 99):
            value = percentile(values, q)
            out[f"p{q}_{name}"] = None if value is None else round(value, 3)
    tokens = sum(r.get("output_tokens") or 0 for r in ok)
    out["output_tok_s"] = round(tokens / wall_s, 1) if wall_s > 0 else None
    return out


# --- vLLM's prefix-cache counters, from the raylets' metrics endpoints ---------------------------------


def counters(text: str, name: str, label: str = "ReplicaId") -> dict[str, float]:
    """`label`'s value (ReplicaId unless told) -> the value of counter `name` in one node's scrape
    (Prometheus text format), summed over its other labels."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match or match.group(1) != name:
            continue
        labels = dict(LABEL.findall(match.group(2) or ""))
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        key = labels.get(label, "")
        out[key] = out.get(key, 0.0) + value
    return out


def prefix_cache(before: dict[str, str], after: dict[str, str]) -> dict[str, Any]:
    """node -> the prefix-cache tokens queried and hit between two scrapes (each node: its text), the
    hit rate, and the same per replica; a replica new in `after` counts from zero."""
    out: dict[str, Any] = {}
    for node, text in after.items():
        old = {n: counters(before.get(node, ""), n) for n in (PREFIX_HITS, PREFIX_QUERIES)}
        new = {n: counters(text, n) for n in (PREFIX_HITS, PREFIX_QUERIES)}
        replicas: dict[str, Any] = {}
        for replica in sorted(new[PREFIX_QUERIES]):
            queries = new[PREFIX_QUERIES][replica] - old[PREFIX_QUERIES].get(replica, 0.0)
            hits = new[PREFIX_HITS].get(replica, 0.0) - old[PREFIX_HITS].get(replica, 0.0)
            replicas[replica] = {"queries": queries, "hits": hits, "hit_rate": hits / queries if queries else None}
        if not replicas:
            continue
        queries = sum(float(r["queries"]) for r in replicas.values())
        hits = sum(float(r["hits"]) for r in replicas.values())
        out[node] = {
            "queries": queries,
            "hits": hits,
            "hit_rate": hits / queries if queries else None,
            "replicas": replicas,
        }
    return out


def deltas(before: dict[str, str], after: dict[str, str], name: str) -> dict[str, float]:
    """node -> how much the sample `name` (summed over replicas) grew between two scrapes."""
    return {
        node: sum(counters(text, name).values()) - sum(counters(before.get(node, ""), name).values())
        for node, text in after.items()
    }


KV_PULLS, KV_BYTES = "ray_vllm_nixl_bytes_transferred_count", "ray_vllm_nixl_bytes_transferred_sum"


def prefix_loads(
    model: str,
    scrape: Callable[[], dict[str, str]],
    count_tokens: Optional[Callable[[str], int]] = None,
    deadline: Optional[float] = None,
    send: Optional[Callable[[str, str], dict[str, Any]]] = None,
    wait_s: float = 12.0,
    concurrencies: tuple[int, ...] = PREFIX_CONCURRENCIES,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """The prefix workload at each client count in turn, each with prefixes of its own (seed = its
    index, the same in every arm), scraped before and `wait_s` after (Ray exports every 10 s): per
    load its summary, the prefix-cache hits per role and replica, NIXL's pulls, and every request's
    row. A load that would run past `deadline` (time.monotonic), or that follows one that stalled, is
    recorded as skipped, not started."""
    send = send or (lambda m, prompt: streamed_completion(m, prompt))
    levels: list[dict[str, Any]] = []
    last_wall = 0.0
    for index, clients in enumerate(concurrencies):
        if any(level.get("summary", {}).get("stalled") for level in levels):
            levels.append({"clients": clients, "seed": index, "skipped": STALLED_BEFORE})
            continue
        if not next_load_fits(deadline, last_wall, wait_s):
            levels.append({"clients": clients, "seed": index, "skipped": "the phase's time budget"})
            continue
        requests = prefix_workload(seed=index, count_tokens=count_tokens)
        before = scrape()
        started = time.monotonic()
        rows = closed_loop(requests, clients, lambda r: send(model, r["prompt"]))
        last_wall = time.monotonic() - started
        sleep(wait_s)
        after = scrape()
        level: dict[str, Any] = {
            "clients": clients,
            "seed": index,
            "summary": summary(rows, last_wall),
            "prefix_cache": prefix_cache(before, after),
            "kv_pulls": deltas(before, after, KV_PULLS),
            "kv_bytes": deltas(before, after, KV_BYTES),
            "requests": rows,
        }
        log(f"prefix load c={clients}:", level["summary"], {n: v["hit_rate"] for n, v in level["prefix_cache"].items()})
        levels.append(level)
    return levels


LONG_PROMPT_WORDS = 3000  # as verify's chat-completion check


def long_prompt() -> str:
    words = (
        "The prefill phase reads every token of this prompt once; the decode phase then receives the KV "
        "cache over the network and continues. "
    ).split()
    return " ".join(words[i % len(words)] for i in range(LONG_PROMPT_WORDS)) + "\nSummarise the text in one sentence."


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
