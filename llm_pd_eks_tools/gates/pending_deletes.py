"""Refuse `pulumi up` while the state would delete a node group the serving Ray cluster still runs on.

A node change replaces a node group (llm_pd_eks/node_common.py `keyed_node_group_name`): Pulumi creates
the new group, KubeRay moves the Ray cluster onto it, and the old group is deleted at the end of `up`.
When `up` fails after the new group exists (the new Ray cluster never serves, a timeout, a cancelled
CI job), the old group, still serving, stays in the state as a pending delete (`"delete": true` in
`pulumi stack export`), and Pulumi runs pending deletes FIRST on the next `up` (pulumi/pulumi#9979,
"completing deletion from previous update"): a fix-forward, a revert or a re-run would take serving
down before anything else happens. An interrupted delete (`pending_operations`, type `deleting`) is
the same risk.

    python -m llm_pd_eks_tools.gates.pending_deletes check --stack prod [--state export.json] [--kubeconfig PATH]
    python -m llm_pd_eks_tools.gates.pending_deletes clear --stack prod --state export.json --out cleared.json

`check` (run before every `up`: `make up-guard`, the deploy workflow) reads the state and, only when it
holds a pending delete of a node group, the live cluster: the active Ray cluster of each RayService
(`status.activeServiceStatus.rayClusterName`), the node groups its pods select by name
(`eks.amazonaws.com/nodegroup`) and those its GPU workers run on. Exit 0: nothing pending, or nothing
pending that the active cluster uses; 1 (FAILED): a pending delete the active cluster uses; 5
(UNVERIFIED): a node group is pending delete and the cluster could not be read (fail closed); 2 bad input.

`clear` writes a copy of the export without those pending deletes (and without the pending delete of
the cluster placement group named like each group), for `pulumi stack import`, and a record of what
was taken out of the state: the next `up` then completes the cut-over first, and the retired groups are
deleted by hand once nothing serves on them (docs/day-two.md, "A cut-over that failed half-way").
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

from llm_pd_eks.gpu_cutover import NODE_GROUP_LABEL
from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, exit_with, one_line
from llm_pd_eks_tools.core.io_safety import atomic_write, read_regular_file
from llm_pd_eks_tools.core.process_safety import run_process
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

NODE_GROUP_TYPE = "aws:eks/nodeGroup:NodeGroup"
PLACEMENT_GROUP_TYPE = "aws:ec2/placementGroup:PlacementGroup"
MAX_STATE_BYTES = 256 * 2**20  # a stack export is a few MB
STATE_TIMEOUT_S = 120.0
CLUSTER_TIMEOUT_S = 60.0
RAY_WORKER = {"ray.io/node-type": "worker"}


@dataclass(frozen=True)
class PendingDelete:
    """A node group the state will delete when the next `up` starts."""

    node_group: str  # its EKS name
    urn: str
    how: str  # "replaced" (`delete: true`) or "interrupted delete" (`pending_operations`)


def _node_group_name(resource: dict[str, Any]) -> Optional[str]:
    for side in ("outputs", "inputs"):
        name = (resource.get(side) or {}).get("nodeGroupName")
        if isinstance(name, str) and name:
            return name
    return None


def _deployment(export: Any) -> dict[str, Any]:
    deployment = export.get("deployment") if isinstance(export, dict) else None
    if not isinstance(deployment, dict):
        raise ToolError(Exit.USAGE, "not a `pulumi stack export` document: it has no `deployment` object")
    return deployment


def pending_node_group_deletes(export: Any) -> list[PendingDelete]:
    """Node groups the state holds as pending deletes, from `pulumi stack export`'s JSON."""
    deployment = _deployment(export)
    found: list[PendingDelete] = []
    for resource in deployment.get("resources") or []:
        if resource.get("type") == NODE_GROUP_TYPE and resource.get("delete") is True:
            name = _node_group_name(resource)
            if name:
                found.append(PendingDelete(name, resource.get("urn", ""), "replaced"))
    for operation in deployment.get("pending_operations") or []:
        resource = operation.get("resource") or {}
        if resource.get("type") == NODE_GROUP_TYPE and operation.get("type") == "deleting":
            name = _node_group_name(resource)
            if name:
                found.append(PendingDelete(name, resource.get("urn", ""), "interrupted delete"))
    return found


class Kube(Protocol):
    """The Kubernetes reads `groups_in_use` makes (llm_pd_eks_tools/ops/verify/kube.py `KubeClient`)."""

    def get_items(self, path: str, **query: str) -> list[dict[str, Any]]: ...

    def get_object(self, path: str, **query: str) -> dict[str, Any]: ...


