"""The preview diff: comparing two previews, and end to end against a temporary git repository."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import copy_checkout

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.prices import load_prices
from llm_pd_eks_tools.core.cli import ToolError
from llm_pd_eks_tools.plan.preview.diff import Side, changed_paths, compare, cost_delta, preview_diff, render
from llm_pd_eks_tools.plan.preview.report import (
    CostFigure,
    CostLine,
    Figures,
    KvTransferFigure,
    PackInfo,
    Report,
    VerdictRecord,
)


# -- comparing -----------------------------------------------------------------------------------
def test_changed_paths_reports_leaves():
    old = {"a": 1, "b": {"c": [1, 2], "d": "x"}, "gone": True, "vpc.amazonaws.com/efa": "1"}
    new = {"a": 1, "b": {"c": [1, 3, 4], "d": "x"}, "new": 5, "vpc.amazonaws.com/efa": "2"}
    assert changed_paths(old, new) == [
        ("b.c[1]", 2, 3),
        ("b.c[2]", None, 4),
        ("gone", True, None),
        ("new", None, 5),
        ('["vpc.amazonaws.com/efa"]', "1", "2"),
    ]
    assert changed_paths({"x": [1]}, {"x": [1]}) == []


def _rec(name: str, **inputs) -> dict:
    return {
        "urn": f"urn:pulumi:dev::p::t::{name}",
        "type": "aws:x/y:Y",
        "name": name,
        "parent": "",
        "protect": False,
        "provider": "",
        "dependencies": [],
        "property_dependencies": {},
        "inputs": inputs,
    }


def _side(records: list[dict], verdicts: list[VerdictRecord], hourly: float) -> Side:
    cost = CostFigure(
        region="xx-test-1",
        lines=[CostLine(item="x", quantity=1, unit_hourly=hourly, hourly=hourly)],
        hourly=hourly,
        monthly=hourly * 730,
        missing=[],
        at_max_size_hourly=hourly,
        prices_as_of="test",
        currency="USD",
        hours_per_month=730,
    )
    figures = Figures(
        region="xx-test-1",
        node_groups=[],
        nat_gateways=0,
        eks_clusters=1,
        cost=cost,
        kv_transfer=KvTransferFigure(status="n/a", reason="test"),
    )
    report = Report(
        stack="dev",
        region="xx-test-1",
        pack=PackInfo(status="ran", name="p", version="0", policies=1),
        verdicts=verdicts,
        figures=figures,
        resource_count=len(records),
        stack_outputs={},
    )
    return Side("s", Path("."), 0, "", {r["urn"]: r for r in records}, report)


def test_compare_finds_added_removed_changed_and_verdicts():
    verdict = VerdictRecord(policy="p", enforcement="mandatory", urn="urn:pulumi:dev::p::t::kept", message="m")
    base = _side([_rec("kept", size=1), _rec("old")], [verdict], hourly=1.0)
    head = _side([_rec("kept", size=2), _rec("fresh")], [], hourly=1.5)
    diff = compare("dev", base, head)
    assert [r["name"] for r in diff.added] == ["fresh"]
    assert [r["name"] for r in diff.removed] == ["old"]
    assert [(r["name"], paths) for r, paths in diff.changed] == [("kept", [("inputs.size", 1, 2)])]
    assert diff.verdicts_gone == [verdict] and diff.verdicts_new == []
    # 1.5 - 1.0 = +0.50 per hour; x 730 = +365.00 per month.
    assert cost_delta(diff) == pytest.approx((0.5, 365.0))
    text = render(diff)
    assert "**1 to add, 1 to change, 1 to remove; 0 new policy verdict(s), 1 resolved.**" in text
    assert "+$0.50/hour, +$365.00/month" in text
    assert "| Policy verdicts | 1 | 0 **(changed)** |" in text
    assert "- resolved mandatory `p` on `kept`" in text


# -- end to end ----------------------------------------------------------------------------------
def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A git repository holding a copy of the program; the working tree then changes Pulumi.dev.yaml."""
    root = tmp_path_factory.mktemp("diff") / "repo"
    copy_checkout(root)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    stack = yaml.safe_load((root / "Pulumi.dev.yaml").read_text())
    cfg = stack["config"]
    assert cfg["llm-pd-eks:gpuNodes"]["instanceType"] == "p4d.24xlarge"
    assert cfg["llm-pd-eks:network"]["natGateways"] == "single"
    cfg["llm-pd-eks:gpuNodes"]["instanceType"] = "p5.48xlarge"
    cfg["llm-pd-eks:network"]["natGateways"] = "perAz"
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(stack))
    (root / "Pulumi.qa.yaml").write_text(yaml.safe_dump(stack))  # a stack the base does not have
    return root


