"""Render the real run's inputs from what the program renders for a stack, changed only by overrides.yaml.

    python -m llm_pd_eks_sizing.realrun.render --out .gpu/realrun

writes `serve-pd.json` (the P/D application exactly as `serveConfigV2` renders it, overrides applied),
`serve-cond.json` (the same with serving.routing.decodeOnlyBelowTokens at overrides.yaml's `mix_run`
threshold, between the mix's short and long prompts, and `runtime/` the module that arm imports),
`serve-agg.json` (the same decode LLMConfig served alone by `build_openai_app`, no KV connector, with
both roles' GPU memory: the baseline the P/D figures are compared with), `serve-prefix-pd.json` and
`serve-prefix.json` (the prefix-routing arms: the P/D app with overrides.yaml's `prefix_run` entries
too, the second with serving.routing.prefixAware on for both roles) and `raylets-prefix.json` (their
raylets), `raylets.json` (the `ray start`
resources of each worker group as KubeRay derives them from the group spec, overrides applied, and the
worker pods' plain environment), `model/config.json` and `meta.json` (versions, commit, overrides, and
what `make size` says of decode-only for the run's model and GPU).
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from llm_pd_eks import versions
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.ray_resources import role_resource
from llm_pd_eks.ray_service import ray_service_spec
from llm_pd_eks.serve_routing import runtime_configmap_data
from llm_pd_eks.serving_names import ROLES
from llm_pd_eks_tools.core.cli import ArgumentParser, exit_with

HERE = Path(__file__).resolve().parent
OVERRIDES = HERE / "overrides.yaml"
MODEL_CONFIGS = HERE / "models"
ROLE_SLOT = "ROLE_SLOT"  # in a raylet override path: the role's own resource (prefill_slot / decode_slot)
OVERRIDE_SECTIONS = ("stack_config", "serve_config", "llm_config", "raylet")
PREFIX_SECTIONS = ("llm_config", "raylet")  # overrides.yaml `prefix_run`: the prefix-routing arms only
# arm -> serving.routing.prefixAware for both roles (the bundle's serve-<arm>.json)
PREFIX_ARMS = {"prefix-pd": False, "prefix": True}
AGGREGATED_IMPORT_PATH = "ray.serve.llm:build_openai_app"
# Worker environment the real run drops: the EFA provider settings (no EFA device there) and what
# points at the node's weights cache and Hugging Face (no hub there).
DROPPED_ENV = ("FI_PROVIDER", "FI_EFA_FORK_SAFE", "FI_EFA_USE_DEVICE_RDMA", "HF_HOME", "HF_XET_HIGH_PERFORMANCE")


def load_overrides(path: Path = OVERRIDES, instance_type: str | None = None) -> dict[str, Any]:
    """overrides.yaml, each entry's reason checked; `instance_type` (a GPU instance type of the catalog)
    replaces its gpuNodes.instanceType where the machine lent has another GPU than the file names."""
    data = yaml.safe_load(path.read_text())
    if instance_type is not None:
        gpu = GPU_INSTANCE_TYPES[instance_type].nvml_gpu_name
        for item in data["stack_config"]:
            if item["path"] == "gpuNodes.instanceType":
                item.update(value=instance_type, reason=f"the machine's GPU is one {gpu}, the GPU of {instance_type}")
    sections = [(s, data[s]) for s in OVERRIDE_SECTIONS] + [
        (f"prefix_run.{s}", data["prefix_run"][s]) for s in PREFIX_SECTIONS
    ]
    for section, items in sections:
        for item in items:
            if not str(item.get("reason", "")).strip():
                raise ValueError(f"{path.name}: {section} override {item.get('path')} has no reason")
    mix = data["mix_run"]
    if not (isinstance(mix.get("decode_only_below_tokens"), int) and str(mix.get("reason", "")).strip()):
        raise ValueError(f"{path.name}: mix_run needs an integer decode_only_below_tokens and its reason")
    return data


def _walk(tree: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    *parents, leaf = path.split(".")
    for key in parents:
        tree = tree[key]
    return tree, leaf


def get_path(tree: dict[str, Any], path: str) -> Any:
    node, leaf = _walk(tree, path)
    return node.get(leaf)


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    """`value` at `path`, the dicts on the way made where the rendering has none (runtime_env.env_vars)."""
    *parents, leaf = path.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[leaf] = copy.deepcopy(value)


def rendered_stack(overrides: dict[str, Any]) -> Any:
    """The stack's validated config with the stack_config overrides applied."""
    from llm_pd_eks_tools.core.stack import stack_config

    config = stack_config(overrides["stack"])
    for item in overrides["stack_config"]:
        if item["path"] != "gpuNodes.instanceType":  # the only stack change the run needs
            raise ValueError(f"unsupported stack_config override {item['path']}")
        config = config.model_copy(
            update={"gpu_nodes": config.gpu_nodes.model_copy(update={"instance_type": item["value"]})}
        )
    return config


