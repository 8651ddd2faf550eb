"""The real run on two GPUs of one host: its inputs and where each role's replica must land.

    python -m llm_pd_eks_sizing.realrun.two_gpu --out .gpu/realrun-two [--instance-type p5en.48xlarge]

writes the one-GPU bundle (`render.write_bundle`: the runtime modules the rendered routers import, the
model's config.json, meta.json) and beside it, for each arm of ARMS, `serve-two-<arm>.json` (the dev
stack's application as the program renders it, changed only by overrides-two-gpu.yaml) and
`raylets-two-<arm>.json` (gpu_main's raylet file: the head, and one raylet per GPU, each with the
`ray start` resources KubeRay derives from the worker group it stands for and the GPU it is told of),
and `meta-two.json` (the overrides, the placement plan, what the sizing model assumes).

Why one raylet per GPU: vLLM 0.26's Ray executor takes the physical GPU id Ray assigns a worker and
maps it to the worker's visible CUDA ordinal (`get_node_and_physical_gpu_ids`,
`Platform.logical_device_id_to_visible_device_id`), and Ray maps a raylet's GPU instance to the ids
its CUDA_VISIBLE_DEVICES lists (`get_accelerator_ids_for_accelerator_resource`). A raylet told of
GPU 1 alone therefore hands its engine physical GPU 1, visible to it as cuda:0; each role's custom
resource (`ray_resources.role_resource`) decides which raylet, hence which GPU, holds its replica.
Bundles stay whole (`GPU: 1` per TP rank, as rendered); `plan_problems` refuses a fractional one.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.ray_resources import role_resource
from llm_pd_eks.serving_names import ROLES
from llm_pd_eks_sizing.realrun.render import (
    AGGREGATED_IMPORT_PATH,
    OVERRIDE_SECTIONS,
    PREFIX_ARMS,
    overridden_serve_config,
    rendered_spec,
    run_raylets,
    set_path,
    write_bundle,
)
from llm_pd_eks_sizing.realrun.render import load_overrides as load_one_gpu_overrides
from llm_pd_eks_tools.core.cli import ArgumentParser, exit_with

HERE = Path(__file__).resolve().parent
OVERRIDES_TWO = HERE / "overrides-two-gpu.yaml"
GPU_COUNT = 2
FABRIC = "NIXL UCX backend between two GPUs of one host (no EFA: not LIBFABRIC)"


@dataclass(frozen=True)
class Raylet:
    """One of gpu_main's two worker raylets (`slot`: its ports and metrics endpoint), the worker group
    whose pod it stands for, and the machine's GPUs it is told of."""

    slot: str  # gpu_main's raylet name: prefill | decode (its fixed ports, its metrics port)
    group: str  # the worker group whose `ray start` resources it gets: prefill | decode
    cuda_visible_devices: str  # the GPUs Ray and vLLM see from it, e.g. "1"

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(int(g) for g in self.cuda_visible_devices.split(","))


@dataclass(frozen=True)
class Arm:
    """One arm of the two-GPU run: its serve config and raylets, and why it is run."""

    name: str
    raylets: tuple[Raylet, Raylet]
    what: str

    @property
    def serve_file(self) -> str:
        return f"serve-two-{self.name}.json"

    @property
    def raylets_file(self) -> str:
        return f"raylets-two-{self.name}.json"


ARMS: dict[str, Arm] = {
    "pd": Arm(
        "pd",
        (Raylet("prefill", "prefill", "0"), Raylet("decode", "decode", "1")),
        "P/D: the prefill replica on GPU 0, the decode replica on GPU 1, KV over NIXL (UCX) between them",
    ),
    "agg": Arm(
        "agg",
        (Raylet("prefill", "decode", "0"), Raylet("decode", "decode", "1")),
        "aggregated: the decode LLMConfig without the KV connector, two replicas, one engine per GPU "
        "(both raylets are decode-group pods; gpu_main's slot names are only their ports)",
    ),
    "tp2": Arm(
        "tp2",
        (Raylet("prefill", "prefill", "0"), Raylet("decode", "decode", "0,1")),
        "P/D with decode at TP 2 over both GPUs and prefill at TP 1 on GPU 0 (two raylets told of GPU 0)",
    ),
}


