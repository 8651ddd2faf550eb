"""Placement judged by Ray's own scheduler: do the rendered worker groups hold every Serve replica?

For each stack, at the Serve replica minimum and maximum:
1. The worker groups are the ones the program registers (the recorded RayService).
2. Each worker pod's raylet is started from the `ray start` line KubeRay's operator writes for its
   group (tests/kuberay_start_params.py: a transcription of kuberay v1.7.0 pod.go, checked against
   KubeRay's own table tests), plus the `accelerator_type:*` the raylet itself detects from the GPU's
   NVML name (`NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type`). A head with `num-cpus: 0`.
3. Each role's bundles come from Ray Serve LLM (`PDServingArgs`, `PDPrefillServer` /
   `PDDecodeServer.get_deployment_options`); one placement group per replica is created.
Then, first assertion: every replica places, each replica's TP group is on one node, prefill and
decode never share a node, and the ingress (Serve's default one CPU) finds a worker, not the head.
Second, separate assertion: the KubeRay autoscaler's view of each group (Ray's autoscaler module,
`_generate_available_node_types_from_ray_cr_spec`, which reads the group spec, not the pod) fits a
replica (Ray's own bin-packing of a pending STRICT_PACK group) and advertises what the raylet reports.

Deterministic on a loaded two-core machine: one Ray head for the module (started once: Ray waits
a fixed 30 s for a starting node to register), each case's worker raylets drained through the GCS
and removed after it (`removed`: the GCS forgets them at once, not after its health checks), so at
most a handful run at once; a node start that outlives Ray's fixed 30 s registration wait is
tried again, a bounded number of times (`started`); Ray's GCS health checks and the node-registration wait
are generous (RayConfig names from src/ray/common/ray_config_def.h: health_check_initial_delay_ms,
health_check_period_ms, health_check_timeout_ms, health_check_failure_threshold); waits are for a
placement outcome, never a fixed sleep: a case waits (long, bounded) for the groups that can place,
and those that cannot are structurally infeasible, so they are never "just late".
Ray's engine imports need a few vLLM/SGLang names: tests/ray_standins/README.md. Node CPUs are
capped small so that Ray starts few worker processes on this shared machine (the real node has
more, asserted).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml
from helpers import RAY_SERVICE, STACKS, STANDINS
from kuberay_start_params import raylet_resources, worker_ray_start

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES, GpuInstanceType
from llm_pd_eks.config import ServingConfig
from llm_pd_eks.config.serving import AGGREGATED_ROLE
from llm_pd_eks.ray_resources import role_resource
from llm_pd_eks.ray_service import ray_service_spec
from llm_pd_eks.runtime.prefix_router import TREE_ACTOR_OPTIONS
from llm_pd_eks.serve_app import AGGREGATED_IMPORT_PATH
from llm_pd_eks_tools.core.stack import stack_config

ACCEL = "accelerator_type:"
PLACE_WAIT_S = 300  # bound on waiting for the groups that can place (moments on an idle machine)
REGISTER_WAIT_S = 300  # bound on new raylets registering with the GCS (Ray's Cluster default: 30 s)
# Ray's own settings, inherited by the GCS and every raylet the Cluster starts. Workers start on
# demand, one at a time (a prestart burst of one Python worker per CPU starves the GCS on two cores);
# the GCS declares a raylet dead only after ~10 minutes of failed health checks, not 5 x 3 s.
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
    "RAY_worker_maximum_startup_concurrency": "1",
    "RAY_health_check_initial_delay_ms": "30000",
    "RAY_health_check_period_ms": "10000",
    "RAY_health_check_timeout_ms": "60000",
    "RAY_health_check_failure_threshold": "60",
    # How long a new head waits for the GCS to write its port file (Ray 2.58 ray/_private/node.py,
    # default 30 s, `wait_for_persisted_port`): too short for an overloaded 2-core machine.
    "RAY_gcs_server_port_wait_time_s": "180",
}


NODE_START_ATTEMPTS = 4


def _children() -> dict[int, list[int]]:
    """ppid -> pids of every process, from /proc."""
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


def _subtree(pid: int, tree: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(tree.get(current, []))
    return out


def started(make: Callable[[], Any]) -> Any:
    """`make()` (a Ray node start), tried again when Ray's own fixed 30 s wait for the new raylet to
    register runs out (ray/_private/node.py `raylet_start_wait_time_s`, not configurable): on an
    overloaded machine the GCS can be that slow to answer. A failed attempt's processes (the new
    children of this process, with their own children) are killed by pid; at most NODE_START_ATTEMPTS."""
    for attempt in range(NODE_START_ATTEMPTS):
        before = set(_children().get(os.getpid(), []))
        try:
            return make()
        except Exception as error:
            slow = ("timed out during startup", "Timed out waiting for file")  # the raylet's wait, the GCS port file's
            if not any(text in str(error) for text in slow) or attempt == NODE_START_ATTEMPTS - 1:
                raise
            tree = _children()
            for child in set(tree.get(os.getpid(), [])) - before:
                for pid in reversed(_subtree(child, tree)):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def ray_env() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in RAY_ENV}
    os.environ.update(RAY_ENV)
    sys.path.insert(0, str(STANDINS))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        sys.path.remove(str(STANDINS))
        # the stand-ins serve this module only: later imports of vllm/sglang find the real thing or nothing
        for name in [m for m in sys.modules if m.split(".")[0] in ("vllm", "sglang")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def ray_cluster(ray_env) -> Iterator[Any]:
    """One local Ray head for the module; each case adds its worker raylets and removes them after.

    Ray's Node start waits a fixed 30 s for a new raylet to register (ray/_private/node.py,
    `raylet_start_wait_time_s`); on an overloaded machine a head start is the likeliest to miss it,
    so the head starts once."""
    import ray
    from ray.cluster_utils import Cluster

    # Like the rendered head group: no CPUs and no GPUs for Ray (rayStartParams num-cpus/num-gpus "0").
    cluster = started(
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
    """Ray Serve LLM's deployment options (bundles, strategy, autoscaling) per role: prefill and decode
    (`build_pd_openai_app`), or the one aggregated group (`build_openai_app`, Ray's LLMServer)."""
    from ray.llm._internal.serve.core.ingress.builder import LLMServingArgs
    from ray.llm._internal.serve.core.server.llm_server import LLMServer
    from ray.llm._internal.serve.serving_patterns.prefill_decode.builder import (
        PDDecodeServer,
        PDPrefillServer,
        PDServingArgs,
    )

    app = serve_application(spec)
    if app["import_path"] == AGGREGATED_IMPORT_PATH:
        (llm_config,) = LLMServingArgs.model_validate(app["args"]).llm_configs
        return {AGGREGATED_ROLE: LLMServer.get_deployment_options(llm_config)}
    pd = PDServingArgs.model_validate(app["args"])
    return {
        "prefill": PDPrefillServer.get_deployment_options(pd.prefill_config),
        "decode": PDDecodeServer.get_deployment_options(pd.decode_config),
    }


def serve_application(spec: dict[str, Any]) -> dict[str, Any]:
    (app,) = yaml.safe_load(spec["serveConfigV2"])["applications"]
    return app


def ingress_replicas(spec: dict[str, Any], bound: str) -> int:
    """The OpenAI ingress's replica bound as rendered (its Serve options in the application's args)."""
    return serve_application(spec)["args"]["ingress_deployment_config"]["autoscaling_config"][f"{bound}_replicas"]


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


def raylet_of(group: dict[str, Any], detected: str) -> dict[str, float]:
    """The resources a worker pod's raylet registers: its `ray start` flags, plus the detected accelerator."""
    raylet = raylet_resources(worker_ray_start(group))
    raylet.setdefault(detected, 1.0)
    return raylet


def autoscaler_problems(spec: dict[str, Any], instance: GpuInstanceType) -> list[str]:
    """What keeps the KubeRay autoscaler from launching a pod of a group for a pending replica."""
    problems: list[str] = []
    types, deployments = node_types(spec), role_deployments(spec)
    detected = detected_accelerator(instance)
    for role, options in deployments.items():
        view = types[role]["resources"]
        advertised = {k for k in view if k.startswith(ACCEL)}
        if advertised != {detected}:
            problems.append(f"{role}: the group advertises {sorted(advertised)}, the raylet reports {detected}")
        bundles, strategy = options["placement_group_bundles"], options["placement_group_strategy"]
        if not autoscaler_fits(view, bundles, strategy):
            problems.append(f"{role}: the autoscaler's view {view} cannot hold one replica {bundles}")
    return problems


def placement_problems(
    cluster: Any, spec: dict[str, Any], instance: GpuInstanceType, bound: str, expect_unplaced: int = 0
) -> list[str]:
    """Everything that keeps Ray from placing `bound` ("min"/"max") replicas on raylets started as
    KubeRay starts the rendered groups' pods. `expect_unplaced`: how many replicas the case is built
    to leave unplaced (the wait is for the others)."""
    import ray
    from ray.serve._private.config import ReplicaConfig
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    problems: list[str] = []
    types, deployments = node_types(spec), role_deployments(spec)
    detected = detected_accelerator(instance)
    groups_by_role = {g["groupName"]: g for g in spec["rayClusterConfig"]["workerGroupSpecs"]}
    node_role, groups, nodes = {}, [], []
    for role, options in deployments.items():
        bundles, strategy = options["placement_group_bundles"], options["placement_group_strategy"]
        raylet = raylet_of(groups_by_role[role], detected)
        per_node = max(1, int(raylet.get("GPU", 0)) // len(bundles))
        ingresses = ingress_replicas(spec, bound)
        assert raylet["CPU"] >= per_node + ingresses, "the real node has CPU for its replicas and the ingress"
        custom = {k: v for k, v in raylet.items() if k not in ("CPU", "GPU", "memory")}
        for _ in range(types[role][f"{bound}_workers"]):
            node = started(
                functools.partial(
                    cluster.add_node,
                    # its replicas' first bundles, and the ingress replicas
                    num_cpus=min(raylet["CPU"], per_node + ingresses),
                    num_gpus=raylet.get("GPU", 0),
                    resources=custom,
                    object_store_memory=80 << 20,
                    wait=False,
                )
            )
            nodes.append(node)
            node_role[node.node_id] = role
        for _ in range(options["autoscaling_config"][f"{bound}_replicas"]):
            groups.append((role, len(bundles), bundles, strategy))
    pgs: list[tuple[str, int, Any]] = []
    try:
        cluster.wait_for_nodes(timeout=REGISTER_WAIT_S)
        pgs = [(role, size, placement_group(bundles, strategy=strategy)) for role, size, bundles, strategy in groups]
        refs = [pg.ready() for _, _, pg in pgs]
        # The groups that can place do so within the bound; the others are infeasible on these raylets.
        ray.wait(refs, num_returns=len(refs) - expect_unplaced, timeout=PLACE_WAIT_S)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for (role, size, pg), ref in zip(pgs, refs):
            if ref not in ready:
                problems.append(f"{role}: a replica's placement group ({size} bundles) never placed")
                continue
            placed = set(placement_group_table(pg)["bundles_to_node_id"].values())
            if len(placed) != 1:
                problems.append(f"{role}: one replica's TP group spans {len(placed)} nodes")
            if {node_role.get(n) for n in placed} != {role}:
                problems.append(f"{role}: a replica landed on a node of {sorted({node_role.get(n) for n in placed})}")
        # The ingress replicas (Serve's default replica resources: one CPU each), held at once, find
        # workers, never the head.
        if not problems:
            ingress = ReplicaConfig.create(object).resource_dict
            holder = holder_actor().options(num_cpus=ingress["CPU"])
            holders = [holder.remote() for _ in range(ingress_replicas(spec, bound))]
            wheres = ray.get([h.node.remote() for h in holders], timeout=PLACE_WAIT_S)
            for holder in holders:
                ray.kill(holder)
            if any(where not in node_role for where in wheres):
                problems.append("an ingress replica landed on the head")
            # The prefix tree (its actor's own options) lands on the head, where no GPU-node drain takes it.
            tree = {k: v for k, v in TREE_ACTOR_OPTIONS.items() if k not in ("lifetime", "get_if_exists")}
            tree_holder = holder_actor().options(**tree).remote()
            if ray.get(tree_holder.node.remote(), timeout=PLACE_WAIT_S) != cluster.head_node.node_id:
                problems.append("the prefix tree actor landed on a worker")
            ray.kill(tree_holder)
    finally:
        for _, _, pg in pgs:
            remove_placement_group(pg)
        removed(cluster, nodes)  # the next case starts from the head alone
    return problems


def holder_actor() -> Any:
    """An actor class standing for a replica: it holds its resources until killed, and says where it
    runs (defined here, so Ray ships it by value to raylets that cannot import this test module)."""
    import ray

    class Holder:
        def node(self) -> str:
            return ray.get_runtime_context().get_node_id()

    return ray.remote(Holder)


def removed(cluster: Any, nodes: list[Any]) -> None:
    """The case's worker raylets gone, the way Ray's autoscaler stops a node: drained through the GCS
    first (`GcsClient.drain_nodes`, as ray 2.58 autoscaler/v2/instance_manager/subscribers/
    ray_stopper.py `_stop_ray_node` does), which marks each node dead in the GCS before it answers,
    then their processes killed (`Cluster.remove_node`). Without the drain the GCS learns of a
    removed raylet only from its own exit or from failed health checks (about ten minutes with
    RAY_ENV's settings): `remove_node` gives a raylet one second after SIGTERM before SIGKILL
    (ray/_private/node.py `_kill_process_impl`), too short on a loaded machine for it to unregister."""
    from ray._common.utils import hex_to_binary
    from ray._raylet import GcsClient

    if nodes:
        gcs = GcsClient(address=cluster.address)
        gcs.drain_nodes(node_ids=[hex_to_binary(node.node_id) for node in nodes], timeout=REGISTER_WAIT_S)
    for node in nodes:
        cluster.remove_node(node)
    cluster.wait_for_nodes(timeout=REGISTER_WAIT_S)


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
    assert autoscaler_problems(spec, instance) == []


def aggregated(stack: str) -> tuple[dict[str, Any], GpuInstanceType]:
    """The stack's RayService with serving.mode aggregated, its one group shaped as the decode side."""
    cfg = stack_config(stack)
    assert cfg.serving is not None
    data = cfg.serving.model_dump(by_alias=True)
    serving = ServingConfig.model_validate({**data, "mode": "aggregated", "aggregated": data["decode"]})
    instance = GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type]
    return ints(ray_service_spec(serving, instance, region=cfg.region)), instance


@pytest.mark.parametrize("bound", ["min", "max"])
@pytest.mark.parametrize("stack", STACKS)
def test_every_aggregated_replica_places_on_its_one_worker_group(ray_cluster, stack, bound):
    spec, instance = aggregated(stack)
    assert [g["groupName"] for g in spec["rayClusterConfig"]["workerGroupSpecs"]] == [AGGREGATED_ROLE]
    assert serve_application(spec)["import_path"] == AGGREGATED_IMPORT_PATH
    assert placement_problems(ray_cluster, spec, instance, bound) == []
    assert autoscaler_problems(spec, instance) == []


# --- and the test bites ----------------------------------------------------------------------------


def staging_serving() -> tuple[ServingConfig, GpuInstanceType]:
    cfg = stack_config("staging")
    assert cfg.serving is not None
    return cfg.serving, GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type]


