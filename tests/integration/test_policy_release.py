"""The policy pack published and enforced: one version, per-stack configs valid for the pack, and the
workflows that publish it and pass each stack its config."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from helpers import ROOT, STACKS
from policy_fixtures import pack

from llm_pd_eks_tools.plan.preview.analyzer import mandatory, run_resources

WORKFLOWS = ROOT / ".github" / "workflows"
CONFIGS = ROOT / "policies" / "config"


def workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def steps(job: dict) -> list[dict]:
    return job["steps"]


def test_every_stack_has_a_policy_config_and_no_other_file_is_there():
    assert sorted(p.stem for p in CONFIGS.glob("*.json")) == sorted(STACKS)
    assert sorted(p.name for p in CONFIGS.iterdir()) == sorted(f"{s}.json" for s in STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_policy_config_is_valid_for_the_pack(stack):
    """Through the analyzer protocol: unknown policies, bad levels and schema breaks are refused."""
    config = json.loads((CONFIGS / f"{stack}.json").read_text())
    sent = pack().configure(config)
    assert set(sent) == {p.name for p in pack().info().policies}


@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_passes_the_pack_under_its_own_config(stack, programs):
    config = json.loads((CONFIGS / f"{stack}.json").read_text())
    verdicts = pack().analyze_all(run_resources(programs(stack)), config)
    assert mandatory(verdicts) == [], [v.message for v in mandatory(verdicts)]


def test_a_broken_config_file_is_caught():
    with pytest.raises(ValueError, match="allowInternetFacing"):
        pack().configure({"serve-endpoint-not-internet-facing": {"allowInternetFacing": "no"}})


def test_the_pack_version_lives_in_one_place():
    version = yaml.safe_load((ROOT / "policies" / "PulumiPolicy.yaml").read_text())["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", str(version))
    text = (WORKFLOWS / "policy-publish.yml").read_text()
    assert str(version) not in text  # the workflow reads it; it does not repeat it
    assert "policies/PulumiPolicy.yaml" in text


def test_publish_runs_on_a_matching_tag_with_an_oidc_token():
    wf = workflow("policy-publish.yml")
    assert wf[True]["push"]["tags"] == ["policy-pack-v*"]  # YAML 1.1 reads `on:` as True
    job = wf["jobs"]["publish"]
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    uses = [s.get("uses", "") for s in steps(job)]
    assert any(u.startswith("pulumi/auth-actions@") for u in uses)
    runs = "\n".join(s.get("run", "") for s in steps(job))
    assert 'pulumi policy publish "$PULUMI_ORG"' in runs
    assert 'test "$GITHUB_REF_NAME" = "policy-pack-v${version}"' in runs
    assert "PULUMI_ACCESS_TOKEN" not in json.dumps(wf.get("env", {})) + json.dumps(job.get("env", {}))
    assert "secrets.PULUMI_ACCESS_TOKEN" not in (WORKFLOWS / "policy-publish.yml").read_text()
    # the pack's own tests gate the publish
    assert any("tests/integration/test_policies_" in s.get("run", "") for s in steps(job))


@pytest.mark.parametrize(
    "name, token",
    [
        ("pulumi-up.yml", "${{ vars.PULUMI_TOKEN_TYPE || 'team' }}"),  # organization on editions without team tokens
        ("pulumi-preview.yml", "team"),
        ("review-stack.yml", "team"),
        ("policy-publish.yml", "organization"),  # publishing a pack is an organization admin's act
    ],
)
def test_no_workflow_uses_a_long_lived_pulumi_token(name, token):
    text = (WORKFLOWS / name).read_text()
    assert "secrets.PULUMI_ACCESS_TOKEN" not in text
    assert "pulumi/auth-actions@141415910c3beb54e03b48e9057c204c97b956f2 # v2.1.0" in text
    assert f"urn:pulumi:token-type:access_token:{token}" in text


def test_pull_requests_preview_through_the_shared_preview_workflow():
    text = (WORKFLOWS / "pull-request.yml").read_text()
    assert "secrets.PULUMI_ACCESS_TOKEN" not in text
    assert "uses: ./.github/workflows/pulumi-preview.yml" in text


def test_up_and_cloud_preview_pass_the_stack_policy_config():
    stage = workflow("pulumi-up.yml")["jobs"]
    (up,) = [s for s in steps(stage["up"]) if s.get("name") == "pulumi up"]
    (saved,) = [s for s in steps(stage["preview"]) if s.get("name") == "pulumi preview --save-plan"]
    for step in (up, saved):
        assert '--policy-pack policies --policy-pack-config "policies/config/${STACK}.json"' in step["run"]
        assert step["env"]["STACK"] == "${{ inputs.stack }}"
    pr = workflow("pulumi-preview.yml")["jobs"]["preview"]
    (preview,) = [s for s in steps(pr) if s.get("uses", "").startswith("pulumi/actions@")]
    assert preview["with"]["policyPackConfigs"] == "policies/config/${{ inputs.stack }}.json"
