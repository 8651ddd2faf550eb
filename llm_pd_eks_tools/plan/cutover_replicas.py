"""Pre-scale the next Ray cluster to the serving one's replica counts, before an `up`.

KubeRay's NewCluster upgrade builds the new Ray cluster with its worker groups at `replicas` and Serve
starts each deployment at `initial_replicas` (else `min_replicas`): left at the minimum, a cut-over at
peak load switches traffic onto half the replicas the old cluster ran, and serving is short until Serve's
autoscaler and new GPU nodes catch up (a node launch and a model load). This tool reads the serving
cluster's live counts and writes them as `serving.<role>.cutoverReplicas` (llm_pd_eks/config/serving.py),
which the program turns into both (llm_pd_eks/serve_app.py, llm_pd_eks/ray_worker_pod.py). Neither
touches the running cluster: KubeRay leaves `replicas` out of its cluster hash and Serve keeps a
running deployment's target.

    python -m llm_pd_eks_tools.plan.cutover_replicas --stack prod [--kubeconfig PATH] [--write]

The live count of a role is its worker group's `replicas` in the active RayCluster (the pods Ray's
autoscaler asked for) times the Serve replicas one node holds. What is written is bounded by what fits:
the config refuses a start that, next to the serving cluster at its maximum, exceeds gpuNodes.maxSize,
so the larger side is lowered until it fits (prod's maxSize 6 with 2 + 2 nodes at most leaves room for
the minimum only: raise maxSize to pre-scale a cut-over at full load). Exit 0 written or nothing to
change, 2 bad input, 5 the cluster could not be read (nothing written).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Optional

import yaml
from ruamel.yaml import YAML

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import ConfigError, StackConfig, validate_engine_config
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, exit_with, one_line
from llm_pd_eks_tools.core.io_safety import atomic_write, read_regular_file
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.core.stackfile import MAX_BYTES, engine_config, stack_file
from llm_pd_eks_tools.gates.pending_deletes import Kube
from llm_pd_eks_tools.ops.verify.kube import (
    BadReply,
    Deadline,
    HttpError,
    KubeClient,
    Unreachable,
    kubeconfig_from_stack,
    load_kubeconfig,
    read_kubeconfig,
)

ROLES = ("prefill", "decode")
CLUSTER_TIMEOUT_S = 60.0


def live_worker_pods(kube: Kube) -> Optional[dict[str, int]]:
    """Worker pods per role of the serving (active) Ray cluster; None when no RayService serves yet."""
    for service in kube.get_items("/apis/ray.io/v1/rayservices"):
        active = ((service.get("status") or {}).get("activeServiceStatus") or {}).get("rayClusterName")
        if not active:
            continue
        namespace = service["metadata"]["namespace"]
        cluster = kube.get_object(f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{active}")
        groups = (cluster.get("spec") or {}).get("workerGroupSpecs") or []
        return {g["groupName"]: int(g.get("replicas") or 0) for g in groups if g.get("groupName") in ROLES}
    return None


def start_replicas(config: StackConfig, pods: dict[str, int]) -> dict[str, int]:
    """Serve replicas per role for the next cluster: the live ones, inside min..max, lowered (the larger
    side first) until their nodes fit gpuNodes.maxSize next to the serving cluster at its maximum."""
    assert config.serving is not None
    gpus = GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type].gpus
    groups = config.serving.groups()
    counts = {
        role: max(g.min_replicas, min(g.max_replicas, pods.get(role, 0) * g.replicas_per_node(gpus)))
        for role, g in groups.items()
    }
    serving_at_max = sum(g.nodes(g.max_replicas, gpus) for g in groups.values())
    room = config.gpu_nodes.max_size - serving_at_max

    def nodes() -> int:
        return sum(groups[r].nodes(counts[r], gpus) for r in ROLES)

    while nodes() > room:
        above = [r for r in ROLES if counts[r] > groups[r].min_replicas]
        if not above:
            break  # at the minimum: what the config already allows
        role = max(above, key=lambda r: (groups[r].nodes(counts[r], gpus), r == "prefill"))
        counts[role] -= 1
    return counts


def write_counts(stack: str, root: Path, counts: dict[str, int]) -> str:
    """Pulumi.<stack>.yaml with serving.<role>.cutoverReplicas set (comments and layout kept), validated
    before it is written whole."""
    path = stack_file(stack, root)
    rt = YAML()
    rt.preserve_quotes = True
    rt.width = 4096
    doc = rt.load(read_regular_file(path, MAX_BYTES, "stack file").decode("utf-8", errors="replace"))
    serving = doc["config"].get("llm-pd-eks:serving")
    if serving is None:
        raise ToolError(Exit.USAGE, f"{path}: no llm-pd-eks:serving section, nothing to pre-scale")
    for role, count in counts.items():
        serving[role]["cutoverReplicas"] = count
    buffer = io.StringIO()
    rt.dump(doc, buffer)
    text = buffer.getvalue()
    try:
        validate_engine_config(*engine_config(yaml.safe_load(text).get("config") or {}))
    except ConfigError as error:
        raise ToolError(Exit.FAILED, one_line(f"nothing written: {'; '.join(error.problems)}")) from None
    atomic_write(path, text)
    return text


def read_live(stack: str, kubeconfig: Optional[str]) -> Optional[dict[str, int]]:
    deadline = Deadline(CLUSTER_TIMEOUT_S)
    text = read_kubeconfig(kubeconfig) if kubeconfig else kubeconfig_from_stack(stack, deadline.request_timeout())
    try:
        return live_worker_pods(KubeClient(load_kubeconfig(text, deadline), deadline))
    except (Unreachable, BadReply, HttpError, TimeoutError, KeyError, ValueError) as exc:
        raise ToolError(
            Exit.UNVERIFIED, f"the serving Ray cluster could not be read ({one_line(str(exc), 160)}); nothing written"
        ) from None


def main(argv: Optional[list[str]] = None, kube: Optional[Kube] = None, root: Path = ROOT) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.plan.cutover_replicas", description=__doc__.split("\n")[0])
    parser.add_argument("--stack", default="dev", help="stack name (Pulumi.<stack>.yaml)")
    parser.add_argument("--pulumi-stack", help="the backend's stack name for its kubeconfig output (default --stack)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: the stack's `kubeconfig` output)")
    parser.add_argument("--write", action="store_true", help="write serving.<role>.cutoverReplicas into the stack file")
    args = parser.parse_args(argv)
    try:
        config = stack_config(args.stack, root)
    except ConfigError as exc:
        raise ToolError(Exit.USAGE, f"Pulumi.{args.stack}.yaml: {'; '.join(exc.problems)}") from None
    if config.serving is None:
        print(f"cutover-replicas {args.stack}: no serving layer, nothing to pre-scale")
        return Exit.OK
    pods = live_worker_pods(kube) if kube is not None else read_live(args.pulumi_stack or args.stack, args.kubeconfig)
    if pods is None:
        print(f"cutover-replicas {args.stack}: no Ray cluster serves yet; a first cluster starts at minReplicas")
        return Exit.OK
    counts = start_replicas(config, pods)
    current = {role: config.serving.groups()[role].cutover_replicas for role in ROLES}
    shown = ", ".join(f"{role} {counts[role]} (live pods {pods.get(role, 0)})" for role in ROLES)
    if current == counts:
        print(f"cutover-replicas {args.stack}: {shown}; the stack file already says so")
        return Exit.OK
    if not args.write:
        print(f"cutover-replicas {args.stack}: the next Ray cluster would start with {shown}; --write sets it")
        return Exit.OK
    write_counts(args.stack, root, counts)
    print(f"cutover-replicas {args.stack}: wrote serving.<role>.cutoverReplicas: {shown}")
    return Exit.OK


__all__ = ["live_worker_pods", "main", "start_replicas", "write_counts"]

if __name__ == "__main__":
    exit_with("cutover-replicas", main)
