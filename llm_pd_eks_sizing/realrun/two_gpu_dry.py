"""The two-GPU run's cluster steps on this machine's CPU: gpu_main's raylets, told of two GPUs.

    python -m llm_pd_eks_sizing.realrun.two_gpu_dry      # a few minutes; refuses beside a running Ray

Renders the two-GPU bundle, then for each arm (two_gpu.ARMS, then the prefix pair's) starts the
head and the two worker raylets from the arm's raylets file with gpu_main's own `ray start` (each
raylet with its `CUDA_VISIBLE_DEVICES` and its declared GPUs; no device behind them), deploys a stand-in
application through the same dashboard PUT: one deployment per role, each replica in a placement
group of exactly the bundles the role's LLMConfig asks for, whose replica sends one task into each
GPU bundle of its group, as vLLM's Ray executor places its workers. Each task writes the GPU ids Ray
gave it and the raylet it ran on; the arm passes when every role's GPUs are the placement plan's
(prefill on GPU 0 and decode on GPU 1; aggregated one replica a GPU; decode TP 2 on both; the prefix
pair one replica of each role on each GPU). vLLM is not
here, so no engine starts: this proves the orchestration and the GPU each engine would be handed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from llm_pd_eks_sizing.realrun import two_gpu
from llm_pd_eks_sizing.realrun.dry_run import Steps, refuse_a_running_cluster, stand_in_cluster
from llm_pd_eks_sizing.realrun.render import load_overrides as load_one_gpu_overrides
from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, exit_with

PROG = "realrun-two-dry"
STANDIN = "realrun_two_standin"
REPORTS = Path("/tmp/realrun-two-dry")  # where the stand-in's tasks write what they saw (same host)
STANDIN_SOURCE = '''"""A stand-in for one role's engine: its placement group, one task a GPU bundle, no engine."""
import json
import os
import uuid

import ray
from ray import serve
from ray.util.placement_group import get_current_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


@ray.remote(num_cpus=0, num_gpus=1)
def seen(role, replica, index):
    out = {
        "role": role,
        "replica": replica,
        "bundle": index,
        "gpus": [int(x) for x in ray.get_runtime_context().get_accelerator_ids()["GPU"]],
        "raylet": os.environ.get("REALRUN_RAYLET"),
    }
    with open(os.path.join(REPORTS, f"{role}-{replica}-{index}.json"), "w") as f:
        json.dump(out, f)
    return out


@serve.deployment
class Engine:
    def __init__(self, role, gpu_bundles):
        pg = get_current_placement_group()
        replica = uuid.uuid4().hex[:8]
        tasks = []
        for i in gpu_bundles:
            strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i)
            tasks.append(seen.options(scheduling_strategy=strategy).remote(role, replica, i))
        ray.get(tasks)

    def __call__(self, request):
        return "ok"


def build(args):
    role = args["role"]
    return Engine.options(
        num_replicas=args["replicas"],
        placement_group_bundles=args["bundles"],
        placement_group_strategy="STRICT_PACK",
        ray_actor_options={"num_cpus": 1},
    ).bind(role, [i for i, b in enumerate(args["bundles"]) if b.get("GPU")])
