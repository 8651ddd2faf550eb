"""Placement judged by Ray's own scheduler: do the rendered worker groups hold every Serve replica?

For each stack, at the Serve replica minimum and maximum:
1. The worker groups are the ones the program registers (the recorded RayService).
2. Each group's node, as the KubeRay autoscaler sees it, comes from Ray's autoscaler module
   (`_generate_available_node_types_from_ray_cr_spec` -> `_get_ray_resources_from_group_spec`).
3. A local multi-node Ray (`ray.cluster_utils.Cluster`, fake GPUs) gets one node per worker pod with
   the resources the raylet would report: what KubeRay passes to `ray start` (the autoscaler's view)
   with `accelerator_type:*` as the raylet itself detects it from the GPU's NVML name
   (`NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type`). A head with `num-cpus: 0` like ours.
4. Each role's bundles come from Ray Serve LLM (`PDServingArgs`, `PDPrefillServer` /
   `PDDecodeServer.get_deployment_options`); one placement group per replica is created.
Then: every replica places, each replica's TP group is on one node, prefill and decode never share a
node, the autoscaler's view of the group fits a replica (Ray's own bin-packing of a pending
STRICT_PACK group), and the ingress (Serve's default one CPU) finds a worker, not the head.

Ray's engine imports need a few vLLM/SGLang names: tests/ray_standins/README.md. One Ray cluster
serves the whole module (nodes are added and removed per case); node CPUs are capped small so
that Ray starts few worker processes on this shared machine (the real node has more, asserted).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from helpers import RAY_SERVICE, STACKS

from components.catalog import GPU_INSTANCE_TYPES, GpuInstanceType
from components.config import ServingConfig
from components.ray_service import ray_service_spec
from tools.preview.mockrun import stack_config

STANDINS = Path(__file__).resolve().parent / "ray_standins"
ACCEL = "accelerator_type:"
PG_WAIT_S = 20  # a feasible group places within moments; only an unplaceable case waits this out
SHORT_WAIT_S = 8  # for the cases built to fail: some groups never place


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Up to a dozen raylets share two cores here. By default each prestarts a Python worker per CPU
    # for the driver's job, and that burst can starve the GCS until a new raylet misses Ray's fixed
    # 30 s registration wait. The test needs placement, not warm workers: start them on demand, one
    # at a time (RayConfig: enable_worker_prestart, prestart_worker_first_driver,
    # worker_maximum_startup_concurrency; inherited by every raylet the Cluster starts).
    for key, value in (("RAY_enable_worker_prestart", "0"), ("RAY_prestart_worker_first_driver", "0"),
                       ("RAY_worker_maximum_startup_concurrency", "1")):
        os.environ.setdefault(key, value)
    sys.path.insert(0, str(STANDINS))
    import ray
    from ray.cluster_utils import Cluster

    # Like the rendered head group: no CPUs and no GPUs for Ray (rayStartParams num-cpus/num-gpus "0").
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "num_gpus": 0, "include_dashboard": False, "object_store_memory": 80 << 20},
    )
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        sys.path.remove(str(STANDINS))
        # the stand-ins serve this module only: later imports of vllm/sglang find the real thing or nothing
        for name in [m for m in sys.modules if m.split(".")[0] in ("vllm", "sglang")]:
            del sys.modules[name]


# --- what Ray's own code derives --------------------------------------------------------------------


def node_types(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The KubeRay autoscaler's node types (per group: min/max workers, resources) of a RayService spec."""
    from ray.autoscaler._private.kuberay.autoscaling_config import _generate_available_node_types_from_ray_cr_spec

    return _generate_available_node_types_from_ray_cr_spec(spec["rayClusterConfig"])


def detected_accelerator(instance: GpuInstanceType) -> str:
    """What a raylet on this GPU reports: Ray's name for it, derived from the NVML device name."""
    from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager

    return ACCEL + NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type(instance.nvml_gpu_name)


