"""The routing arms' saved evidence, read back as docs/real-run.md's tables, each beside the sizing model.

- Prefix-aware routing (`evidence-mix-prefix-pd.json`, `evidence-mix-prefix.json`): per arm and client
  count the TTFT / ITL percentiles, throughput, each role's prefix-cache hit rate, and the hit rate the
  sizing model gives for that workload and router (llm_pd_eks_sizing/model/routing.py `prefix_routing`,
  with first asks counted and the run's KV cache size).
- Decode-only below a threshold (`evidence-mix-pd.json`, `evidence-mix-cond.json`): per load (both
  prompt classes together, each alone), class and arm the same figures and the P/D path counter, then
  what `make size` says of decode-only against what the arms measured, and the sizing model's mix
  (sizing/mix.py) against every measured class, with what it says of the same mix over EFA.
- Ray's routers on the CPU (`make realrun-router`, data/router/<date>.json): per router and client
  count where the prefix workload's requests landed on stand-in replicas, beside the model's hit rate.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Optional

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.models import MODELS
from llm_pd_eks.serve_routing import RAY_PREFIX_ROUTER_CLASS
from llm_pd_eks_sizing.model.routing import prefix_routing
from llm_pd_eks_sizing.realrun import gpu_load
from llm_pd_eks_sizing.realrun.evidence import load, ms, runs
from llm_pd_eks_sizing.realrun.render import load_overrides, prefix_prefill_configs, rendered_stack
from llm_pd_eks_sizing.realrun.router_run import ARMS
from llm_pd_eks_sizing.realrun.router_run import DATA as ROUTER_DATA

# The prefix-routing arms' evidence files (gpu_main's mix-prefix-pd / mix-prefix phases), their rows'
# names, and whether the arm routes by prefix.
PREFIX_EVIDENCE = (
    ("mix-prefix-pd", "P/D, Serve's default router", False),
    ("mix-prefix", "P/D, prefix-aware routing", True),
)
PATHS = ("decode_only", "disaggregated")  # the project's P/D path counter's `path` values
NOT_RUN = "Not run yet (`bash scripts/real-run/gpu-run.sh {}`, then `{}`)."


def newest_with(phases: tuple[str, ...]) -> Optional[Path]:
    """The newest saved run holding the evidence of any of `phases`, if any."""
    found = [r for r in runs() if any((r / f"evidence-{phase}.json").is_file() for phase in phases)]
    return found[-1] if found else None


def prefix_run() -> Optional[Path]:
    return newest_with(tuple(p for p, _, _ in PREFIX_EVIDENCE))


def _rate(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.0%}"


# --- prefix-aware routing ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def arms_model() -> Any:
    """The sizing model's `prefix_routing` for the arms' workload as rendered: the prefill replicas and
    KV cache bytes the arms deploy, gpu_load's prefixes."""
    overrides = load_overrides()
    config = rendered_stack(overrides)
    prefill = prefix_prefill_configs(overrides)["prefix"]
    return prefix_routing(
        MODELS[config.serving.model_id],
        GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type],
        gpu_load.PREFIX_TOKENS,
        gpu_load.PREFIX_COUNT,
        replicas=int(prefill["deployment_config"]["autoscaling_config"]["min_replicas"]),
        asks=gpu_load.PREFIX_REPEATS,
        cache_bytes=int(prefill["engine_kwargs"]["kv_cache_memory_bytes"]),
    )


def model_hit_rate(routed: bool, prefix_share: float) -> float:
    """The model's prefix-cache hit rate (tokens found over tokens looked up) for the arm's router."""
    found = arms_model()
    return (found.hit_rate_affinity if routed else found.hit_rate_random) * prefix_share


def prefix_share(level: dict[str, Any]) -> float:
    """The shared prefix's share of the prompt tokens looked up (each request's own suffix never hits)."""
    rows = [r for r in level.get("requests", []) if r.get("prompt_tokens") and r.get("prefix_tokens")]
    if not rows:
        return 1.0
    return sum(r["prefix_tokens"] for r in rows) / sum(r["prompt_tokens"] for r in rows)


