"""The guard before `up`: a failed cut-over leaves the old, still-serving node group as a pending delete,
which the next `up` would run first. `check` refuses that `up`; `clear` writes a state without it.

The state is a `pulumi stack export` document (version 3: `deployment.resources` with `delete: true` on
a replaced resource, `deployment.pending_operations`), as a failed blue/green `up` leaves it: the new
GPU group created, the old one and its placement group pending delete. The cluster's answers are the
Kubernetes API's JSON for a RayService mid-upgrade (KubeRay v1.7.0: `status.activeServiceStatus` names
the serving RayCluster, `pendingServiceStatus` the one being built).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_pd_eks_tools.core.cli import Exit, ToolError
from llm_pd_eks_tools.gates import pending_deletes as guard

OLD, NEW = "llm-pd-eks-prod-gpu-084b8ef4", "llm-pd-eks-prod-gpu-83fd0e3f"
SYSTEM = "llm-pd-eks-prod-system-7489829a"
NG_URN = (
    "urn:pulumi:prod::llm-pd-eks::llm-pd-eks:index:Deployment$llm-pd-eks:index:EfaGpuNodeGroup"
    "$aws:eks/nodeGroup:NodeGroup::gpu-nodes-ng"
)
PG_URN = NG_URN.replace(
    "aws:eks/nodeGroup:NodeGroup::gpu-nodes-ng", "aws:ec2/placementGroup:PlacementGroup::gpu-nodes-pg"
)


def node_group(name: str, delete: bool = False) -> dict[str, Any]:
    record = {
        "urn": NG_URN,
        "type": guard.NODE_GROUP_TYPE,
        "custom": True,
        "id": f"llm-pd-eks-prod:{name}",
        "inputs": {"nodeGroupName": name},
        "outputs": {"nodeGroupName": name},
        "dependencies": [PG_URN],
    }
    return {**record, "delete": True} if delete else record


def placement_group(name: str, delete: bool = False) -> dict[str, Any]:
    record = {
        "urn": PG_URN,
        "type": guard.PLACEMENT_GROUP_TYPE,
        "custom": True,
        "id": name,
        "inputs": {"name": name, "strategy": "cluster"},
        "outputs": {"name": name},
    }
    return {**record, "delete": True} if delete else record


def export(*resources: dict[str, Any], pending_operations: list | None = None) -> dict[str, Any]:
    deployment: dict[str, Any] = {"manifest": {"time": "2026-12-07T03:00:00Z"}, "resources": list(resources)}
    if pending_operations is not None:
        deployment["pending_operations"] = pending_operations
    return {"version": 3, "deployment": deployment}


FAILED_CUTOVER = export(placement_group(NEW), node_group(NEW), placement_group(OLD, True), node_group(OLD, True))


class FakeKube:
    """The API server's answers, by path."""

    def __init__(self, active_workers_on: str, head_selector: str | None = None):
        self.objects: dict[str, Any] = {
            "/apis/ray.io/v1/rayservices": {
                "items": [
                    {
                        "metadata": {"name": "llm", "namespace": "llm"},
                        "status": {
                            "activeServiceStatus": {"rayClusterName": "llm-raycluster-old"},
                            "pendingServiceStatus": {"rayClusterName": "llm-raycluster-new"},
                        },
                    }
                ]
            },
            "/apis/ray.io/v1/namespaces/llm/rayclusters/llm-raycluster-old": {
                "spec": {
                    "headGroupSpec": {
                        "template": {
                            "spec": {
                                "nodeSelector": {
                                    "role": "system",
                                    **({"eks.amazonaws.com/nodegroup": head_selector} if head_selector else {}),
                                }
                            }
                        }
                    },
                    "workerGroupSpecs": [
                        {
                            "groupName": "decode",
                            "template": {
                                "spec": {
                                    "nodeSelector": {"role": "gpu", "eks.amazonaws.com/nodegroup": active_workers_on}
                                }
                            },
                        }
                    ],
                }
            },
            "/api/v1/namespaces/llm/pods": {
                "items": [{"metadata": {"name": "decode-0"}, "spec": {"nodeName": "ip-10-30-1-5"}}]
            },
            "/api/v1/nodes/ip-10-30-1-5": {"metadata": {"labels": {"eks.amazonaws.com/nodegroup": active_workers_on}}},
        }
        self.asked: list[str] = []

    def get_object(self, path: str, **query: str) -> dict[str, Any]:
        self.asked.append(path)
        return self.objects[path]

    def get_items(self, path: str, **query: str) -> list[dict[str, Any]]:
        return self.get_object(path, **query)["items"]


def run(tmp_path, state: dict, command: str = "check", kube=None, *extra: str) -> tuple[int, str]:
    path = tmp_path / "export.json"
    path.write_text(json.dumps(state))
    return guard.main([command, "--stack", "prod", "--state", str(path), *extra], kube=kube)


def test_the_failed_cutovers_pending_delete_is_found():
    assert guard.pending_node_group_deletes(FAILED_CUTOVER) == [guard.PendingDelete(OLD, NG_URN, "replaced")]


def test_up_is_refused_while_the_serving_cluster_runs_on_the_pending_delete(tmp_path, capsys):
    assert run(tmp_path, FAILED_CUTOVER, kube=FakeKube(active_workers_on=OLD)) == Exit.FAILED
    out = capsys.readouterr().out
    assert "REFUSED" in out and OLD in out and "llm/llm-raycluster-old's worker group decode selects it" in out
    assert "pending_deletes clear" in out


