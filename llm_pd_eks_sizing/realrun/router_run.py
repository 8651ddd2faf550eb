"""Ray Serve's own request routers on this machine's CPU: where the prefix arms' requests land.

    make realrun-router      # about three minutes: the routers, the arms' prefix workload, saved as data

The prefix-routing arms (docs/real-run.md) differ only in the router a role's handle uses: Serve's
default (power of two choices) or the project's prefix router (Ray Serve LLM's PrefixCacheAffinityRouter
with Serve's FIFOMixin, llm_pd_eks/runtime/prefix_router.py) with the project's arguments; a third arm
runs Ray's PrefixCacheAffinityRouter as is. Which replica each request reaches is the router's doing,
not the GPU's, so it runs here:
a local Ray 2.58 cluster, two replicas under exactly the prefill deployment options the arm renders
(`max_ongoing_requests`, `request_router_config`), and gpu_load's prefix workload (24 prefixes of
2,048 tokens, each asked 4 times) at 1, 4, 8 and 16 clients through a closed loop on a handle. The
prefix routers run as router_probe has them, counting their routing rounds with no request to route.

Each replica stands in for a vLLM engine by its prefix cache alone: the prefixes it holds, whole and
least recently used evicted, as many as the arm's KV cache holds (2 GiB over the model's bytes a
token), and a service time from the sizing model (prefill of the whole prompt on a miss, of the
suffix on a hit). Per router and client count the run keeps each request's replica and hit, the hit
rate, how many replicas each prefix reached, and the load split; `--out` (default
llm_pd_eks_sizing/realrun/data/router/<date>T<hhmm>Z.json) with Ray's version, the date and the command.
It refuses to run beside a Ray cluster already on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import functools
import json
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable, Optional

from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, exit_with
from llm_pd_eks_tools.core.io_safety import atomic_write

PROG = "realrun-router"
DATA = Path(__file__).resolve().parent / "data" / "router"
ARMS = (
    ("prefix-pd", "Serve's default router"),
    ("prefix", "the project's: PrefixCacheAffinityRouter with Serve's FIFOMixin"),
    ("prefix-ray", "Ray's PrefixCacheAffinityRouter as is"),
)
# The arm whose rendered prefill options another arm runs with (Ray's class in place of the project's).
SAME_OPTIONS = {"prefix-ray": "prefix"}
SUFFIX_TOKENS = 16  # "Request <seed>-<n>:" and eight words, about
# One client (every routing decision on an idle router), then the GPU arms' client counts. A load
# that has not finished after LEVEL_TIMEOUT_S is recorded as stalled with what it finished, and the
# arm's later loads are not started.
CONCURRENCIES = (1, 4, 8, 16)
LEVEL_TIMEOUT_S = 30.0
ARM_SETUP_S = 60.0  # a child's local Ray and Serve start before its first load


class CacheReplica:
    """One engine's prefix cache, whole prefixes, least recently used evicted, and its service time."""

    def __init__(self, capacity: int, hit_s: float, miss_s: float) -> None:
        self.capacity, self.hit_s, self.miss_s = capacity, hit_s, miss_s
        self.held: collections.OrderedDict[str, None] = collections.OrderedDict()

    async def __call__(self, request: Any) -> dict[str, Any]:
        from ray import serve

        hit = request.prefix in self.held
        self.held[request.prefix] = None
        self.held.move_to_end(request.prefix)
        while len(self.held) > self.capacity:
            self.held.popitem(last=False)
        await asyncio.sleep(self.hit_s if hit else self.miss_s)
        return {"replica": serve.get_replica_context().replica_id.unique_id, "hit": hit}


def arm_options() -> dict[str, dict[str, Any]]:
    """arm -> the prefill deployment's options as the arm's serve config renders them."""
    from llm_pd_eks_sizing.realrun.render import load_overrides, prefix_prefill_configs

    prefill = prefix_prefill_configs(load_overrides())
    out = {}
    for arm, _ in ARMS:
        config = prefill[SAME_OPTIONS.get(arm, arm)]["deployment_config"]
        out[arm] = {
            "num_replicas": config["autoscaling_config"]["min_replicas"],
            "max_ongoing_requests": config["max_ongoing_requests"],
            "request_router_config": config.get("request_router_config"),
        }
    return out