'''


def standin_config(inputs: dict[str, Any]) -> dict[str, Any]:
    """One stand-in application per role of the arm, each replica asking for the role's bundles
    (the first with the replica's own CPU, as Ray Serve LLM merges it)."""
    apps = []
    for role, llm in two_gpu.llm_configs(inputs["serve"]).items():
        bundles = two_gpu.bundles(llm)
        bundles[0] = {"CPU": 1, **bundles[0]}
        args = {"role": role, "replicas": two_gpu.replicas(llm), "bundles": bundles}
        apps.append({"name": role, "route_prefix": f"/{role}", "import_path": f"{STANDIN}:build", "args": args})
    return {"proxy_location": "HeadOnly", "applications": apps}


def landed(role: str) -> dict[str, list[int]]:
    """replica -> the GPUs its tasks were given."""
    out: dict[str, list[int]] = {}
    for path in sorted(REPORTS.glob(f"{role}-*.json")):
        seen = json.loads(path.read_text())
        out.setdefault(seen["replica"], []).extend(seen["gpus"])
    return {replica: sorted(gpus) for replica, gpus in out.items()}


def plan_problems(arm: two_gpu.Arm, inputs: dict[str, Any]) -> list[str]:
    """Where the stand-in's replicas got GPUs other than the placement plan's."""
    problems = []
    for landing in two_gpu.placement_plan(arm, inputs):
        got = landed(landing.role)
        if len(got) != landing.replicas:
            problems.append(f"{landing.role}: {len(got)} replica(s) reported, {landing.replicas} expected")
        if sorted(g for gpus in got.values() for g in gpus) != sorted(landing.gpus):
            problems.append(f"{landing.role}: GPUs {sorted(got.values())}, the plan's {list(landing.gpus)}")
    return problems


def walk(bundle: Path, say: Callable[[str], None]) -> list[tuple[str, float]]:
    """Each arm's raylets, stand-in deploy and GPU check, timed; a failing step is a ToolError."""
    from llm_pd_eks_sizing.realrun import gpu_main

    inputs = two_gpu.two_gpu_inputs(two_gpu.load_overrides())
    step = Steps(say, width=300)

    def running(apps: list[str], timeout_s: float = 240) -> Optional[str]:
        deadline = time.monotonic() + timeout_s
        states: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status, text = gpu_main.http("GET", f"{gpu_main.DASHBOARD}/api/serve/applications/", timeout=30)
            found = json.loads(text).get("applications", {}) if status == 200 else {}
            states = {app: found.get(app, {}).get("status") for app in apps}
            if set(states.values()) == {"RUNNING"}:
                return None
            if {"DEPLOY_FAILED", "UNHEALTHY"} & set(states.values()):
                break
            time.sleep(gpu_main.POLL_S)
        return f"stand-in applications {states}"

    one = load_one_gpu_overrides(instance_type=two_gpu.load_overrides()["stack_config"][0]["value"])
    prefix = two_gpu.prefix_inputs(two_gpu.load_overrides(), one)
    walks = [(name, arm, inputs[name], bundle, arm.raylets_file) for name, arm in two_gpu.ARMS.items()]
    walks.append(
        (
            "prefix",
            two_gpu.PREFIX,
            {**prefix, "serve": prefix["serve"]["prefix"]},
            bundle / "prefix",
            "raylets-prefix.json",
        )
    )
    with stand_in_cluster():
        for name, arm, data, folder, raylets_file in walks:

            def raylets(folder: Path = folder, raylets_file: str = raylets_file) -> Optional[str]:
                evidence: dict[str, Any] = {}
                gpu_main.ensure_raylets(folder, evidence, raylets_file)
                return None if evidence.get("raylets", "").startswith("started") else str(evidence.get("raylets"))

            def deployed(data: dict[str, Any] = data) -> Optional[str]:
                shutil.rmtree(REPORTS, ignore_errors=True)
                REPORTS.mkdir(parents=True)
                gpu_main.deploy(standin_config(data), timeout_s=0)  # the PUT; waited for below
                return running(list(two_gpu.llm_configs(data["serve"])))

            def on_plan(arm: two_gpu.Arm = arm, data: dict[str, Any] = data) -> Optional[str]:
                return "; ".join(plan_problems(arm, data)) or None

            step(f"{name}: raylets started ({raylets_file})", raylets)
            step(f"{name}: stand-in deployed", deployed)
            step(f"{name}: each replica on the plan's GPUs", on_plan)
            for landing in two_gpu.placement_plan(arm, data):
                say(f"{name}: {landing.role} -> GPUs {sorted(landed(landing.role).values())}")
    return step.timings


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(
        prog=f"python -m llm_pd_eks_sizing.realrun.{PROG.replace('-', '_')}", description=__doc__.splitlines()[0]
    )
    parser.parse_args(argv)
    refuse_a_running_cluster()
    with tempfile.TemporaryDirectory(prefix="realrun-two-dry-") as tmp:
        bundle = Path(tmp)
        two_gpu.write_two_gpu_bundle(bundle, two_gpu.load_overrides())
        source = STANDIN_SOURCE.replace("os.path.join(REPORTS,", f"os.path.join({str(REPORTS)!r},")
        for folder in (bundle, bundle / "prefix"):
            (folder / "runtime" / f"{STANDIN}.py").write_text(source)
        timings = walk(bundle, lambda line: print(f"{PROG}: {line}", flush=True))
    print(f"{PROG}: the two-GPU cluster steps ran on Ray in {sum(s for _, s in timings):.0f} s")
    return Exit.OK


if __name__ == "__main__":
    exit_with(PROG, main)
