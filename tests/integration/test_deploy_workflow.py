"""The deploy workflow refuses placeholder stacks and runs `pulumi up` on the runner the stack needs."""

from __future__ import annotations

import yaml
from helpers import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"


def workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def test_up_waits_for_the_placeholder_gate_and_uses_its_runner():
    wf = workflow("pulumi-up.yml")
    inputs = wf[True]["workflow_call"]["inputs"]  # YAML 1.1 reads `on:` as True
    assert inputs["runner"]["type"] == "string" and inputs["runner"]["required"] is False
    gate, up = wf["jobs"]["gate"], wf["jobs"]["up"]
    assert up["needs"] == "gate"
    assert up["runs-on"] == "${{ needs.gate.outputs.runner }}"
    (check,) = [s for s in gate["steps"] if s.get("id") == "check"]
    assert 'python -m llm_pd_eks_tools.gates.placeholders --stack "$STACK" --runner "$RUNNER"' in check["run"]
    assert '--github-output "$GITHUB_OUTPUT"' in check["run"]
    assert check["env"] == {"STACK": "${{ inputs.stack }}", "RUNNER": "${{ inputs.runner }}"}
    assert gate["outputs"]["runner"] == "${{ steps.check.outputs.runner }}"
    # the gate has no cloud access: it judges the checked-out stack file only
    assert "permissions" not in gate and not any("aws-actions" in s.get("uses", "") for s in gate["steps"])


def test_every_stage_passes_its_runner_variable():
    jobs = workflow("deploy.yml")["jobs"]
    for stage in ("dev", "staging", "prod"):
        assert jobs[stage]["with"]["runner"] == f"${{{{ vars.DEPLOY_RUNNER_{stage.upper()} }}}}"


def test_per_environment_keys_of_this_issue_do_not_block_promotion():
    from llm_pd_eks_tools.gates.promote_check import classify

    p = "llm-pd-eks"
    for key in (
        f"{p}:gpuNodes.capacity.reservationId",
        f"{p}:gpuNodes.capacity",
        f"{p}:deploy.runnerLabel",
        f"{p}:gpuNodes.rootVolumeIops",
        f"{p}:systemNodes.rootVolumeThroughputMibps",
    ):
        assert classify(key) != classify(f"{p}:nodeAutoscaler.chartVersion"), key
    # chart and image pins still must be promoted unchanged
    assert classify(f"{p}:nodeAutoscaler.chartVersion") == classify(f"{p}:devicePlugins.efaChartVersion")


def test_a_preview_that_could_not_refresh_says_so(tmp_path):
    """The preview summary step, run as the runner would: without refresh it states why, in the job
    summary and as a warning annotation; with refresh it does not."""
    import os
    import subprocess

    preview = workflow("pulumi-preview.yml")["jobs"]["preview"]
    (step,) = [s for s in preview["steps"] if s.get("name") == "Preview summary"]
    assert step["env"]["REFRESH"] == "${{ needs.plan.outputs.refresh }}"
    (action,) = [s for s in preview["steps"] if s.get("uses", "").startswith("pulumi/actions@")]
    assert action["with"]["refresh"] == "${{ needs.plan.outputs.refresh == 'true' }}"
    for refresh in ("false", "true"):
        summary = tmp_path / f"summary-{refresh}.md"
        env = {
            **os.environ,
            "STACK": "prod",
            "GITHUB_SHA": "abc123",
            "REFRESH": refresh,
            "NOTE": "the API endpoint admits only cluster.publicAccessCidrs (198.18.0.0/15)",
            "OUTPUT": "Previewing update (prod)\n  ~ 1 to update",
            "GITHUB_STEP_SUMMARY": str(summary),
        }
        done = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        text = summary.read_text()
        assert "## pulumi preview of prod at abc123" in text and "~ 1 to update" in text
        stated = "Not refreshed: the API endpoint admits only" in text
        assert stated is (refresh == "false")
        assert ("::warning::prod: preview not refreshed" in done.stdout) is (refresh == "false")