def arm_name(run: Path, phase: str, arm: str) -> str:
    """The arm's name, saying so where its prefix router was Ray's class as is (the saved evidence keeps
    each role's request_router_config) rather than the project's."""
    routers = load(run, f"evidence-{phase}.json").get("routers") or {}
    classes = {(config or {}).get("request_router_class") for config in routers.values()}
    return f"{arm} (Ray's PrefixCacheAffinityRouter as is)" if RAY_PREFIX_ROUTER_CLASS in classes else arm


def prefix_rows(run: Path) -> list[dict[str, Any]]:
    """One row per arm and client count: TTFT / ITL percentiles, throughput, each role's prefix-cache
    hit rate and the model's, and the KV pulls NIXL made on decode and their bytes (a load skipped for
    time has no row)."""
    rows = []
    for phase, arm, routed in PREFIX_EVIDENCE:
        if not (run / f"evidence-{phase}.json").is_file():
            continue
        for level in load(run, f"evidence-{phase}.json").get("loads", []):
            if "summary" not in level:
                continue
            cache = level["prefix_cache"]
            rows.append(
                {
                    "arm": arm_name(run, phase, arm),
                    "clients": level["clients"],
                    "sent": level["summary"]["requests"],
                    "stalled": bool(level["summary"].get("stalled")),
                    **{k: level["summary"][k] for k in ("completed", "p50_ttft_ms", "p90_ttft_ms", "p50_itl_ms")},
                    "output_tok_s": level["summary"]["output_tok_s"],
                    "prefill_hit_rate": cache.get("prefill", {}).get("hit_rate"),
                    "decode_hit_rate": cache.get("decode", {}).get("hit_rate"),
                    "model_hit_rate": model_hit_rate(routed, prefix_share(level)),
                    "decode_kv_pulls": level["kv_pulls"].get("decode"),
                    "decode_kv_bytes": level.get("kv_bytes", {}).get("decode"),
                }
            )
    order = [a for _, a, _ in PREFIX_EVIDENCE]
    return sorted(rows, key=lambda r: (r["clients"], order.index(r["arm"].split(" (")[0])))


def not_sent(run: Path) -> list[str]:
    """A line per load an arm did not send, with why (the phase's budget, or a load before it stalled)."""
    lines = []
    for phase, arm, _ in PREFIX_EVIDENCE:
        path = run / f"evidence-{phase}.json"
        for level in load(run, path.name).get("loads", []) if path.is_file() else []:
            if "skipped" in level:
                lines.append(
                    f"- {arm_name(run, phase, arm)}, {level['clients']} clients: not sent ({level['skipped']})."
                )
    return lines


def gigabytes(value: Optional[float]) -> str:
    """NIXL's bytes pulled (`ray_vllm_nixl_bytes_transferred_sum`'s growth) in GB, or n/a where not scraped."""
    return "n/a" if value is None else f"{value / 1e9:.2f}"


def _answered(row: dict[str, Any]) -> str:
    """The requests answered, and of how many with `stalled` where the load stopped on a stall."""
    return f"{row['completed']} of {row['sent']}, stalled" if row["stalled"] else f"{row['completed']}"


def deploy_failure(run: Path, phase: str) -> list[str]:
    """A line (and a blank one) for an arm whose application never ran: its state and the first line of
    its saved failure-<phase>.txt, which says why."""
    path = run / f"evidence-{phase}.json"
    found = load(run, path.name) if path.is_file() else {}
    if found.get("app_status") in (None, "RUNNING"):
        return []
    why_file = run / f"failure-{phase}.txt"
    why = why_file.read_text().splitlines()[0].strip() if why_file.is_file() else "no failure lines saved"
    took = found.get("timings", {}).get("deploy_s")
    after = f" after {took:.0f} s" if took is not None else ""
    return [f"- `{phase}`: {found['app_status']}{after}: {why}", ""]