def renamed_role_resource(spec: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """`spec` with a role resource renamed in the group's `resources` and in that role's bundles."""
    out = copy.deepcopy(spec)
    for group in out["rayClusterConfig"]["workerGroupSpecs"]:
        if old in group["resources"]:
            group["resources"][new] = group["resources"].pop(old)
    serve = yaml.safe_load(out["serveConfigV2"])
    args = serve["applications"][0]["args"]
    for llm in (args[key] for key in ("prefill_config", "decode_config")):
        bundle = llm["placement_group_config"]["bundle_per_worker"]
        if old in bundle:
            bundle[new] = bundle.pop(old)
    out["serveConfigV2"] = yaml.safe_dump(serve, sort_keys=False)
    return out


def test_a_gpu_suffixed_role_resource_never_places_yet_the_autoscaler_believes_it_fits(ray_cluster):
    # KubeRay turns `prefill_gpu` into --num-gpus and drops it from --resources: no raylet has it,
    # while the autoscaler (group spec) sees it: pods scale to max, every replica pending forever.
    serving, instance = staging_serving()
    spec = renamed_role_resource(ray_service_spec(serving, instance), "prefill_slot", "prefill_gpu")
    assert autoscaler_problems(spec, instance) == []
    problems = placement_problems(ray_cluster, spec, instance, "min", expect_unplaced=serving.prefill.min_replicas)
    assert sum(p.startswith("prefill: a replica's placement group") for p in problems) == serving.prefill.min_replicas
    assert not any(p.startswith("decode") for p in problems)


def test_the_sku_name_as_accelerator_type_is_caught_in_the_autoscaler_view(ray_cluster):
    # The old catalog entry of p4d: "A100-40G" (a name in ray.util.accelerators, so LLMConfig accepts
    # it), while a raylet on an A100-SXM4-40GB reports accelerator_type:A100.
    serving, instance = staging_serving()
    wrong = dataclasses.replace(instance, ray_accelerator_type="A100-40G")
    problems = autoscaler_problems(ray_service_spec(serving, wrong), instance)
    assert any("the raylet reports accelerator_type:A100" in p for p in problems)


def test_groups_without_the_accelerator_resource_never_scale_up(ray_cluster):
    # Ray places on the nodes that exist (the raylet detects its accelerator), but the autoscaler's
    # view of the group lacks accelerator_type:*, so it would never start a pod for a new replica.
    serving, instance = staging_serving()
    spec = ray_service_spec(serving, instance)
    for group in spec["rayClusterConfig"]["workerGroupSpecs"]:
        group["resources"] = {k: v for k, v in group["resources"].items() if not k.startswith(ACCEL)}
    assert placement_problems(ray_cluster, spec, instance, "min") == []
    problems = autoscaler_problems(spec, instance)
    assert any(p.startswith("prefill: the autoscaler's view") for p in problems)
    assert any(p.startswith("decode: the autoscaler's view") for p in problems)


def test_a_short_role_resource_leaves_replicas_unplaced(ray_cluster):
    # dev at max: 4 TP-1 replicas a side on one 8-GPU node each; a group advertising one unit of
    # its role resource (not one per GPU) holds a single replica.
    cfg = stack_config("dev")
    assert cfg.serving is not None
    instance = GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type]
    spec = ray_service_spec(cfg.serving, instance)
    (prefill,) = [g for g in spec["rayClusterConfig"]["workerGroupSpecs"] if g["groupName"] == "prefill"]
    prefill["resources"][role_resource("prefill")] = "1"
    unplaced = cfg.serving.prefill.max_replicas - 1
    problems = placement_problems(ray_cluster, spec, instance, "max", expect_unplaced=unplaced)
    assert sum("prefill: a replica's placement group" in p for p in problems) == unplaced
    assert not any(p.startswith("decode") for p in problems)


def test_the_catalog_names_every_gpu_as_ray_does():
    from ray.llm._internal.serve.core.configs.llm_config import AcceleratorType

    for instance in GPU_INSTANCE_TYPES.values():
        assert detected_accelerator(instance) == ACCEL + instance.ray_accelerator_type, instance.name
        # and LLMConfig accepts it (its accelerator_type is an enum of ray.util.accelerators' names)
        assert instance.ray_accelerator_type in {member.value for member in AcceleratorType}, instance.name
