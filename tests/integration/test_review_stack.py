"""Review stacks: a PR's real, short-lived stack with the serving layer off, priced before it exists."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from helpers import NODE_GROUP, RAY_SERVICE, ROOT, config_problems, copy_checkout

from llm_pd_eks.deployment import TYPE
from llm_pd_eks_tools.plan.preview.analyzer import mandatory, run_resources
from llm_pd_eks_tools.plan.preview.mockrun import run_program


@pytest.fixture(scope="module")
def review(tmp_path_factory):
    """A checkout copy with Pulumi.pr-7.yaml written by the tool, its stdout and GITHUB_OUTPUT."""
    root = copy_checkout(tmp_path_factory.mktemp("review") / "repo")
    out = root / "gh-output"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_pd_eks_tools.ops.review_stack",
            "--from",
            "dev",
            "--pr",
            "7",
            "--ttl-hours",
            "12",
            "--github-output",
            str(out),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
    return root, done.stdout, outputs, run_program("pr-7", root=root)


def test_the_review_stack_is_the_cpu_layers_only(review):
    _root, _stdout, _outputs, run = review
    types = {r.type for r in run.resources}
    assert RAY_SERVICE not in types
    (node_group,) = run.of_type(NODE_GROUP)
    assert node_group.name.startswith("system-nodes")
    assert not any("gpu" in r.name or "kuberay" in r.name or "device-plugins" in r.name for r in run.resources)
    names = {r.name for r in run.resources}
    assert {"network", "cluster", "system-nodes", "core-addons"} <= names
    (top,) = [r for r in run.resources if r.parent not in {x.urn for x in run.resources}]
    assert top.type == TYPE
    assert not any(r.protect for r in run.resources)  # its time-to-live must be able to destroy it
    assert "endpoint" not in run.stack_outputs


def test_the_review_stack_passes_the_policy_pack(review):
    from policy_fixtures import pack

    _root, _stdout, _outputs, run = review
    verdicts = pack().analyze_all(run_resources(run))
    assert mandatory(verdicts) == []


def test_its_cost_is_the_cpu_nodes_nat_and_control_plane(review):
    """Worked out here from the price table and dev's stack file, not from the tool."""
    root, stdout, outputs, _run = review
    prices = json.loads((ROOT / "llm_pd_eks" / "data" / "prices.json").read_text())["regions"]["us-west-2"]
    dev = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    system = dev["llm-pd-eks:systemNodes"]
    nat = {"single": 1}[dev["llm-pd-eks:network"]["natGateways"]]
    hourly = (
        system["desiredSize"] * prices["instances"][system["instanceType"]]
        + nat * prices["nat_gateway_hour"]
        + prices["eks_cluster_hour"]
    )
    assert outputs["hourly"] == f"{hourly:.2f}"
    assert outputs["stack"] == "pr-7" and outputs["expires-at"].endswith("Z")
    assert f"${hourly:.2f}/h" in stdout and "EKS control plane" in stdout and "NAT gateway" in stdout
    written = yaml.safe_load((root / "Pulumi.pr-7.yaml").read_text())["config"]
    assert written["llm-pd-eks:servingLayer"] is False and "llm-pd-eks:serving" not in written


def test_serving_without_the_serving_layer_is_refused():
    dev = {
        k.split(":", 1)[1]: v
        for k, v in yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"].items()
        if k.startswith("llm-pd-eks:")
    }
    problems = config_problems({**dev, "servingLayer": False})
    assert any("servingLayer: false, but `serving` is set" in p for p in problems), problems


@pytest.mark.parametrize(
    "args, complaint", [(["--pr", "0"], "--pr 0"), (["--pr", "3", "--ttl-hours", "999"], "--ttl-hours 999")]
)
def test_bad_arguments_exit_2_with_one_line(args, complaint, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.ops.review_stack", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and complaint in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not list(ROOT.glob("Pulumi.pr-*.yaml"))


def test_review_stack_files_are_not_checked_in():
    assert "Pulumi.pr-*.yaml" in (ROOT / ".gitignore").read_text().splitlines()