def rendered_spec(
    overrides: dict[str, Any], decode_only_below: int | None = None, prefix_aware: bool | None = None
) -> dict[str, Any]:
    """The RayService spec the program renders for the stack (stack_config overrides applied), or with
    serving.routing.decodeOnlyBelowTokens set (the decode-only arm), or with serving.routing.prefixAware
    set for both roles (the prefix-routing arms: on, or off for Serve's default router; None: the
    stack's own)."""
    config = rendered_stack(overrides)
    serving = config.serving
    routing = serving.routing
    if decode_only_below is not None:
        routing = routing.model_copy(update={"decode_only_below_tokens": decode_only_below})
    if prefix_aware is not None:
        roles = routing.prefix_aware.model_copy(update={"prefill": prefix_aware, "decode": prefix_aware})
        routing = routing.model_copy(update={"prefix_aware": roles})
    if routing is not serving.routing:
        serving = serving.model_copy(update={"routing": routing})
    return ray_service_spec(serving, GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type])


def sized_decode_only_threshold(overrides: dict[str, Any]) -> dict[str, Any]:
    """What `make size` says of decode-only for the run's model and GPU: its threshold and its words
    (kept beside the run, which tests the claim at overrides.yaml's `mix_run` threshold)."""
    from llm_pd_eks.models import MODELS
    from llm_pd_eks_sizing.model.routing import decode_only_threshold as sized

    config = rendered_stack(overrides)
    found = sized(MODELS[config.serving.model_id], GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type])
    return {
        "instance_type": config.gpu_nodes.instance_type,
        "tokens": found.tokens,
        "hop_s": found.hop_s,
        "text": found.text(),
    }


def decode_only_threshold(overrides: dict[str, Any]) -> int:
    """The decode-only arm's serving.routing.decodeOnlyBelowTokens (overrides.yaml `mix_run`)."""
    return int(overrides["mix_run"]["decode_only_below_tokens"])


def kuberay_raylet(group: dict[str, Any]) -> dict[str, Any]:
    """The resources KubeRay's `ray start` gives a worker pod's raylet: GPUs from the container's
    nvidia.com/gpu limit, CPUs from its CPU limit or request, memory from its memory limit, and the
    group's `resources` (tests/integration/test_real_run.py checks this against the KubeRay transcription)."""
    container = group["template"]["spec"]["containers"][0]
    limits, requests = container["resources"].get("limits", {}), container["resources"].get("requests", {})
    memory = limits.get("memory") or requests.get("memory")
    assert memory.endswith("Gi"), memory
    return {
        "num-gpus": int(limits.get("nvidia.com/gpu", "0")),
        "num-cpus": int(limits.get("cpu") or requests.get("cpu")),
        "memory": int(memory[:-2]) * 2**30,
        "resources": {k: float(v) for k, v in group.get("resources", {}).items()},
    }


def overridden_serve_config(
    spec: dict[str, Any], overrides: dict[str, Any], prefix_run: bool = False
) -> dict[str, Any]:
    """The rendered serve config with overrides.yaml's entries applied (and its `prefix_run` ones after)."""
    serve = yaml.safe_load(spec["serveConfigV2"])
    app = serve["applications"][0]
    llm = overrides["llm_config"] + (overrides["prefix_run"]["llm_config"] if prefix_run else [])
    for role in ROLES:
        for item in llm:
            set_path(app["args"][f"{role}_config"], item["path"], item["value"])
    for item in overrides["serve_config"]:
        set_path(serve, item["path"], item["value"])
    return serve


