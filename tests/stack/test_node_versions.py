"""Versions move together: every node group names the Kubernetes version and the AMI release pinned for
it, the pins are the AMI release notes' own (a driver on the CUDA 13 branch), and a cluster minor
upgrade previews as one sequence: control plane, new node groups, the Ray cluster's cut-over."""

from __future__ import annotations

import re

import pytest
from helpers import DATA, LAUNCH_TEMPLATE, NODE_GROUP, config_problems, engine_config_with

from llm_pd_eks.config import PROJECT
from llm_pd_eks.versions import (
    CUDA_13_MIN_DRIVER_BRANCH,
    NODE_AMI_RELEASE,
    NODE_AMI_RELEASE_VERSIONS,
    NODE_NVIDIA_DRIVER,
)
from llm_pd_eks_tools.plan.cutover import plan_cutover
from llm_pd_eks_tools.plan.gpu_node_rollout import (
    BLUE_GREEN,
    SYSTEM_COMPONENT,
    classify_gpu_roll,
    classify_node_group_roll,
)
from llm_pd_eks_tools.plan.preview.harness import resource_records
from llm_pd_eks_tools.plan.preview.mockrun import run_program

NOTES = (DATA / "eks-ami" / "CHANGELOG-v20260714.md").read_text()


def release_notes() -> dict[str, tuple[str, str]]:
    """Kubernetes minor -> (release version, AL2023_x86_64_NVIDIA driver), read from the release notes."""
    out = {}
    for minor, body in re.findall(r"<b>Kubernetes (1\.\d+)</b>(.*?)</details>", NOTES, re.S):
        release = re.search(r'<td rowspan="5">(\d+\.\d+\.\d+-\d{8})</td>', body).group(1)
        # the first column of the package table is AL2023_x86_64_NVIDIA
        driver = re.search(r"<td>kmod-nvidia-latest-dkms</td>\s*<td[^>]*>([\d.]+)-", body).group(1)
        out[minor] = (release, driver)
    return out


def test_the_pins_are_the_release_notes_own():
    notes = release_notes()
    assert NOTES.startswith(f"# AMI Release {NODE_AMI_RELEASE}\n")
    assert {minor: release for minor, (release, _) in notes.items()} == NODE_AMI_RELEASE_VERSIONS
    assert {driver for _, driver in notes.values()} == {NODE_NVIDIA_DRIVER}
    assert int(NODE_NVIDIA_DRIVER.split(".")[0]) >= CUDA_13_MIN_DRIVER_BRANCH


def test_a_kubernetes_version_without_a_pinned_ami_is_refused():
    (problem,) = [
        p for p in config_problems({"cluster": {"kubernetesVersion": "1.29"}}) if p.startswith(f"{PROJECT}:cluster.")
    ]
    assert "1.29 has no EKS-optimized AL2023 AMI release pinned" in problem


@pytest.fixture(scope="module")
def upgrade() -> tuple[dict[str, dict], dict[str, dict]]:
    """prod on Kubernetes 1.34, then 1.35."""
    plans = []
    for version in ("1.34", "1.35"):
        run = run_program("prod", *engine_config_with("prod", "cluster", kubernetesVersion=version))
        plans.append({r["urn"]: r for r in resource_records(run)})
    return plans[0], plans[1]


def test_node_groups_name_version_release_and_their_template_version():
    run = run_program("prod", *engine_config_with("prod", "cluster", kubernetesVersion="1.34"))
    for group in ("system-nodes", "gpu-nodes"):
        inputs = run.one(NODE_GROUP, group).inputs
        assert (inputs["version"], inputs["releaseVersion"]) == ("1.34", NODE_AMI_RELEASE_VERSIONS["1.34"])
        # the template's registered version (its latestVersion output), never "$Latest"
        template = run.one(LAUNCH_TEMPLATE, group)
        assert inputs["launchTemplate"]["version"] == str(template.outputs["latestVersion"])


def test_a_minor_upgrade_previews_control_plane_then_a_cutover_of_both_groups(upgrade):
    before, after = upgrade
    system = classify_node_group_roll(before, after, SYSTEM_COMPONENT)
    gpu = classify_gpu_roll(before, after)
    assert system.kind == BLUE_GREEN and gpu.kind == BLUE_GREEN
    assert {"version", "releaseVersion"} <= set(gpu.reasons) and {"version", "releaseVersion"} <= set(system.reasons)
    plan = plan_cutover(before, after)
    control, system_step, gpu_step, placement, ray, delete, head = plan.steps
    assert placement.startswith("GPU placement: the new nodes launch into their own cluster placement group")
    assert control.startswith("Control plane: Kubernetes 1.34 → 1.35")
    assert system_step.startswith(f"System nodes: `{system.new_name}`")
    assert gpu_step.startswith(f"GPU nodes: `{gpu.new_name}`")
    assert "NewCluster" in ray
    assert delete == f"Pulumi deletes `{system.old_name}`, `{gpu.old_name}` at the end of `up` " + (
        "(no Ray worker of the serving cluster runs there any more)."
    )
    # the head selects system nodes by role: it restarts once the old system group goes, GCS FT carries it
    assert f"one still on `{system.old_name}` when it is deleted" in head and "GCS fault tolerance keeps" in head
    assert not plan.downtime
