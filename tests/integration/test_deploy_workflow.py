"""The deploy workflow refuses placeholder stacks and runs `pulumi up` on the runner the stack needs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from helpers import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"


def workflow(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def test_up_waits_for_the_runner_gate_and_uses_its_runner():
    wf = workflow("pulumi-up.yml")
    inputs = wf[True]["workflow_call"]["inputs"]  # YAML 1.1 reads `on:` as True
    assert inputs["runner"]["type"] == "string" and inputs["runner"]["required"] is False
    gate, up = wf["jobs"]["gate"], wf["jobs"]["up"]
    assert up["needs"] == ["gate", "preview"] and "needs.gate.result == 'success'" in up["if"]
    assert up["runs-on"] == "${{ needs.gate.outputs.runner }}"
    (check,) = [s for s in gate["steps"] if s.get("id") == "check"]
    assert 'python -m llm_pd_eks_tools.gates.deploy_gate runner --stack "$STACK" --runner "$RUNNER"' in check["run"]
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


# -- first contact: what a real organization's first runs need ----------------------------------

AUTH = "pulumi/auth-actions@"
CREDENTIALS = ("aws-actions/configure-aws-credentials@", AUTH)
# The only variables a job-level `if` reads: repository (or organization) variables. A GitHub
# environment's variables are not visible there (GitHub Docs, "Contexts": `vars` in `jobs.<id>.if`).
REPOSITORY_VARIABLES = {
    "DEPLOY_ENABLED",
    "CLOUD_PREVIEW_ENABLED",
    "REVIEW_STACKS_ENABLED",
    "PULUMI_ORG",
    "PULUMI_TOKEN_TYPE",
}
FAKE_PULUMI = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if args[:2] == ["policy", "ls"]:
    print(os.environ.get("FAKE_PACKS", "[]"))
elif args[:2] == ["config", "--json"]:
    name = "FAKE_SECRETS_JSON" if "--show-secrets" in args else "FAKE_CONFIG_JSON"
    sys.stdout.write(open(os.environ[name]).read())
"""


def every_workflow() -> dict[str, dict]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(WORKFLOWS.glob("*.yml"))}


def step_names(job: dict) -> list[str]:
    return [s.get("name") or s.get("uses", "") for s in job.get("steps", [])]


def first(names: list[str], prefix: str) -> int:
    return next(i for i, n in enumerate(names) if n.startswith(prefix))


def creates_resources(job: dict) -> bool:
    """A job whose steps run `pulumi up` (the CLI or the action's `up`)."""
    for step in job.get("steps", []):
        run = step.get("run", "")
        if "pulumi up" in run or "args=(up " in run:
            return True
        if step.get("uses", "").startswith("pulumi/actions@") and step["with"].get("command") == "up":
            return True
    return False