def _selected_groups(spec: dict[str, Any]) -> dict[str, str]:
    """Node group name -> which pod group of a RayCluster spec selects it by name."""
    out: dict[str, str] = {}
    groups = [("head", spec.get("headGroupSpec") or {})]
    groups += [(f"worker group {g.get('groupName', '?')}", g) for g in spec.get("workerGroupSpecs") or []]
    for what, group in groups:
        selector = (((group.get("template") or {}).get("spec") or {}).get("nodeSelector")) or {}
        if selector.get(NODE_GROUP_LABEL):
            out[selector[NODE_GROUP_LABEL]] = what
    return out


def groups_in_use(kube: Kube) -> dict[str, str]:
    """Node group name -> why the active Ray cluster of some RayService needs it (selected by name, or
    running its GPU workers)."""
    used: dict[str, str] = {}
    for service in kube.get_items("/apis/ray.io/v1/rayservices"):
        namespace = service["metadata"]["namespace"]
        active = ((service.get("status") or {}).get("activeServiceStatus") or {}).get("rayClusterName")
        if not active:
            continue
        cluster = kube.get_object(f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{active}")
        for group, what in _selected_groups(cluster.get("spec") or {}).items():
            used.setdefault(group, f"{namespace}/{active}'s {what} selects it")
        workers = kube.get_items(
            f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"ray.io/cluster={active},ray.io/node-type=worker"
        )
        for pod in workers:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node:
                continue
            labels = (kube.get_object(f"/api/v1/nodes/{node}").get("metadata") or {}).get("labels") or {}
            if labels.get(NODE_GROUP_LABEL):
                used.setdefault(
                    labels[NODE_GROUP_LABEL], f"{namespace}/{active}'s worker {pod['metadata']['name']} runs there"
                )
    return used


def blocking(pending: list[PendingDelete], used: dict[str, str]) -> list[str]:
    """One line per pending delete the active Ray cluster still uses."""
    return [f"{p.node_group} ({p.how}): {used[p.node_group]}" for p in pending if p.node_group in used]


def cleared_state(export: dict[str, Any], groups: set[str]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """(the export without the pending deletes of `groups` and their placement groups, what was removed)."""
    out = json.loads(json.dumps(export))
    deployment = _deployment(out)
    removed: list[dict[str, str]] = []

    def retired(resource: dict[str, Any]) -> Optional[str]:
        """The retired group's name when `resource` is its node group or its own placement group."""
        if resource.get("type") == NODE_GROUP_TYPE and _node_group_name(resource) in groups:
            return _node_group_name(resource)
        name = (resource.get("outputs") or {}).get("name") or (resource.get("inputs") or {}).get("name")
        if resource.get("type") == PLACEMENT_GROUP_TYPE and name in groups:
            return str(name)
        return None

    kept = []
    for resource in deployment.get("resources") or []:
        group = retired(resource) if resource.get("delete") is True else None
        if group:
            removed.append({"type": resource["type"], "name": group, "urn": resource.get("urn", "")})
        else:
            kept.append(resource)
    deployment["resources"] = kept
    operations = []
    for operation in deployment.get("pending_operations") or []:
        group = retired(operation.get("resource") or {}) if operation.get("type") == "deleting" else None
        if group:
            removed.append(
                {"type": operation["resource"]["type"], "name": group, "urn": operation["resource"].get("urn", "")}
            )
        else:
            operations.append(operation)
    if "pending_operations" in deployment:
        deployment["pending_operations"] = operations
    return out, removed


# --- reading the state and the cluster ------------------------------------------------------------


def read_state(path: Optional[str], stack: str) -> dict[str, Any]:
    """The stack export: from `path`, else `pulumi stack export --stack <stack>`."""
    if path:
        text = read_regular_file(path, MAX_STATE_BYTES, "state export").decode("utf-8", errors="replace")
        where = path
    else:
        command = ["pulumi", "stack", "export", "--stack", stack]
        try:
            result = run_process(command, STATE_TIMEOUT_S)
        except FileNotFoundError:
            raise ToolError(Exit.USAGE, "no --state given and no `pulumi` CLI to export the stack's state") from None
        except subprocess.TimeoutExpired:
            raise ToolError(
                Exit.UNVERIFIED, f"`{' '.join(command)}` did not answer in {STATE_TIMEOUT_S:.0f}s"
            ) from None
        if result.returncode != 0 and "no stack named" in result.stderr:
            return {"version": 3, "deployment": {"resources": []}}  # a first `up`: no state, nothing pending
        if result.returncode != 0:
            raise ToolError(Exit.UNVERIFIED, f"`{' '.join(command)}` failed: {one_line(result.stderr)}")
        text, where = result.stdout, "`pulumi stack export`"
    try:
        export = json.loads(text)
    except ValueError as exc:
        raise ToolError(Exit.USAGE, f"{where} is not JSON ({exc}); give the output of `pulumi stack export`") from None
    _deployment(export)
    return export


def live_groups_in_use(stack: str, kubeconfig: Optional[str]) -> dict[str, str]:
    """`groups_in_use` against the stack's cluster; UNVERIFIED when it cannot be read."""
    deadline = Deadline(CLUSTER_TIMEOUT_S)
    text = read_kubeconfig(kubeconfig) if kubeconfig else kubeconfig_from_stack(stack, deadline.request_timeout())
    try:
        return groups_in_use(KubeClient(load_kubeconfig(text, deadline), deadline))
    except (Unreachable, BadReply, HttpError, TimeoutError, KeyError) as exc:
        raise ToolError(
            Exit.UNVERIFIED,
            "a node group is pending delete and the cluster's Ray clusters could not be read "
            f"({one_line(str(exc), 160)}); do not run `up` until `check` can tell whether the serving "
            "cluster still runs there",
        ) from None


# --- CLI --------------------------------------------------------------------------------------------


def main(argv: Optional[list[str]] = None, kube: Optional[Kube] = None) -> int:
    """CLI entry; `kube` injects the Kubernetes reads (tests), else the stack's kubeconfig is used."""
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.gates.pending_deletes", description=__doc__.split("\n")[0])
    parser.add_argument(
        "command",
        choices=["check", "clear"],
        help="check: may `up` run? clear: write a state without the pending deletes the serving cluster uses",
    )
    parser.add_argument(
        "--stack", default="dev", help="stack name (`pulumi stack export --stack`, the kubeconfig output)"
    )
    parser.add_argument("--state", help="a saved `pulumi stack export` (default: export it now)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: the stack's `kubeconfig` output)")
    parser.add_argument("--out", help="clear: where to write the state to import (`pulumi stack import --file`)")
    args = parser.parse_args(argv)
    if args.command == "clear" and not args.out:
        raise ToolError(
            Exit.USAGE, "clear needs --out FILE: the state to import with `pulumi stack import --file FILE`"
        )

    export = read_state(args.state, args.stack)
    pending = pending_node_group_deletes(export)
    if not pending:
        print(f"pending-deletes {args.stack}: no node group is pending delete; `up` may run")
        return Exit.OK
    used = groups_in_use(kube) if kube is not None else live_groups_in_use(args.stack, args.kubeconfig)
    blocked = blocking(pending, used)
    if args.command == "check":
        if not blocked:
            names = ", ".join(p.node_group for p in pending)
            print(f"pending-deletes {args.stack}: {names} pending delete, no active Ray cluster uses it; `up` may run")
            return Exit.OK
        print(f"pending-deletes {args.stack}: REFUSED, the next `up` would first delete what serves:")
        for line in blocked:
            print(f"  {line}")
        print(
            "  clear it: python -m llm_pd_eks_tools.gates.pending_deletes clear --stack "
            f"{args.stack} --out cleared.json, then `pulumi stack import --file cleared.json` (docs/day-two.md)"
        )
        return Exit.FAILED
    if not blocked:
        print(f"pending-deletes {args.stack}: nothing to clear, no active Ray cluster uses a pending delete")
        return Exit.OK
    cleared, removed = cleared_state(export, {p.node_group for p in pending if p.node_group in used})
    out = Path(args.out)
    try:
        atomic_write(out, json.dumps(cleared, indent=2) + "\n")
        atomic_write(out.with_suffix(".retired.json"), json.dumps(removed, indent=2) + "\n")
    except OSError as exc:
        raise ToolError(Exit.IOERR, f"cannot write {out}: {exc.strerror}") from None
    print(f"pending-deletes {args.stack}: wrote {out} without {len(removed)} pending delete(s):")
    for item in removed:
        print(f"  {item['type']} {item['name']}")
    print(
        f"  next: pulumi stack import --stack {args.stack} --file {out}; then `up` completes the cut-over; the "
        f"retired resources ({out.with_suffix('.retired.json')}) are no longer managed: delete them once "
        "nothing serves there (docs/day-two.md)"
    )
    return Exit.OK


if __name__ == "__main__":
    exit_with("pending-deletes", main)