# The prefix-routing pair across the two GPUs: two replicas a role, one of each role on each GPU (each
# raylet told of both), run by gpu_main's own prefix phases (`gpu-run.sh mix-prefix-pd` / `mix-prefix`
# with REALRUN_BUNDLE=<bundle>/prefix). overrides.yaml's `prefix_run` entries apply but the two that
# share one GPU between four engines by a fractional bundle: here every bundle is a whole GPU.
PREFIX = Arm(
    "prefix",
    (Raylet("prefill", "prefill", "0,1"), Raylet("decode", "decode", "0,1")),
    "prefix routing at saturation: two prefill and two decode replicas, one of each on each GPU",
)
PREFIX_DROPPED = ("placement_group_config.bundle_per_worker.GPU", "runtime_env.env_vars.VLLM_RAY_PER_WORKER_GPUS")


def load_overrides(path: Path = OVERRIDES_TWO, instance_type: str | None = None) -> dict[str, Any]:
    """overrides-two-gpu.yaml, every entry's reason checked (all problems in one ValueError);
    `instance_type` replaces gpuNodes.instanceType for a machine whose GPUs are another type's."""
    data = yaml.safe_load(path.read_text())
    if instance_type is not None:
        gpu = GPU_INSTANCE_TYPES[instance_type].nvml_gpu_name
        for item in data["stack_config"]:
            if item["path"] == "gpuNodes.instanceType":
                reason = f"the machine's GPUs are two {gpu}s, the GPU of {instance_type}"
                item.update(value=instance_type, reason=reason)
    problems = []
    sections = [(s, data[s]) for s in OVERRIDE_SECTIONS]
    sections += [(f"arms.{arm}.llm_config", spec.get("llm_config", [])) for arm, spec in data["arms"].items()]
    for section, items in sections:
        for item in items:
            if not str(item.get("reason", "")).strip():
                problems.append(f"{section} override {item.get('path')} has no reason")
            if item.get("role") not in (None, *ROLES):
                problems.append(
                    f"{section} override {item.get('path')}: role {item.get('role')!r} is not one of {ROLES}"
                )
    unknown = set(data["arms"]) - set(ARMS)
    if unknown:
        problems.append(f"arms {sorted(unknown)} are not two_gpu.ARMS ({sorted(ARMS)})")
    if problems:
        raise ValueError(f"{path.name}: " + "; ".join(problems))
    return data


def _apply(llm: dict[str, Any], role: str, items: list[dict[str, Any]]) -> None:
    for item in items:
        if item.get("role") in (None, role):
            set_path(llm, item["path"], item["value"])