def replica_shape() -> dict[str, Any]:
    """The stand-in engine's cache (whole prefixes the arm's KV cache holds) and service times."""
    from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
    from llm_pd_eks.models import MODELS
    from llm_pd_eks_sizing.model.engine import Replica
    from llm_pd_eks_sizing.realrun import gpu_load
    from llm_pd_eks_sizing.realrun.render import load_overrides, prefix_prefill_configs, rendered_stack

    overrides = load_overrides()
    config = rendered_stack(overrides)
    replica = Replica(MODELS[config.serving.model_id], GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type], 1)
    cache_bytes = int(prefix_prefill_configs(overrides)["prefix"]["engine_kwargs"]["kv_cache_memory_bytes"])
    return {
        "capacity_prefixes": int(cache_bytes / replica.kv_bytes_per_token // gpu_load.PREFIX_TOKENS),
        "hit_s": round(replica.prefill_seconds(SUFFIX_TOKENS), 5),
        "miss_s": round(replica.prefill_seconds(gpu_load.PREFIX_TOKENS + SUFFIX_TOKENS), 5),
        "model_id": config.serving.model_id,
        "instance": config.gpu_nodes.instance_type,
    }


async def closed_loop(
    handle: Any,
    requests: list[dict[str, Any]],
    clients: int,
    timeout_s: float,
    on_stall: Optional[Callable[[], None]] = None,
) -> tuple[list[dict[str, Any]], bool]:
    """`clients` tasks, each sending the next request once its previous one answered, in list order:
    the rows answered, and whether the load stalled (`timeout_s` passed first; `on_stall` is called
    then, before the clients' requests are cancelled)."""
    rows: list[dict[str, Any]] = [{} for _ in requests]
    queue = iter(range(len(requests)))

    async def client() -> None:
        for i in queue:
            r = requests[i]
            started = time.monotonic()
            answer = await handle.remote(types.SimpleNamespace(prompt=r["prompt"], prefix=r["key"]))
            rows[i] = {"n": r["n"], "prefix": r["prefix"], "s": round(time.monotonic() - started, 4), **answer}

    tasks = [asyncio.ensure_future(client()) for _ in range(clients)]
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in done:
        task.result()  # a client's error is the load's
    if not pending:
        return rows, False
    if on_stall is not None:
        on_stall()
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return [r for r in rows if r], True


def level(rows: list[dict[str, Any]], clients: int, asked: int) -> dict[str, Any]:
    """A load's figures: hits over asks, the replicas each prefix reached, each replica's share."""
    reached = collections.defaultdict(set)
    for r in rows:
        reached[r["prefix"]].add(r["replica"])
    per_replica = collections.Counter(r["replica"] for r in rows)
    return {
        "clients": clients,
        "requests": asked,
        "answered": len(rows),
        "hit_rate": round(sum(r["hit"] for r in rows) / len(rows), 4) if rows else None,
        "mean_replicas_per_prefix": round(sum(len(v) for v in reached.values()) / len(reached), 4) if rows else None,
        "replica_shares": sorted(round(n / len(rows), 4) for n in per_replica.values()),
        "rows": rows,
    }


def router_class(config: dict[str, Any], arm: str = "prefix") -> Any:
    """The configured router class as router_probe runs it, counting its rounds with no request to
    route: the project's (llm_pd_eks/runtime/prefix_router.py, imported from the package here rather
    than from the ConfigMap's module name), or (arm `prefix-ray`) Ray's PrefixCacheAffinityRouter as is."""
    from llm_pd_eks.serve_routing import PREFIX_ROUTER_CLASS
    from llm_pd_eks_sizing.realrun import router_probe

    if config["request_router_class"] != PREFIX_ROUTER_CLASS:
        raise ToolError(Exit.FAILED, f"the arm routes with {config['request_router_class']}, not {PREFIX_ROUTER_CLASS}")
    return router_probe.CountingPrefixRouter if arm == "prefix-ray" else router_probe.CountingProjectRouter


def run_arm(arm: str, shape: dict[str, Any], options: dict[str, Any], out: Path) -> None:
    """One arm on a local Ray of its own, in this (child) process: its loads in turn, the levels so
    far rewritten to `out` after each, so what a stalled or killed child finished is kept."""
    import ray
    from ray import serve

    from llm_pd_eks_sizing.realrun import gpu_load

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    router = options["request_router_config"]
    deployment = serve.deployment(name="prefill")(CacheReplica).options(
        num_replicas=options["num_replicas"], max_ongoing_requests=options["max_ongoing_requests"]
    )
    if router:  # Serve's default otherwise, as the arm without a request_router_config
        routed = {**router, "request_router_class": router_class(router, arm)}
        deployment = deployment.options(request_router_config=routed)
    handle = serve.run(
        deployment.bind(shape["capacity_prefixes"], shape["hit_s"], shape["miss_s"]), name=arm, route_prefix=None
    )
    levels: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()  # one loop for every load: a router may be bound to its caller's loop
    for seed, clients in enumerate(CONCURRENCIES):
        if any(lv.get("stalled") for lv in levels):
            levels.append({"clients": clients, "skipped": "a load before it stalled"})
        else:
            requests = [{**r, "key": f"{seed}-{r['prefix']}"} for r in gpu_load.prefix_workload(seed=seed)]
            idle_before, started = idle_rounds(), time.monotonic()
            at_stall: dict[str, int] = {}
            snapshot = None if router is None else functools.partial(snapshot_into, at_stall)
            rows, stalled = loop.run_until_complete(
                closed_loop(handle, requests, clients, LEVEL_TIMEOUT_S, on_stall=snapshot)
            )
            wall = round(time.monotonic() - started, 2)
            idle = None if router is None else idle_rounds() - idle_before
            levels.append(
                {
                    **level(rows, clients, len(requests)),
                    "wall_s": wall,
                    "stalled": stalled,
                    "idle_rounds": idle,
                    **({"router_at_stall": at_stall} if at_stall else {}),
                }
            )
        out.write_text(json.dumps(levels))


def idle_rounds() -> int:
    """The prefix routers' rounds with no request to route so far in this process (router_probe)."""
    probe = sys.modules.get("llm_pd_eks_sizing.realrun.router_probe")
    return int(probe.IDLE_ROUNDS["count"]) if probe is not None else 0


def snapshot_into(state: dict[str, int]) -> None:
    """router_probe.router_state into `state`, imported where a prefix arm runs (it needs Ray's router)."""
    from llm_pd_eks_sizing.realrun import router_probe

    state.update(router_probe.router_state())


def run(shape: dict[str, Any], options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each arm in a child process of its own, ended (with every Ray process it started) once its
    loads are done or its time is up: a stalled router keeps spinning, and growing, until killed."""
    from llm_pd_eks_sizing.realrun import gpu_main
    from llm_pd_eks_tools.core.process_safety import end_process, spawn

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="realrun-router-") as tmp:
        for arm, _ in ARMS:
            out = Path(tmp) / f"{arm}.json"
            spec = Path(tmp) / f"{arm}-spec.json"
            spec.write_text(json.dumps({"arm": arm, "shape": shape, "options": options[arm], "out": str(out)}))
            child = spawn([sys.executable, "-m", "llm_pd_eks_sizing.realrun.router_run", "--child", str(spec)])
            deadline = time.monotonic() + ARM_SETUP_S + LEVEL_TIMEOUT_S * len(CONCURRENCIES)
            while child.poll() is None and time.monotonic() < deadline and not finished(out):
                time.sleep(1)
            end_process(child)
            gpu_main.ray_stop()  # the child's local cluster, whatever of it is left
            results[arm] = json.loads(out.read_text()) if out.is_file() else []
    return results


def finished(out: Path) -> bool:
    try:
        return len(json.loads(out.read_text())) == len(CONCURRENCIES)
    except (OSError, ValueError):
        return False


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_sizing.realrun.router_run", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where the run is saved (default data/router/<date>.json)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one arm, run by the tool itself
    args = parser.parse_args(argv)
    if args.child:
        spec = json.loads(args.child.read_text())
        run_arm(spec["arm"], spec["shape"], spec["options"], Path(spec["out"]))
        return Exit.OK
    import ray

    from llm_pd_eks_sizing.realrun import gpu_load, gpu_main

    if gpu_main.cluster_up():
        raise ToolError(
            Exit.USAGE, "a Ray cluster already answers at 127.0.0.1:8265; stop it (`ray stop`) and run again"
        )
    today = datetime.date.today().isoformat()
    shape, options = replica_shape(), arm_options()
    results = run(shape, options)
    record = {
        "date": today,
        "command": "make realrun-router",
        "versions": {"ray": ray.__version__, "python": sys.version.split()[0]},
        "machine": "this repository's CPU machine; no GPU: the routers are Ray's, the engines stand-ins",
        "workload": {
            "prefixes": gpu_load.PREFIX_COUNT,
            "prefix_tokens": gpu_load.PREFIX_TOKENS,
            "asks": gpu_load.PREFIX_REPEATS,
            "concurrencies": list(CONCURRENCIES),
            "level_timeout_s": LEVEL_TIMEOUT_S,
        },
        "replica": shape,
        "options": options,
        "arms": results,
    }
    # named to the minute (UTC): a later run the same day sorts after the earlier one, which stays
    out = args.out or DATA / f"{datetime.datetime.now(datetime.UTC):%Y-%m-%dT%H%MZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, json.dumps(record, indent=1) + "\n")
    for arm, name in ARMS:
        for lv in results[arm]:
            if "skipped" in lv:
                print(f"{PROG}: {name}, {lv['clients']} clients: skipped ({lv['skipped']})")
                continue
            print(
                f"{PROG}: {name}, {lv['clients']} clients: {lv['answered']}/{lv['requests']} answered in "
                f"{lv['wall_s']} s{' (stalled)' if lv['stalled'] else ''}, hit rate {lv['hit_rate']}, "
                f"{lv['mean_replicas_per_prefix']} replicas a prefix, shares {lv['replica_shares']}"
            )
    print(f"{PROG}: wrote {out}")
    return Exit.OK


if __name__ == "__main__":
    exit_with(PROG, main)