def run_inputs(overrides: dict[str, Any]) -> dict[str, Any]:
    """Everything the GPU machine needs, as data (no file written)."""
    spec = rendered_spec(overrides)
    serve = overridden_serve_config(spec, overrides)
    app = serve["applications"][0]
    conditional = overridden_serve_config(rendered_spec(overrides, decode_only_threshold(overrides)), overrides)
    decode = copy.deepcopy(app["args"]["decode_config"])
    decode["engine_kwargs"].pop("kv_transfer_config")
    share = get_path(decode, "engine_kwargs.gpu_memory_utilization")
    decode["engine_kwargs"]["gpu_memory_utilization"] = round(share * len(ROLES), 3)
    aggregated = {
        **{k: v for k, v in serve.items() if k != "applications"},
        "applications": [
            {
                "name": app["name"],
                "route_prefix": app["route_prefix"],
                "import_path": AGGREGATED_IMPORT_PATH,
                "args": {"llm_configs": [decode]},
            }
        ],
    }
    prefix = {
        arm: overridden_serve_config(rendered_spec(overrides, prefix_aware=on), overrides, prefix_run=True)
        for arm, on in PREFIX_ARMS.items()
    }
    head = spec["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]
    return {
        "serve_pd": serve,
        "serve_agg": aggregated,
        "serve_cond": conditional,
        "serve_prefix": prefix,
        "raylets": run_raylets(spec, overrides["raylet"]),
        "raylets_prefix": run_raylets(spec, overrides["raylet"] + overrides["prefix_run"]["raylet"]),
        "head": head,
    }


def prefix_prefill_configs(overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """arm -> the prefill LLMConfig each prefix-routing arm deploys (its replicas, KV cache, router)."""
    arms = run_inputs(overrides)["serve_prefix"]
    return {arm: config["applications"][0]["args"]["prefill_config"] for arm, config in arms.items()}


def run_raylets(spec: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """Each role's `ray start` resources (KubeRay's, `items` applied) and its pods' plain environment."""
    raylets = {}
    groups = {g["groupName"]: g for g in spec["rayClusterConfig"]["workerGroupSpecs"]}
    for role in ROLES:
        raylet = kuberay_raylet(groups[role])
        raylet.pop("memory")  # the pod's memory limit: Ray's own detection on the shared machine instead
        for item in items:
            path = item["path"].replace(ROLE_SLOT, role_resource(role))
            set_path(raylet, path, item["value"])
        env = {
            e["name"]: e["value"]
            for e in groups[role]["template"]["spec"]["containers"][0]["env"]
            if "value" in e and e["name"] not in DROPPED_ENV
        }
        raylets[role] = {"start": raylet, "env": env}
    return raylets


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=HERE)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, timeout=10, cwd=HERE)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def write_bundle(out: Path, overrides: dict[str, Any]) -> list[Path]:
    inputs = run_inputs(overrides)
    model_id = inputs["serve_pd"]["applications"][0]["args"]["decode_config"]["model_loading_config"]["model_id"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "model").mkdir(exist_ok=True)
    written = []
    served = (("serve-pd.json", "serve_pd"), ("serve-agg.json", "serve_agg"), ("serve-cond.json", "serve_cond"))
    files = [(name, inputs[key]) for name, key in served]
    files += [(f"serve-{arm}.json", inputs["serve_prefix"][arm]) for arm in PREFIX_ARMS]
    files.append(("raylets-prefix.json", {"head": inputs["head"], **inputs["raylets_prefix"]}))
    for name, data in files:
        (out / name).write_text(json.dumps(data, indent=1) + "\n")
        written.append(out / name)
    (out / "raylets.json").write_text(json.dumps({"head": inputs["head"], **inputs["raylets"]}, indent=1) + "\n")
    # the decode-only arm's server class, importable by the raylets as in the pods (serve_routing.py)
    (out / "runtime").mkdir(exist_ok=True)
    for filename, source in runtime_configmap_data().items():
        (out / "runtime" / filename).write_text(source)
        written.append(out / "runtime" / filename)
    config = MODEL_CONFIGS / model_id / "config.json"
    (out / "model" / "config.json").write_text(config.read_text())
    meta = {
        "stack": overrides["stack"],
        "model_id": model_id,
        "commit": git_commit(),
        "versions_pinned_from_image": versions.DLC_IMAGE,  # never pulled: the run installs wheels.txt
        "ray": versions.DLC_RAY_VERSION,
        "vllm": versions.DLC_VLLM_VERSION,
        "nixl": versions.DLC_NIXL_VERSION,
        "overrides": overrides,
        "sized_decode_only": sized_decode_only_threshold(overrides),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return [*written, out / "raylets.json", out / "model" / "config.json", out / "meta.json"]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="llm-pd-eks realrun-render", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(".gpu/realrun"), help="bundle folder (default .gpu/realrun)")
    parser.add_argument(
        "--instance-type",
        choices=sorted(t for t, spec in GPU_INSTANCE_TYPES.items() if spec.nvml_gpu_name),
        help="the GPU instance type whose GPU the machine has (default: overrides.yaml's)",
    )
    args = parser.parse_args(argv)
    for path in write_bundle(args.out, load_overrides(instance_type=args.instance_type)):
        print(path)
    return 0


if __name__ == "__main__":
    exit_with("realrun-render", main)
