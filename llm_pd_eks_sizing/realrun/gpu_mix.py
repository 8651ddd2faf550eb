"""The decode-only arms' load, run on the GPU machine: short and long prompts at once, then each alone.

Standard library only, like gpu_load beside it (whose streamed request, closed loop, fitted prompts and
summary it uses). The arms (`mix-pd`: P/D as rendered; `mix-cond`: the same with decode-only below a
threshold between the two lengths) get the same loads:

- `together`: MIX_CLASSES' clients all at once, each class its own closed loop, so the long prompts'
  decode runs beside the short prompts' prefills wherever those run: the interference decode-only
  trades for the hop it saves;
- `short alone`, `long alone`: each class by itself.

Every load has prompts of its own (seed = its index, the same in both arms; each prompt starts with its
own request name, so no two share a cache block) and is scraped before and `wait_s` after, for the
project's P/D path counter by `path` (decode_only | disaggregated).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from typing import Any, Callable, Optional

if __package__:
    from . import gpu_load
else:  # loaded from its file on the GPU machine: the module beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_load  # type: ignore[import-not-found,no-redef]

# (class, clients, requests, prompt tokens): well below and well above the arm's threshold
MIX_CLASSES = (("short", 8, 48, 128), ("long", 8, 48, 4096))
MIX_OUTPUT_TOKENS = 128
PATH_REQUESTS = "ray_llm_pd_eks_pd_path_requests_total"  # llm_pd_eks/metrics.py PD_PATH_REQUESTS
LOADS = (("together", ("short", "long")), ("short alone", ("short",)), ("long alone", ("long",)))


def mix_workload(seed: int, count_tokens: Callable[[str], int]) -> dict[str, list[dict[str, Any]]]:
    """class -> its requests: a prompt of about the class's tokens (fitted with `count_tokens`, then
    its request name in front), the same for the same seed."""
    rng = random.Random(seed)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, _clients, requests, tokens in MIX_CLASSES:
        rows = []
        for n in range(requests):
            text, _ = gpu_load.fitted_prefix(rng, tokens, count_tokens)
            rows.append({"n": n, "class": name, "prompt": f"Request {name}-{seed}-{n}: {text}"})
        out[name] = rows
    return out


def label_sums(scrape: dict[str, str], name: str, label: str) -> dict[str, float]:
    """label value -> the sample `name` summed over every node and its other labels."""
    out: dict[str, float] = {}
    for text in scrape.values():
        for value, count in gpu_load.counters(text, name, label).items():
            out[value] = out.get(value, 0.0) + count
    return out


def together(
    workload: dict[str, list[dict[str, Any]]],
    classes: tuple[str, ...],
    send: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Each class's closed loop in a thread of its own, all started at once: class -> its clients,
    its rows and how long it ran."""
    clients = {name: c for name, c, _, _ in MIX_CLASSES}
    out: dict[str, dict[str, Any]] = {}

    def run(name: str) -> None:
        started = time.monotonic()
        rows = gpu_load.closed_loop(workload[name], clients[name], send)
        out[name] = {"clients": clients[name], "rows": rows, "wall_s": time.monotonic() - started}

    threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in classes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def mix_loads(
    model: str,
    scrape: Callable[[], dict[str, str]],
    count_tokens: Callable[[str], int],
    deadline: Optional[float] = None,
    send: Optional[Callable[[str, str], dict[str, Any]]] = None,
    wait_s: float = 12.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """LOADS in turn: per load and class its summary and every request's row, and how the P/D path
    counter grew. A load that would run past `deadline` (1.5x the load before, plus the wait), or that
    follows one that stalled (gpu_load.STALL_S), is recorded as skipped, not started; the first always runs."""
    send = send or (lambda m, prompt: gpu_load.streamed_completion(m, prompt, MIX_OUTPUT_TOKENS))
    done: list[dict[str, Any]] = []
    last = 0.0
    for seed, (load, classes) in enumerate(LOADS):
        stalled = any(c["summary"].get("stalled") for d in done for c in d.get("classes", {}).values())
        if stalled:
            done.append({"load": load, "seed": seed, "skipped": gpu_load.STALLED_BEFORE})
            continue
        if done and not gpu_load.next_load_fits(deadline, last, wait_s):
            done.append({"load": load, "seed": seed, "skipped": "the phase's time budget"})
            continue
        workload = mix_workload(seed, count_tokens)
        before = scrape()
        started = time.monotonic()
        ran = together(workload, classes, lambda r: send(model, r["prompt"]))
        last = time.monotonic() - started
        sleep(wait_s)
        after = scrape()
        old, new = label_sums(before, PATH_REQUESTS, "path"), label_sums(after, PATH_REQUESTS, "path")
        figures = {
            name: {"clients": r["clients"], "summary": gpu_load.summary(r["rows"], r["wall_s"]), "requests": r["rows"]}
            for name, r in ran.items()
        }
        paths = {path: value - old.get(path, 0.0) for path, value in new.items()}
        gpu_load.log(f"mix load {load}:", {n: c["summary"] for n, c in figures.items()}, paths)
        done.append({"load": load, "seed": seed, "classes": figures, "paths": paths})
    return done