def role_deployments(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Ray Serve LLM's deployment options (bundles, strategy, autoscaling) for prefill and decode."""
    from ray.llm._internal.serve.serving_patterns.prefill_decode.builder import (
        PDDecodeServer,
        PDPrefillServer,
        PDServingArgs,
    )

    (app,) = yaml.safe_load(spec["serveConfigV2"])["applications"]
    pd = PDServingArgs.model_validate(app["args"])
    return {
        "prefill": PDPrefillServer.get_deployment_options(pd.prefill_config),
        "decode": PDDecodeServer.get_deployment_options(pd.decode_config),
    }


def autoscaler_fits(view: dict[str, float], bundles: list[dict[str, float]], strategy: str) -> bool:
    """Would the autoscaler launch a node of this group for a pending replica? Ray's own conversion
    of a pending placement group to a demand, bin-packed onto one fresh node of the group."""
    from ray._private.gcs_utils import PlacementGroupTableData
    from ray.autoscaler._private.resource_demand_scheduler import (
        get_bin_pack_residual,
        placement_groups_to_resource_demands,
    )
    from ray.core.generated.common_pb2 import Bundle, PlacementStrategy

    pg = PlacementGroupTableData(
        strategy=PlacementStrategy.Value(strategy), bundles=[Bundle(unit_resources=b) for b in bundles]
    )
    demands, _ = placement_groups_to_resource_demands([pg])
    unfulfilled, _ = get_bin_pack_residual([dict(view)], demands)
    return not unfulfilled


# --- one case: a stack's worker groups at a replica bound --------------------------------------------


def placement_problems(
    cluster: Any, spec: dict[str, Any], instance: GpuInstanceType, bound: str, wait_s: float = PG_WAIT_S
) -> list[str]:
    """Everything that keeps Ray from placing `bound` ("min"/"max") replicas on the rendered groups."""
    import ray
    from ray.serve._private.config import ReplicaConfig
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    problems: list[str] = []
    types, deployments = node_types(spec), role_deployments(spec)
    detected = detected_accelerator(instance)
    nodes, groups, node_role = [], [], {}
    try:
        for role, options in deployments.items():
            view = node_types(spec)[role]["resources"]
            advertised = {k for k in view if k.startswith(ACCEL)}
            if advertised != {detected}:
                problems.append(f"{role}: the group advertises {sorted(advertised)}, the raylet reports {detected}")
            bundles, strategy = options["placement_group_bundles"], options["placement_group_strategy"]
            if not autoscaler_fits(view, bundles, strategy):
                problems.append(f"{role}: the autoscaler's view {view} cannot hold one replica {bundles}")
            replicas = options["autoscaling_config"][f"{bound}_replicas"]
            pods = types[role][f"{bound}_workers"]
            per_node = max(1, int(view.get("GPU", 0)) // len(bundles))
            cpus = min(view["CPU"], per_node + 1)  # its replicas' first bundles, and the ingress
            assert view["CPU"] >= per_node + 1, "the real node has CPU for its replicas and the ingress"
            raylet = {k: v for k, v in view.items() if k not in ("CPU", "GPU", "memory") and not k.startswith(ACCEL)}
            raylet[detected] = 1
            for _ in range(pods):
                node = cluster.add_node(
                    num_cpus=cpus, num_gpus=view.get("GPU", 0), resources=raylet, object_store_memory=80 << 20
                )
                nodes.append(node)
                node_role[node.node_id] = role
            cluster.wait_for_nodes()
            for _ in range(replicas):
                groups.append((role, len(bundles), placement_group(bundles, strategy=strategy)))
        # One wait for all of them: the feasible ones are ready within moments, the rest never.
        refs = [pg.ready() for _, _, pg in groups]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
        for (role, size, pg), ref in zip(groups, refs):
            if ref not in ready:
                problems.append(f"{role}: a replica's placement group ({size} bundles) never placed")
                continue
            placed = set(placement_group_table(pg)["bundles_to_node_id"].values())
            if len(placed) != 1:
                problems.append(f"{role}: one replica's TP group spans {len(placed)} nodes")
            if {node_role.get(n) for n in placed} != {role}:
                problems.append(f"{role}: a replica landed on a node of {sorted({node_role.get(n) for n in placed})}")
        # The ingress (Serve's default replica resources: one CPU) finds a worker, never the head.
        if not problems:
            ingress = ReplicaConfig.create(object).resource_dict
            where = ray.get(
                ray.remote(lambda: ray.get_runtime_context().get_node_id())
                .options(num_cpus=ingress["CPU"])
                .remote(),
                timeout=PG_WAIT_S * 3,
            )
            if where not in node_role:
                problems.append("the ingress replica landed on the head")
    finally:
        for _, _, pg in groups:
            remove_placement_group(pg)
        for node in nodes:
            cluster.remove_node(node)
    return problems


def ints(obj: Any) -> Any:
    """Numbers cross the wire as doubles; give whole numbers back their integer type (as KubeRay reads them)."""
    if isinstance(obj, dict):
        return {k: ints(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [ints(v) for v in obj]
    return int(obj) if isinstance(obj, float) and obj.is_integer() else obj


def rendered(run, stack: str) -> tuple[dict[str, Any], GpuInstanceType]:
    spec = ints(run.one(RAY_SERVICE).inputs["spec"])
    return spec, GPU_INSTANCE_TYPES[stack_config(stack).gpu_nodes.instance_type]


@pytest.mark.parametrize("bound", ["min", "max"])
@pytest.mark.parametrize("stack", STACKS)
def test_every_replica_places_on_the_rendered_worker_groups(ray_cluster, stack, bound, programs):
    spec, instance = rendered(programs(stack), stack)
    assert placement_problems(ray_cluster, spec, instance, bound) == []


# --- and the test bites ----------------------------------------------------------------------------


def staging_serving() -> tuple[ServingConfig, GpuInstanceType]:
    cfg = stack_config("staging")
    assert cfg.serving is not None
    return cfg.serving, GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type]


def test_the_sku_name_as_accelerator_type_never_places(ray_cluster):
    # The old catalog entry of p4d: "A100-40G" (a name in ray.util.accelerators, so LLMConfig accepts
    # it), while a raylet on an A100-SXM4-40GB reports accelerator_type:A100.
    serving, instance = staging_serving()
    wrong = dataclasses.replace(instance, ray_accelerator_type="A100-40G")
    problems = placement_problems(ray_cluster, ray_service_spec(serving, wrong), instance, "min", SHORT_WAIT_S)
    assert any("the raylet reports accelerator_type:A100" in p for p in problems)
    assert any("never placed" in p for p in problems)


def test_groups_without_the_accelerator_resource_never_scale_up(ray_cluster):
    # Ray places on the nodes that exist (the raylet detects its accelerator), but the autoscaler's
    # view of the group lacks accelerator_type:*, so it would never start a pod for a new replica.
    serving, instance = staging_serving()
    spec = ray_service_spec(serving, instance)
    for group in spec["rayClusterConfig"]["workerGroupSpecs"]:
        group["resources"] = {k: v for k, v in group["resources"].items() if not k.startswith(ACCEL)}
    problems = placement_problems(ray_cluster, spec, instance, "min")
    assert any(p.startswith("prefill: the autoscaler's view") for p in problems)
    assert any(p.startswith("decode: the autoscaler's view") for p in problems)
    assert not any("never placed" in p for p in problems)


def test_a_short_role_resource_leaves_replicas_unplaced(ray_cluster):
    # dev at max: 4 TP-1 replicas a side on one 8-GPU node each; a group advertising one unit of
    # its role resource (not one per GPU) holds a single replica.
    cfg = stack_config("dev")
    assert cfg.serving is not None
    instance = GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type]
    spec = ray_service_spec(cfg.serving, instance)
    (prefill,) = [g for g in spec["rayClusterConfig"]["workerGroupSpecs"] if g["groupName"] == "prefill"]
    prefill["resources"]["prefill_gpu"] = "1"
    problems = placement_problems(ray_cluster, spec, instance, "max", SHORT_WAIT_S)
    assert sum("prefill: a replica's placement group" in p for p in problems) == cfg.serving.prefill.max_replicas - 1
    assert not any(p.startswith("decode") for p in problems)


def test_the_catalog_names_every_gpu_as_ray_does():
    from ray.llm._internal.serve.core.configs.llm_config import AcceleratorType

    for instance in GPU_INSTANCE_TYPES.values():
        assert detected_accelerator(instance) == ACCEL + instance.ray_accelerator_type, instance.name
        # and LLMConfig accepts it (its accelerator_type is an enum of ray.util.accelerators' names)
        assert instance.ray_accelerator_type in {member.value for member in AcceleratorType}, instance.name