def test_a_pending_delete_nothing_serves_on_lets_up_run(tmp_path, capsys):
    # the cut-over had switched before `up` failed: the active cluster is on the new group
    assert run(tmp_path, FAILED_CUTOVER, kube=FakeKube(active_workers_on=NEW)) == Exit.OK
    assert "no active Ray cluster uses it" in capsys.readouterr().out


def test_an_interrupted_delete_counts_too(tmp_path):
    state = export(
        placement_group(NEW), node_group(NEW), pending_operations=[{"resource": node_group(OLD), "type": "deleting"}]
    )
    assert guard.pending_node_group_deletes(state)[0].how == "interrupted delete"
    assert run(tmp_path, state, kube=FakeKube(active_workers_on=OLD)) == Exit.FAILED


def test_nothing_pending_needs_no_cluster(tmp_path, capsys):
    kube = FakeKube(active_workers_on=OLD)
    assert run(tmp_path, export(placement_group(NEW), node_group(NEW)), kube=kube) == Exit.OK
    assert kube.asked == [] and "no node group is pending delete" in capsys.readouterr().out


def test_an_unreadable_cluster_fails_closed(tmp_path, monkeypatch):
    def unreachable(stack, kubeconfig):
        raise ToolError(Exit.UNVERIFIED, "the cluster's Ray clusters could not be read")

    monkeypatch.setattr(guard, "live_groups_in_use", unreachable)
    with pytest.raises(ToolError) as info:
        run(tmp_path, FAILED_CUTOVER)
    assert info.value.exit_code == Exit.UNVERIFIED


def test_clear_removes_the_serving_groups_pending_deletes_and_then_up_may_run(tmp_path, capsys):
    kube = FakeKube(active_workers_on=OLD)
    out = tmp_path / "cleared.json"
    assert run(tmp_path, FAILED_CUTOVER, "clear", kube, "--out", str(out)) == Exit.OK
    cleared = json.loads(out.read_text())
    kept = [
        (r["type"], r["outputs"].get("nodeGroupName") or r["outputs"]["name"], r.get("delete", False))
        for r in cleared["deployment"]["resources"]
    ]
    assert kept == [(guard.PLACEMENT_GROUP_TYPE, NEW, False), (guard.NODE_GROUP_TYPE, NEW, False)]
    retired = json.loads(out.with_suffix(".retired.json").read_text())
    assert {(r["type"], r["name"]) for r in retired} == {
        (guard.NODE_GROUP_TYPE, OLD),
        (guard.PLACEMENT_GROUP_TYPE, OLD),
    }
    assert "pulumi stack import --stack prod --file" in capsys.readouterr().out
    # the imported state no longer deletes the serving group first
    out_path = tmp_path / "export.json"
    out_path.write_text(out.read_text())
    assert guard.main(["check", "--stack", "prod", "--state", str(out_path)], kube=kube) == Exit.OK


def test_clear_needs_an_output_file(tmp_path):
    with pytest.raises(ToolError) as info:
        run(tmp_path, FAILED_CUTOVER, "clear", FakeKube(active_workers_on=OLD))
    assert info.value.exit_code == Exit.USAGE and "--out" in str(info.value)


def test_a_file_that_is_not_an_export_is_one_clear_line(tmp_path):
    with pytest.raises(ToolError) as info:
        run(tmp_path, {"resources": []})
    assert info.value.exit_code == Exit.USAGE and "pulumi stack export" in str(info.value)


def fake_pulumi(tmp_path, monkeypatch, stdout: str, stderr: str, code: int) -> None:
    """A `pulumi` on PATH that answers `stack export` as the CLI does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "out.json").write_text(stdout)
    (bin_dir / "pulumi").write_text(f"#!/bin/sh\ncat '{bin_dir / 'out.json'}'\necho '{stderr}' >&2\nexit {code}\n")
    (bin_dir / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_the_state_is_exported_with_the_pulumi_cli(tmp_path, monkeypatch, capsys):
    fake_pulumi(tmp_path, monkeypatch, json.dumps(FAILED_CUTOVER), "", 0)
    assert guard.main(["check", "--stack", "acme/prod"], kube=FakeKube(active_workers_on=OLD)) == Exit.FAILED
    assert "REFUSED" in capsys.readouterr().out


def test_a_first_up_has_no_state_and_may_run(tmp_path, monkeypatch, capsys):
    fake_pulumi(tmp_path, monkeypatch, "", "error: no stack named 'acme/prod' found", 255)
    assert guard.main(["check", "--stack", "acme/prod"], kube=FakeKube(active_workers_on=OLD)) == Exit.OK
    assert "no node group is pending delete" in capsys.readouterr().out


def test_a_backend_that_does_not_answer_is_unverified(tmp_path, monkeypatch):
    fake_pulumi(tmp_path, monkeypatch, "", "error: could not reach the backend", 255)
    with pytest.raises(ToolError) as info:
        guard.main(["check", "--stack", "acme/prod"], kube=FakeKube(active_workers_on=OLD))
    assert info.value.exit_code == Exit.UNVERIFIED and "could not reach the backend" in str(info.value)
