"""The review-stack workflow, on fake inputs: its shell steps run against a fake `pulumi` that logs its
calls, so what the workflow would do to real stacks is asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from helpers import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "review-stack.yml"

# `pulumi stack ls --json` lists stacks as objects with a `name` (pulumi/pulumi
# pkg/cmd/pulumi/stack/stack_ls.go, stackSummaryJSON: name, current, lastUpdate, updateInProgress,
# resourceCount, url).
FAKE_PULUMI = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
tags = json.loads(os.environ["FAKE_TAGS"])
if args[:2] == ["stack", "ls"]:
    print(json.dumps([{{"name": f"acme/llm-pd-eks/{{s}}", "current": False, "updateInProgress": False,
                       "resourceCount": 40, "url": f"https://app.pulumi.com/acme/llm-pd-eks/{{s}}"}}
                      for s in os.environ["FAKE_STACKS"].split()]))
elif args[:3] == ["stack", "tag", "get"]:
    value = tags.get(args[args.index("--stack") + 1])
    if value is None:
        sys.stderr.write("error: stack tag 'review:expires-at' not found\\n")
        sys.exit(255)
    print(value)
"""


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def step(job: str, name: str) -> dict:
    (found,) = [s for s in workflow()["jobs"][job]["steps"] if s.get("name") == name]
    return found


def run_step(script: str, tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "pulumi"
    fake.write_text(FAKE_PULUMI.format(python=sys.executable))
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    full_env = {**os.environ, **env, "FAKE_LOG": str(log), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=120
    )
    return done, log.read_text().splitlines()


def test_reaper_destroys_only_expired_review_stacks(tmp_path):
    script = step("reap", "Destroy every review stack past its time-to-live")["run"]
    tags = {"acme/pr-1": "2020-01-01T00:00:00Z", "acme/pr-2": "2099-01-01T00:00:00Z"}  # pr-3: no tag
    done, calls = run_step(
        script, tmp_path, {"PULUMI_ORG": "acme", "FAKE_STACKS": "pr-1 pr-2 pr-3 dev", "FAKE_TAGS": json.dumps(tags)}
    )
    assert done.returncode == 0, done.stderr
    destroys = [c for c in calls if c.startswith("destroy")]
    assert destroys == ["destroy --yes --skip-preview --remove --stack acme/pr-1"]
    assert "acme/pr-3 has no review:expires-at tag" in done.stdout
    assert not any("acme/dev" in c for c in calls)  # never a stack that is not a review stack
    assert calls[0] == "stack ls --organization acme --project llm-pd-eks --tag review:pr --json"


def test_up_sets_the_ttl_once_and_runs_the_pack(tmp_path):
    script = step("up", "pulumi up (serving layer off)")["run"]
    env = {
        "FULL_STACK": "acme/pr-7",
        "EXPIRES": "2030-01-01T00:00:00Z",
        "PR": "7",
        "BASE_STACK": "dev",
        "GITHUB_SHA": "abc123",
        "FAKE_STACKS": "",
        "FAKE_TAGS": json.dumps({"acme/pr-7": "2029-06-01T00:00:00Z"}),
    }
    done, calls = run_step(script, tmp_path, env)
    assert done.returncode == 0, done.stderr
    # the tag already exists (a later push): the time-to-live is not extended
    assert not any(c.startswith("stack tag set review:expires-at") for c in calls)
    (up,) = [c for c in calls if c.startswith("up ")]
    assert "--policy-pack policies --policy-pack-config policies/config/dev.json" in up
    assert "--stack acme/pr-7" in up
    done, calls = run_step(script, tmp_path, {**env, "FAKE_TAGS": "{}"})  # first push: the tag is set
    assert "stack tag set review:expires-at 2030-01-01T00:00:00Z --stack acme/pr-7" in calls


def test_jobs_are_gated_and_authenticate_by_oidc():
    jobs = workflow()["jobs"]
    assert "contains(github.event.pull_request.labels.*.name, 'review-stack')" in jobs["up"]["if"]
    assert "github.event.action == 'closed'" in jobs["destroy-closed"]["if"]
    assert workflow()[True]["schedule"] == [{"cron": "17 * * * *"}]  # YAML 1.1 reads `on:` as True
    for name, job in jobs.items():
        assert job["permissions"]["id-token"] == "write", name
        uses = [s.get("uses", "") for s in job["steps"]]
        assert any(u.startswith("pulumi/auth-actions@") for u in uses), name
        assert any(u.startswith("aws-actions/configure-aws-credentials@") for u in uses), name
    review = step("up", "Review stack file and its cost")["run"]
    assert "python -m llm_pd_eks_tools.ops.review_stack" in review and '--github-output "$GITHUB_OUTPUT"' in review


def test_closed_pr_destroys_its_stack_or_nothing(tmp_path):
    script = step("destroy-closed", "Destroy and remove the stack (if the PR had one)")["run"]
    done, calls = run_step(script, tmp_path, {"FULL_STACK": "acme/pr-9", "FAKE_STACKS": "", "FAKE_TAGS": "{}"})
    assert done.returncode == 0, done.stderr
    assert calls == ["stack select acme/pr-9", "destroy --yes --skip-preview --remove --stack acme/pr-9"]


def test_review_stack_is_gated_before_any_credentials_and_preflighted():
    """The deploy gate's halves run on the review stack too: its runner (this hosted one) must reach the
    API before AWS credentials (so a stack it cannot apply builds nothing), the resolved config after
    the Pulumi login, preflight after them and before `up`."""
    steps = workflow()["jobs"]["up"]["steps"]
    names = [s.get("name") or s.get("uses", "") for s in steps]
    gate = names.index("The runner reaches the review stack's API")
    creds = next(i for i, n in enumerate(names) if n.startswith("aws-actions/configure-aws-credentials@"))
    login = next(i for i, n in enumerate(names) if n.startswith("pulumi/auth-actions@"))
    resolved = names.index("No placeholder values in the resolved config")
    preflight = names.index("Preflight")
    up = names.index("pulumi up (serving layer off)")
    assert names.index("Review stack file and its cost") < gate < creds < login < resolved < preflight < up
    assert 'deploy_gate runner --stack "$STACK" --runner ubuntu-24.04' in steps[gate]["run"]
    assert workflow()["jobs"]["up"]["runs-on"] == "ubuntu-24.04"
    assert steps[gate]["env"]["STACK"] == "${{ steps.review.outputs.stack }}"
    assert steps[preflight]["run"] == 'make preflight STACK="$STACK"'


def test_deploy_previews_prod_at_the_merged_commit_before_its_approval():
    """Prod's stage previews in its own read-only environment first; the up job (environment prod,
    required reviewers) waits for it, so the approval is given on the run that shows the preview."""
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "deploy.yml").read_text())["jobs"]
    assert jobs["prod"]["uses"] == "./.github/workflows/pulumi-up.yml" and jobs["prod"]["needs"] == "staging"
    assert jobs["prod"]["with"]["preview-first"] is True
    stage = yaml.safe_load((ROOT / ".github" / "workflows" / "pulumi-up.yml").read_text())["jobs"]
    assert stage["preview"]["needs"] == "gate" and "preview" in stage["up"]["needs"]
    names = [s.get("name") or s.get("uses", "") for s in stage["up"]["steps"]]
    assert names.index("Preflight") < names.index("pulumi up")