def aggregated_config(pd: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """The decode LLMConfig of `pd` served alone by Ray Serve LLM's `build_openai_app`, its KV
    connector removed and the arm's entries applied: the baseline the P/D figures are compared with."""
    app = pd["applications"][0]
    decode = copy.deepcopy(app["args"]["decode_config"])
    decode["engine_kwargs"].pop("kv_transfer_config")
    _apply(decode, "decode", items)
    aggregated = {k: v for k, v in pd.items() if k != "applications"}
    aggregated["applications"] = [
        {
            "name": app["name"],
            "route_prefix": app["route_prefix"],
            "import_path": AGGREGATED_IMPORT_PATH,
            "args": {"llm_configs": [decode]},
        }
    ]
    return aggregated


def arm_raylets(arm: Arm, base: dict[str, Any], head: dict[str, Any]) -> dict[str, Any]:
    """gpu_main's raylets file for `arm`: each slot the `ray start` of the group it stands for, told
    of its GPUs (num-gpus and the role slot one unit per GPU, as KubeRay gives a pod of that many)."""
    out: dict[str, Any] = {"head": head}
    for raylet in arm.raylets:
        spec = copy.deepcopy(base[raylet.group])
        gpus = len(raylet.gpus)
        spec["start"]["num-gpus"] = gpus
        spec["start"]["resources"][role_resource(raylet.group)] = gpus
        spec["env"].update(
            CUDA_VISIBLE_DEVICES=raylet.cuda_visible_devices, REALRUN_RAYLET=raylet.slot, REALRUN_GROUP=raylet.group
        )
        out[raylet.slot] = spec
    return out


def two_gpu_inputs(overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """arm -> {"serve": its serve config, "raylets": its raylets file}, as data (no file written)."""
    spec = rendered_spec(overrides)
    pd = overridden_serve_config(spec, overrides)
    base = run_raylets(spec, overrides["raylet"])
    head = spec["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]
    arms = overrides["arms"]
    tp2 = copy.deepcopy(pd)
    for role in ROLES:
        _apply(tp2["applications"][0]["args"][f"{role}_config"], role, arms["tp2"]["llm_config"])
    serve = {"pd": pd, "agg": aggregated_config(pd, arms["agg"]["llm_config"]), "tp2": tp2}
    return {name: {"serve": serve[name], "raylets": arm_raylets(arm, base, head)} for name, arm in ARMS.items()}


def prefix_inputs(overrides: dict[str, Any], one_gpu: dict[str, Any]) -> dict[str, Any]:
    """The prefix pair on two GPUs: serve-prefix-pd.json and serve-prefix.json as gpu_main's prefix
    phases read them (Serve's default router; the project's on both roles), and their raylets."""
    items = [i for i in one_gpu["prefix_run"]["llm_config"] if i["path"] not in PREFIX_DROPPED]
    spec = rendered_spec(overrides)
    serve = {}
    for arm, aware in PREFIX_ARMS.items():
        config = overridden_serve_config(rendered_spec(overrides, prefix_aware=aware), overrides)
        for role in ROLES:
            _apply(config["applications"][0]["args"][f"{role}_config"], role, items)
        serve[arm] = config
    base = run_raylets(spec, overrides["raylet"])
    head = spec["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]
    return {"serve": serve, "raylets": arm_raylets(PREFIX, base, head)}


# --- the placement plan -----------------------------------------------------------------------------


def llm_configs(serve: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """deployment role -> its LLMConfig: prefill and decode for P/D, `aggregated` for the one LLMConfig."""
    args = serve["applications"][0]["args"]
    if "llm_configs" in args:
        (only,) = args["llm_configs"]
        return {"aggregated": only}
    return {role: args[f"{role}_config"] for role in ROLES}


def bundles(llm: dict[str, Any]) -> list[dict[str, float]]:
    """A replica's placement bundles as the LLMConfig asks: `bundle_per_worker` once per TP rank."""
    tp = int(llm["engine_kwargs"].get("tensor_parallel_size", 1))
    return [dict(llm["placement_group_config"]["bundle_per_worker"]) for _ in range(tp)]


def replicas(llm: dict[str, Any]) -> int:
    return int(llm["deployment_config"]["autoscaling_config"]["max_replicas"])


def raylet_resources(spec: dict[str, Any]) -> dict[str, float]:
    start = spec["start"]
    return {"GPU": float(start["num-gpus"]), **{k: float(v) for k, v in start["resources"].items()}}


def _holds(resources: dict[str, float], replica: list[dict[str, float]]) -> bool:
    need: dict[str, float] = {}
    for bundle in replica:
        for key, value in bundle.items():
            if key != "CPU" and not key.startswith("accelerator_type:"):
                need[key] = need.get(key, 0.0) + float(value)
    return all(resources.get(key, 0.0) >= value for key, value in need.items())


@dataclass(frozen=True)
class Landing:
    """Where one deployment's replicas can land: the raylets that can hold one (STRICT_PACK: a whole
    replica on one raylet), the GPUs those raylets see, and how many replicas it runs."""

    role: str
    replicas: int
    gpus_per_replica: int
    raylets: tuple[str, ...]
    gpus: tuple[int, ...]


def placement_plan(arm: Arm, inputs: dict[str, Any]) -> list[Landing]:
    """For each deployment of the arm, the raylets whose resources hold one whole replica."""
    files = inputs["raylets"]
    by_slot = {r.slot: r for r in arm.raylets}
    plan = []
    for role, llm in llm_configs(inputs["serve"]).items():
        replica = bundles(llm)
        fits = tuple(slot for slot in by_slot if _holds(raylet_resources(files[slot]), replica))
        gpus = tuple(sorted({g for slot in fits for g in by_slot[slot].gpus}))
        gpus_per_replica = int(sum(b.get("GPU", 0) for b in replica))
        plan.append(Landing(role, replicas(llm), gpus_per_replica, fits, gpus))
    return plan


def plan_problems(arm: Arm, inputs: dict[str, Any]) -> list[str]:
    """What keeps the arm from its intended placement: a fractional GPU bundle; a P/D role that more
    than one raylet or none can hold (prefill and decode must each land on their own raylet, so on
    known GPUs), or whose replicas outnumber that raylet's GPUs; aggregated replicas that do not get
    a raylet, and a GPU, each."""
    problems = []
    for role, llm in llm_configs(inputs["serve"]).items():
        for bundle in bundles(llm):
            gpu = float(bundle.get("GPU", 0))
            if not gpu.is_integer() or gpu < 1:
                problems.append(f"{arm.name}/{role}: a bundle asks for {gpu:g} GPU; bundles must be whole GPUs")
    plan = placement_plan(arm, inputs)
    for landing in plan:
        if landing.role == "aggregated":
            if len(landing.raylets) < landing.replicas or len(landing.gpus) < landing.replicas:
                held = f"raylets {landing.raylets} on GPUs {landing.gpus}"
                problems.append(f"{arm.name}: {landing.replicas} aggregated replicas, {held}")
        elif len(landing.raylets) != 1 or landing.replicas * landing.gpus_per_replica > len(landing.gpus):
            problems.append(
                f"{arm.name}/{landing.role}: {landing.replicas} replica(s), could land on {landing.raylets}"
            )
    roles = {landing.role: landing for landing in plan}
    if {"prefill", "decode"} <= set(roles) and roles["prefill"].raylets == roles["decode"].raylets:
        problems.append(f"{arm.name}: prefill and decode land on the same raylet")
    return problems


def write_two_gpu_bundle(out: Path, overrides: dict[str, Any], instance_type: str | None = None) -> list[Path]:
    """The one-GPU bundle (render.write_bundle) and the two-GPU arms' files beside it."""
    one = load_one_gpu_overrides(instance_type=instance_type or overrides["stack_config"][0]["value"])
    written = write_bundle(out, one)
    inputs = two_gpu_inputs(overrides)
    plan = {}
    for name, arm in ARMS.items():
        problems = plan_problems(arm, inputs[name])
        if problems:
            raise ValueError("; ".join(problems))
        plan[name] = {"what": arm.what, "landings": [asdict(x) for x in placement_plan(arm, inputs[name])]}
        for filename, data in ((arm.serve_file, inputs[name]["serve"]), (arm.raylets_file, inputs[name]["raylets"])):
            (out / filename).write_text(json.dumps(data, indent=1) + "\n")
            written.append(out / filename)
    prefix = prefix_inputs(overrides, one)
    for config in prefix["serve"].values():
        problems = plan_problems(PREFIX, {"serve": config, "raylets": prefix["raylets"]})
        if problems:
            raise ValueError("; ".join(problems))
    folder = out / "prefix"  # a bundle of its own: gpu_main's prefix phases read these names
    written += write_bundle(folder, one)
    for arm, config in prefix["serve"].items():
        (folder / f"serve-{arm}.json").write_text(json.dumps(config, indent=1) + "\n")
    (folder / "raylets-prefix.json").write_text(json.dumps(prefix["raylets"], indent=1) + "\n")
    plan["prefix"] = {
        "what": PREFIX.what,
        "landings": [asdict(x) for x in placement_plan(PREFIX, {**prefix, "serve": prefix["serve"]["prefix"]})],
    }
    meta = {"gpu_count": GPU_COUNT, "fabric": FABRIC, "overrides": overrides, "plan": plan}
    (out / "meta-two.json").write_text(json.dumps(meta, indent=1) + "\n")
    return [*written, out / "meta-two.json"]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="llm-pd-eks realrun-two-gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(".gpu/realrun-two"), help="bundle folder")
    parser.add_argument(
        "--instance-type",
        choices=sorted(t for t, spec in GPU_INSTANCE_TYPES.items() if spec.nvml_gpu_name),
        help="the GPU instance type whose GPU the machine has (default: overrides-two-gpu.yaml's)",
    )
    args = parser.parse_args(argv)
    overrides = load_overrides(instance_type=args.instance_type)
    for path in write_two_gpu_bundle(args.out, overrides, args.instance_type):
        print(path)
    return 0


if __name__ == "__main__":
    exit_with("realrun-two-gpu", main)