def prefix_results_section(run: Optional[Path]) -> str:
    if run is None:
        return NOT_RUN.format("mix-prefix-pd", "mix-prefix")
    lines = [
        f"Run `{run.name}`. Hit rate: prefix-cache tokens found over tokens looked up, per role, over the load; "
        "model: the sizing model's rate for the arm's router (`make size`'s `prefix_routing`, each prefix's "
        "first ask on a replica a miss, the arms' 2 GiB KV cache).",
        "",
        *(line for phase, _, _ in PREFIX_EVIDENCE for line in deploy_failure(run, phase)),
    ]
    rows = prefix_rows(run)
    if not rows:  # no load ran: no table
        return "\n".join(lines).rstrip()
    lines += [
        "| arm | clients | answered | median TTFT ms | p90 TTFT ms | median ITL ms | output tok/s "
        "| prefill hit rate | decode hit rate | model hit rate | decode KV pulls | decode KV GB pulled |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['arm']} | {r['clients']} | {_answered(r)} | {ms(r['p50_ttft_ms'])} | {ms(r['p90_ttft_ms'])} "
            f"| {r['p50_itl_ms']:.2f} | {r['output_tok_s']:,.0f} | {_rate(r['prefill_hit_rate'])} "
            f"| {_rate(r['decode_hit_rate'])} | {_rate(r['model_hit_rate'])} | {r['decode_kv_pulls'] or 0:.0f} "
            f"| {gigabytes(r['decode_kv_bytes'])} |"
        )
    skipped = not_sent(run)
    return "\n".join(lines + (["", *skipped] if skipped else []))


# --- decode-only below a threshold ------------------------------------------------------------------


# --- Ray's routers on the CPU (make realrun-router) -------------------------------------------------


def router_run() -> Optional[Path]:
    """The newest saved `make realrun-router` run, if any."""
    found = sorted(ROUTER_DATA.glob("*.json")) if ROUTER_DATA.is_dir() else []
    return found[-1] if found else None


def router_model(record: dict[str, Any], routed: bool) -> float:
    """The sizing model's hit rate for the run's workload and stand-in cache (prefix_routing: each
    prefix's first ask on a replica a miss, whole prefixes held), for the arm's router."""
    work, replica = record["workload"], record["replica"]
    model = MODELS[replica["model_id"]]
    cache_bytes = replica["capacity_prefixes"] * work["prefix_tokens"] * model.kv_bytes_per_token(2)
    found = prefix_routing(
        model,
        GPU_INSTANCE_TYPES[replica["instance"]],
        work["prefix_tokens"],
        work["prefixes"],
        replicas=record["options"]["prefix"]["num_replicas"],
        asks=work["asks"],
        cache_bytes=cache_bytes,
    )
    return found.hit_rate_affinity if routed else found.hit_rate_random


def router_section(path: Optional[Path]) -> str:
    if path is None:
        return "Not run yet (`make realrun-router`)."

    record = json.loads(path.read_text())
    lines = [
        f"Run `{path.name}` (Ray {record['versions']['ray']}, {record['date']}, `{record['command']}`): "
        f"{record['workload']['prefixes']} prefixes asked {record['workload']['asks']} times each, two stand-in "
        f"replicas holding {record['replica']['capacity_prefixes']} whole prefixes each. Hit rate: asks that "
        "found their prefix on the replica they reached; model: `prefix_routing` for that router; idle rounds: "
        "the prefix router's routing rounds with no request to route (`router_probe`).",
        "",
        "| router | clients | answered | replicas a prefix | hit rate | model hit rate | load split | idle rounds |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for arm, name in ARMS:
        model = router_model(record, routed=record["options"][arm]["request_router_config"] is not None)
        for lv in record["arms"].get(arm, []):
            if "skipped" in lv:
                lines.append(f"| {name} | {lv['clients']} | skipped: {lv['skipped']} | | | {_rate(model)} | | |")
                continue
            answered = f"{lv['answered']} of {lv['requests']}" + (
                f", stalled at {lv['wall_s']:.0f} s" if lv["stalled"] else ""
            )
            reached = "n/a" if lv["mean_replicas_per_prefix"] is None else f"{lv['mean_replicas_per_prefix']:.2f}"
            split = " / ".join(f"{share:.0%}" for share in lv["replica_shares"]) or "n/a"
            rates = f"{_rate(lv['hit_rate'])} | {_rate(model)}"
            idle = "n/a" if lv.get("idle_rounds") is None else f"{lv['idle_rounds']:,}"
            lines.append(f"| {name} | {lv['clients']} | {answered} | {reached} | {rates} | {split} | {idle} |")
    return "\n".join(lines)