def test_diff_of_a_config_change(repo):
    diff, code = preview_diff("HEAD", "dev", root=repo, progress=lambda _m: None)
    assert code == 0
    azs = yaml.safe_load((repo / "Pulumi.dev.yaml").read_text())["config"]["llm-pd-eks:network"]["availabilityZones"]
    # perAz: one more NAT gateway (and its EIP) for the second AZ.
    added = {(r["type"], r["name"]) for r in diff.added}
    assert ("aws:ec2/natGateway:NatGateway", f"network-nat-{azs[1]}") in added
    assert ("aws:ec2/eip:Eip", f"network-nat-eip-{azs[1]}") in added
    assert not diff.removed
    changed = {r["name"]: paths for r, paths in diff.changed}
    assert ("inputs.instanceType", "p4d.24xlarge", "p5.48xlarge") in changed["gpu-nodes-lt"]
    # Cost: 2 GPU nodes move from p4d.24xlarge to p5.48xlarge, plus one NAT gateway:
    # 2 x (p[p5] - p[p4d]) + p[NAT] per hour (us-west-2 table), x 730 per month.
    table = load_prices().regions["us-west-2"]
    hourly = 2 * (table["instances"]["p5.48xlarge"] - table["instances"]["p4d.24xlarge"]) + table["nat_gateway_hour"]
    assert cost_delta(diff) == pytest.approx((hourly, hourly * 730))
    text = (repo / "build" / "preview-diff" / "dev" / "diff.md").read_text()
    assert text == render(diff)
    efa = (GPU_INSTANCE_TYPES["p4d.24xlarge"].efa_interfaces, GPU_INSTANCE_TYPES["p5.48xlarge"].efa_interfaces)
    assert f"| EFA interfaces per GPU node | {efa[0]} | {efa[1]} **(changed)** |" in text
    assert "`inputs.instanceType`: `p4d.24xlarge` → `p5.48xlarge`" in text
    # A100 -> H100: the Ray cluster changes (accelerator type, pods), so the RayService is replaced (Recreate)
    assert "**Roll-out:** RayService: Ray cluster replacement" in text and "endpoint is down" in text
    # The temporary worktree is gone again.
    assert len(_git(repo, "worktree", "list").splitlines()) == 1
    # Both sides' report.json read back through the Report model.
    head = Report.read(repo / "build" / "preview-diff" / "dev" / "head" / "report.json")
    base = Report.read(repo / "build" / "preview-diff" / "dev" / "base" / "report.json")
    assert (base.figures.gpu.instance_type, head.figures.gpu.instance_type) == ("p4d.24xlarge", "p5.48xlarge")
    assert diff.head_report == head and diff.base_report == base


def test_a_stack_new_in_the_working_tree_counts_as_added(repo):
    diff, code = preview_diff("HEAD", "qa", root=repo, progress=lambda _m: None)
    assert code == 0
    assert diff.notes and "could not be previewed" in diff.notes[0] and "Pulumi.qa.yaml" in diff.notes[0]
    assert not diff.removed and not diff.changed
    assert (
        len(diff.added) == json.loads((repo / "build/preview-diff/qa/head/report.json").read_text())["resource_count"]
    )


def test_unknown_base_is_refused(repo):
    with pytest.raises(ToolError) as error:
        preview_diff("no-such-rev", "dev", root=repo, progress=lambda _m: None)
    assert error.value.exit_code == 2 and "no-such-rev" in str(error.value)


def test_the_entry_point_refuses_an_unknown_base_in_one_line():
    import sys

    from helpers import ROOT

    done = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.plan.preview.diff", "--base", "no-such-rev"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"preview-diff: BASE='no-such-rev' is not a commit of the repository at {ROOT}"


def test_a_failing_working_tree_preview_is_one_line(repo, capsys):
    from llm_pd_eks_tools.core.cli import Exit, run
    from llm_pd_eks_tools.plan.preview.diff import main

    text = (repo / "Pulumi.qa.yaml").read_text()
    (repo / "Pulumi.broken.yaml").write_text(text.replace("p5.48xlarge", "p9.nosuch"))
    try:
        code = run("preview-diff", main, ["--base", "HEAD", "--stack", "broken", "--root", str(repo)])
    finally:
        (repo / "Pulumi.broken.yaml").unlink()
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[preview-diff]")]
    assert code == Exit.USAGE and len(err) == 1, err
    assert err[0].startswith("preview-diff: the working tree's preview failed: ") and "p9.nosuch" in err[0]


def test_a_stack_starting_with_a_dash_stays_a_stack_name(repo, capsys):
    from llm_pd_eks_tools.core.cli import Exit, run
    from llm_pd_eks_tools.plan.preview.diff import main

    (repo / "Pulumi.-canary.yaml").write_text((repo / "Pulumi.qa.yaml").read_text())
    try:
        code = run("preview-diff", main, ["--base", "HEAD", "--stack=-canary", "--root", str(repo)])
    finally:
        (repo / "Pulumi.-canary.yaml").unlink()
    capsys.readouterr()
    assert code == Exit.OK
    head = json.loads((repo / "build/preview-diff/-canary/head/report.json").read_text())
    assert head["stack"] == "-canary"