def fake_cli(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "pulumi"
    fake.write_text(FAKE_PULUMI.format(python=sys.executable))
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    return {"FAKE_LOG": str(log), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, log


def run_script(script: str, tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    cli_env, log = fake_cli(tmp_path)
    done = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env={**os.environ, **env, **cli_env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, log.read_text().splitlines()


def test_every_job_that_creates_resources_checks_its_runner_before_any_credential():
    """The runner half of the gate before a credential is taken (in the job or a job it needs), the
    resolved half after the Pulumi login and before preflight and `up`."""
    found = []
    for name, wf in every_workflow().items():
        for job_id, job in wf["jobs"].items():
            if not creates_resources(job):
                continue
            found.append((name, job_id))
            names = step_names(job)
            needs = job.get("needs", [])
            gated_before = [wf["jobs"][n] for n in ([needs] if isinstance(needs, str) else needs)]
            runner_steps = [i for i, s in enumerate(job["steps"]) if "deploy_gate runner" in s.get("run", "")]
            creds = min(first(names, c) for c in CREDENTIALS)
            in_a_needed_job = any("deploy_gate runner" in s.get("run", "") for j in gated_before for s in j["steps"])
            assert in_a_needed_job or (runner_steps and runner_steps[0] < creds), (name, job_id)
            resolved = next(i for i, s in enumerate(job["steps"]) if "deploy_gate resolved" in s.get("run", ""))
            up = next(i for i, s in enumerate(job["steps"]) if creates_resources({"steps": [s]}))
            assert first(names, AUTH) < resolved < names.index("Preflight") < up, (name, job_id)
    assert sorted(found) == [("pulumi-up.yml", "up"), ("review-stack.yml", "up")]


def _stack(root: Path, name: str, cidrs: list[str], runner: str = "", environment: str = "") -> None:
    config = {"aws:region": "us-west-2", "llm-pd-eks:cluster": {"publicAccessCidrs": cidrs}}
    if runner:
        config["llm-pd-eks:deploy"] = {"runnerLabel": runner}
    text = (f"environment:\n  - {environment}\n" if environment else "") + yaml.safe_dump({"config": config})
    (root / f"Pulumi.{name}.yaml").write_text(text)


def test_the_runner_gate_refuses_a_runner_that_cannot_reach_the_api(tmp_path):
    from llm_pd_eks_tools.gates.deploy_gate import runner_facts, runner_refusals

    _stack(tmp_path, "listed", ["198.18.0.0/15"])
    deploy, cluster = runner_facts("listed", tmp_path)
    (why,) = runner_refusals(deploy, cluster, "ubuntu-24.04")
    assert "admits only cluster.publicAccessCidrs" in why and "first Kubernetes object" in why
    assert runner_refusals(deploy, cluster, "vpc-runner") == []  # a named runner is placed for it
    assert runner_refusals(deploy, cluster, "ubuntu-24.04", preview=True) == []  # a preview runs unrefreshed
    _stack(tmp_path, "private", [])
    assert runner_refusals(*runner_facts("private", tmp_path), "ubuntu-24.04")
    _stack(tmp_path, "open", ["0.0.0.0/0"])
    assert runner_refusals(*runner_facts("open", tmp_path), "ubuntu-24.04") == []


def test_a_pull_requests_code_never_runs_on_a_deploy_runner_nor_reaches_prod(tmp_path):
    from llm_pd_eks_tools.gates.deploy_gate import runner_facts, runner_refusals

    pr = workflow("pull-request.yml")
    cloud = pr["jobs"]["cloud-preview"]
    stacks = {row["stack"]: row for row in cloud["strategy"]["matrix"]["include"]}
    assert set(stacks) == {"dev", "staging"}  # prod's secrets never reach a pull request's code
    for stack, row in stacks.items():
        assert row["runner"] == f"${{{{ vars.PREVIEW_RUNNER_{stack.upper()} }}}}"
        assert row["deploy-runner"] == f"${{{{ vars.DEPLOY_RUNNER_{stack.upper()} }}}}"
    assert "secrets" not in cloud and "secrets." not in (WORKFLOWS / "pull-request.yml").read_text()
    assert not any("environment" in job for job in pr["jobs"].values())
    plan = workflow("pulumi-preview.yml")["jobs"]["plan"]
    (step,) = [s for s in plan["steps"] if s.get("id") == "plan"]
    assert '--pull-request --deploy-runner "$DEPLOY_RUNNER"' in step["run"]
    assert "PULUMI_CONFIG_PASSPHRASE" not in (WORKFLOWS / "pulumi-preview.yml").read_text()
    _stack(tmp_path, "dev", ["198.18.0.0/15"], runner="vpc-runner")
    facts = runner_facts("dev", tmp_path)
    for deploy_runner in ("vpc-runner", ""):  # the variable's runner or the stack's own
        refused = runner_refusals(*facts, "vpc-runner", preview=True, pull_request=True, deploy_runner=deploy_runner)
        assert refused and "deploy runner" in refused[0]
    assert runner_refusals(*facts, "preview-runner", preview=True, pull_request=True, deploy_runner="vpc-runner") == []


ESC_ENV = "llm-pd-eks/dev"


def _esc_checkout(tmp_path: Path, hf_token: str) -> tuple[Path, dict[str, str]]:
    """A copy whose dev stack imports ESC (checked-in definition: `set me` values) and a fake CLI whose
    resolved config carries `hf_token` for the environment's hfToken."""
    from helpers import DATA, copy_checkout

    root = copy_checkout(tmp_path / "repo")
    path = root / "Pulumi.dev.yaml"
    path.write_text(f"environment:\n  - {ESC_ENV}\n" + path.read_text())
    listed = json.loads((DATA / "pulumi-config-json" / "dev.json").read_text())
    shown = {k: dict(v) for k, v in listed.items()}
    for key in ("llm-pd-eks:hfToken", "llm-pd-eks:grafanaAdminPassword", "llm-pd-eks:alertWebhookUrl"):
        shown[key]["value"] = "https://hooks.example.net/real" if key.endswith("Url") else "real-value-1"
    shown["llm-pd-eks:hfToken"]["value"] = hf_token
    (tmp_path / "secrets.json").write_text(json.dumps(shown))
    return root, {
        "FAKE_CONFIG_JSON": str(DATA / "pulumi-config-json" / "dev.json"),
        "FAKE_SECRETS_JSON": str(tmp_path / "secrets.json"),
    }


def test_gates_work_on_a_stack_that_imports_esc(tmp_path, monkeypatch):
    """Before login the runner half needs no CLI; after it, the resolved half judges ESC's values (a
    secret still `set me` there is refused, by name only), not the checked-in `set me` text."""
    from llm_pd_eks_tools.gates.deploy_gate import resolved_refusals, runner_facts

    root, files = _esc_checkout(tmp_path, "hf_realtoken123")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    _, cluster = runner_facts("dev", root)  # no CLI, no login: the stack file alone
    assert cluster.public_access_cidrs == ["203.0.113.0/24"]
    cli_env, log = fake_cli(tmp_path)
    for key, value in {**cli_env, **files}.items():
        monkeypatch.setenv(key, value)
    lines = resolved_refusals("dev", root, "vpc-runner")
    assert not any("esc " in line or "hfToken" in line for line in lines), lines
    assert any("--show-secrets" in call for call in log.read_text().splitlines())
    root, files = _esc_checkout(tmp_path / "again", "set me: esc env set llm-pd-eks/dev secrets.hfToken")
    for key, value in files.items():
        monkeypatch.setenv(key, value)
    (line,) = [line for line in resolved_refusals("dev", root, "vpc-runner") if "hfToken" in line]
    assert "(secret)" in line and "set me" not in line  # named, never shown


def test_the_deploy_chain_is_enabled_by_variables_a_job_if_can_see(tmp_path):
    for name, wf in every_workflow().items():
        for job_id, job in wf["jobs"].items():
            used = set(re.findall(r"vars\.([A-Z_]+)", str(job.get("if", ""))))
            assert used <= REPOSITORY_VARIABLES, (name, job_id, used - REPOSITORY_VARIABLES)
    assert "vars.DEPLOY_ENABLED == 'true'" in workflow("deploy.yml")["jobs"]["dev"]["if"]
    # the environment's role is checked inside the job, loudly, before anything else
    up = workflow("pulumi-up.yml")["jobs"]["up"]
    (check,) = [s for s in up["steps"] if s.get("name") == "The environment names its role"]
    assert step_names(up).index("The environment names its role") < first(step_names(up), CREDENTIALS[0])
    done, _ = run_script(check["run"], tmp_path, {"ROLE": "", "ENVIRONMENT": "prod"})
    assert done.returncode == 1 and "::error::GitHub environment prod has no variable AWS_ROLE_ARN" in done.stdout
    done, _ = run_script(check["run"], tmp_path, {"ROLE": "arn:aws:iam::111122223333:role/x", "ENVIRONMENT": "prod"})
    assert done.returncode == 0


def test_prod_applies_the_plan_its_approved_preview_saved(tmp_path):
    stages = workflow("deploy.yml")["jobs"]
    assert stages["prod"]["with"]["preview-first"] is True
    assert not any(stages[s]["with"].get("preview-first") for s in ("dev", "staging"))
    jobs = workflow("pulumi-up.yml")["jobs"]
    preview, up = jobs["preview"], jobs["up"]
    assert preview["environment"] == "${{ inputs.stack }}-preview" and up["environment"] == "${{ inputs.stack }}"
    (save,) = [s for s in preview["steps"] if s.get("name") == "pulumi preview --save-plan"]
    assert "--save-plan plan/plan.json" in save["run"]
    (upload,) = [s for s in preview["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    (download,) = [s for s in up["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
    assert upload["with"]["name"] == download["with"]["name"] == "plan-${{ inputs.stack }}-${{ github.sha }}"
    assert "needs.preview.result == 'success'" in up["if"] and "!inputs.preview-first" in up["if"]
    (apply,) = [s for s in up["steps"] if s.get("name") == "pulumi up"]
    env = {"STACK": "prod", "PULUMI_STACK": "acme/prod", "MESSAGE": "abc", "FAKE_PACKS": "[]"}
    done, calls = run_script(apply["run"], tmp_path, {**env, "PLAN": "plan/plan.json"})
    assert done.returncode == 0, done.stderr
    (call,) = calls
    assert call.startswith("up --yes") and call.endswith("--plan plan/plan.json")
    assert "--policy-pack policies --policy-pack-config policies/config/prod.json" in call
    _, calls = run_script(apply["run"], tmp_path, {**env, "PLAN": ""})
    assert "--plan" not in calls[0]


def test_every_token_exchange_names_the_cloud_url():
    url = "${{ vars.PULUMI_BACKEND_URL || 'https://api.pulumi.com' }}"
    count = 0
    for name, wf in every_workflow().items():
        for job_id, job in wf["jobs"].items():
            for step in job.get("steps", []):
                if step.get("uses", "").startswith(AUTH):
                    count += 1
                    assert step["with"]["cloud-url"] == url, (name, job_id)
    assert count >= 6


def test_publishing_a_version_again_does_not_fail(tmp_path):
    (step,) = [s for s in workflow("policy-publish.yml")["jobs"]["publish"]["steps"] if s.get("name") == "Publish"]
    env = {"PULUMI_ORG": "acme", "PACK": "llm-pd-eks", "VERSION": "1.2.0"}
    packs = json.dumps([{"name": "llm-pd-eks", "versions": ["1.1.0", "1.2.0"]}])
    done, calls = run_script(step["run"], tmp_path, {**env, "FAKE_PACKS": packs})
    assert done.returncode == 0, done.stderr
    assert calls == ["policy ls acme --json"] and "already published" in done.stdout
    # a new version is published (the pip install and publish run only then: the script is cut before them)
    script = step["run"].replace("python -m venv policies/.venv", "pulumi policy publish-would-run; exit 0")
    done, calls = run_script(
        script, tmp_path, {**env, "FAKE_PACKS": json.dumps([{"name": "llm-pd-eks", "versions": ["1.1.0"]}])}
    )
    assert done.returncode == 0 and calls[-1] == "policy publish-would-run"


def test_the_gate_step_refuses_before_any_credential_and_hands_on_a_runner_that_reaches(tmp_path):
    """The gate job's step as the runner runs it (`make venv` replaced by the checkout's venv): prod's
    checked-in endpoint admits only a documentation range, so a hosted runner is refused, exit 1, and
    no runner reaches the up job; a self-hosted label is handed on."""
    gate = workflow("pulumi-up.yml")["jobs"]["gate"]
    (step,) = [s for s in gate["steps"] if s.get("id") == "check"]
    script = step["run"].replace("make venv\n", "").replace(".venv/bin/python", sys.executable)
    for runner, code, handed in (("", 1, None), ("ubuntu-24.04", 1, None), ("vpc-runner-prod", 0, "vpc-runner-prod")):
        out = tmp_path / f"out-{runner or 'default'}"
        out.write_text("")
        env = {**os.environ, "STACK": "prod", "RUNNER": runner, "GITHUB_OUTPUT": str(out), "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            ["bash", "-e", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == code, done.stderr
        lines = out.read_text().splitlines()
        assert (f"runner={handed}" in lines) if handed else lines == []
        if code:
            assert "first Kubernetes object" in done.stderr and "Traceback" not in done.stderr
