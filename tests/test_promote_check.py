"""The promotion gate (llm_pd_eks_tools/promote_check.py) on synthetic stack files, and the workflows that use it."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import ROOT

from llm_pd_eks_tools import cli, promote_check
from llm_pd_eks_tools.promote_check import MUST_PROMOTE_KIND, PER_ENVIRONMENT_KIND, SECRET_KIND, compare_stacks, main

WORKFLOWS = ROOT / ".github" / "workflows"
P = "llm-pd-eks"

# A staging-shaped stack; each test derives the other side from it and changes what it is about.
BASE: dict[str, Any] = {
    "aws:region": "us-west-2",
    f"{P}:network": {
        "vpcCidr": "10.20.0.0/16",
        "availabilityZones": ["us-west-2a", "us-west-2b", "us-west-2c"],
        "natGateways": "perAz",
    },
    f"{P}:gpuNodes": {"instanceType": "p4d.24xlarge", "availabilityZone": "us-west-2b", "maxSize": 4},
    f"{P}:serving": {
        "modelId": "meta-llama/Llama-3.1-8B-Instruct",
        "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.0-py311-cu128",
        "maxModelLen": 16384,
        "prefill": {"tensorParallelSize": 2, "minReplicas": 1, "maxReplicas": 4},
        "decode": {"tensorParallelSize": 2, "minReplicas": 1, "maxReplicas": 8},
    },
    f"{P}:kuberay": {"chartVersion": "1.7.0"},
    f"{P}:hfToken": {"secure": "AAABAPcipherTextOfStaging"},
}


def write_stacks(root: Path, staging: dict[str, Any], prod: dict[str, Any]) -> Path:
    for name, config in (("staging", staging), ("prod", prod)):
        (root / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return root


def variant(**changes: Any) -> dict[str, Any]:
    """BASE with `section={key: value}` merged in (value None drops the key); `section=None` drops it."""
    config = copy.deepcopy(BASE)
    for section, change in changes.items():
        full = section if ":" in section else f"{P}:{section}"
        if change is None:
            config.pop(full)
        elif isinstance(change, dict):
            merged = config.setdefault(full, {})
            for k, v in change.items():
                if v is None:
                    merged.pop(k)
                else:
                    merged[k] = v
        else:
            config[full] = change
    return config


def run_cli(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.run("promote-check", main, ["--from", "staging", "--to", "prod", "--root", str(root)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def kinds(root: Path) -> dict[str, str]:
    return {d.key: d.kind for d in compare_stacks("staging", "prod", root).differences}


def test_identical_stacks_pass_with_nothing_to_report(tmp_path, capsys):
    write_stacks(tmp_path, BASE, copy.deepcopy(BASE))
    code, out = run_cli(tmp_path, capsys)
    assert code == 0
    assert "OK: prod runs what staging ran (0 expected difference(s))" in out
    # the token is secret on both sides: listed, never compared
    assert f"secrets (per-environment, not compared): {P}:hfToken" in out


def test_chart_version_drift_fails_naming_the_key(tmp_path, capsys):
    write_stacks(tmp_path, BASE, variant(kuberay={"chartVersion": "1.7.1"}))
    code, out = run_cli(tmp_path, capsys)
    assert code == 1
    assert f"{P}:kuberay.chartVersion: staging=1.7.0  prod=1.7.1" in out
    assert f"FAIL: 1 unpromoted difference(s): {P}:kuberay.chartVersion." in out


def test_image_tag_drift_fails(tmp_path, capsys):
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.61.0-py311-cu128"
    write_stacks(tmp_path, BASE, variant(serving={"image": image}))
    code, out = run_cli(tmp_path, capsys)
    assert code == 1
    assert kinds(tmp_path) == {f"{P}:serving.image": MUST_PROMOTE_KIND}
    assert f"prod={image}" in out


def test_same_image_in_each_regions_registry_is_per_environment(tmp_path, capsys):
    # ECR is regional: prod pulls the same repository:tag from its own region's registry.
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ray-llm:2.60.0-py311-cu128"
    write_stacks(tmp_path, BASE, variant(serving={"image": image}))
    code, _ = run_cli(tmp_path, capsys)
    assert code == 0
    assert kinds(tmp_path) == {f"{P}:serving.image": PER_ENVIRONMENT_KIND}


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"serving": {"modelId": "meta-llama/Llama-3.3-70B-Instruct"}}, f"{P}:serving.modelId"),
        ({"serving": {"maxModelLen": 32768}}, f"{P}:serving.maxModelLen"),
        (
            {"serving": {"prefill": {"tensorParallelSize": 8, "minReplicas": 1, "maxReplicas": 4}}},
            f"{P}:serving.prefill.tensorParallelSize",
        ),
    ],
)
def test_model_and_engine_settings_must_be_promoted(tmp_path, capsys, change, key):
    write_stacks(tmp_path, BASE, variant(**change))
    code, out = run_cli(tmp_path, capsys)
    assert code == 1
    assert kinds(tmp_path) == {key: MUST_PROMOTE_KIND}
    assert f"FAIL: 1 unpromoted difference(s): {key}." in out


def test_per_environment_differences_are_reported_but_pass(tmp_path, capsys):
    prod = variant(
        **{
            "aws:region": "us-east-1",
            "network": {
                "vpcCidr": "10.30.0.0/16",
                "availabilityZones": ["us-east-1a", "us-east-1c"],
                "natGateways": "single",
            },
            "gpuNodes": {"instanceType": "p5.48xlarge", "availabilityZone": "us-east-1c", "maxSize": 2},
            "serving": {"decode": {"tensorParallelSize": 2, "minReplicas": 2, "maxReplicas": 2}},
            "protect": True,
        }
    )
    write_stacks(tmp_path, BASE, prod)
    code, out = run_cli(tmp_path, capsys)
    assert code == 0, out
    expected = {
        "aws:region",
        f"{P}:network.vpcCidr",
        f"{P}:network.availabilityZones",  # a list of scalars is one value
        f"{P}:network.natGateways",
        f"{P}:gpuNodes.instanceType",
        f"{P}:gpuNodes.availabilityZone",
        f"{P}:gpuNodes.maxSize",
        f"{P}:serving.decode.minReplicas",
        f"{P}:serving.decode.maxReplicas",
        f"{P}:protect",
    }
    assert kinds(tmp_path) == dict.fromkeys(expected, PER_ENVIRONMENT_KIND)
    assert "per-environment (expected to differ):" in out
    assert "    aws:region: staging=us-west-2  prod=us-east-1" in out
    assert f"    {P}:protect: staging=(not set)  prod=true  [only in one stack]" in out
    assert "OK: prod runs what staging ran (10 expected difference(s))" in out


def test_must_promote_key_set_on_one_side_only_fails(tmp_path, capsys):
    # prod leaving kvCacheDtype unset runs the program's default, not what staging ran.
    write_stacks(tmp_path, variant(serving={"kvCacheDtype": "fp8"}), BASE)
    code, out = run_cli(tmp_path, capsys)
    assert code == 1
    assert f"{P}:serving.kvCacheDtype: staging=fp8  prod=(not set)  [only in one stack]" in out


def test_whole_section_on_one_side_is_reported_per_key(tmp_path, capsys):
    write_stacks(tmp_path, BASE, variant(devicePlugins={"nvidiaChartVersion": "0.18.0"}))
    code, out = run_cli(tmp_path, capsys)
    assert code == 1
    assert kinds(tmp_path) == {f"{P}:devicePlugins.nvidiaChartVersion": MUST_PROMOTE_KIND}
    assert f"{P}:devicePlugins.nvidiaChartVersion: staging=(not set)  prod=0.18.0  [only in one stack]" in out


def test_new_keys_default_to_must_promote(tmp_path, capsys):
    # nobody classified `router.version` yet: it differs, so the gate holds (the safe default)
    write_stacks(tmp_path, variant(router={"version": "1"}), variant(router={"version": "2"}))
    code, _ = run_cli(tmp_path, capsys)
    assert code == 1
    assert kinds(tmp_path) == {f"{P}:router.version": MUST_PROMOTE_KIND}


def test_secrets_differ_by_construction_and_pass(tmp_path, capsys):
    # different ciphertext in each stack, and a secret only prod has: neither holds the gate
    prod = variant(hfToken={"secure": "AAABAOtherCipherText"}, webhookToken={"secure": "AAABAWebhook"})
    write_stacks(tmp_path, BASE, prod)
    code, out = run_cli(tmp_path, capsys)
    assert code == 0, out
    assert kinds(tmp_path) == {f"{P}:webhookToken": SECRET_KIND}
    assert f"{P}:webhookToken: staging=(not set)  prod=(secret)  [only in one stack]" in out
    assert "AAABA" not in out  # ciphertext is never printed


def test_target_without_a_token_the_source_has_fails(tmp_path, capsys):
    # staging pulled the gated model with its token; prod without one would get 401 on every download
    write_stacks(tmp_path, BASE, variant(hfToken=None))
    code, out = run_cli(tmp_path, capsys)
    assert code == 1, out
    assert kinds(tmp_path) == {f"{P}:hfToken": MUST_PROMOTE_KIND}
    assert f"{P}:hfToken: staging=(secret)  prod=(not set)  [only in one stack]" in out
    assert "AAABA" not in out
    # the other way round (a secret only the target has) still passes: see the test above


def test_lists_of_objects_are_compared_per_item_and_field(tmp_path, capsys):
    rules = [{"port": 8000, "chartVersion": "1.0.0"}, {"port": 8001, "chartVersion": "1.0.0"}]
    drifted = copy.deepcopy(rules)
    drifted[1]["chartVersion"] = "1.0.1"
    write_stacks(tmp_path, variant(extras={"charts": rules}), variant(extras={"charts": drifted}))
    code, _ = run_cli(tmp_path, capsys)
    assert code == 1
    assert kinds(tmp_path) == {f"{P}:extras.charts[1].chartVersion": MUST_PROMOTE_KIND}


def test_missing_stack_file_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "Pulumi.staging.yaml").write_text(yaml.safe_dump({"config": BASE}))
    code, out = run_cli(tmp_path, capsys)
    assert code == 2
    assert "no stack file Pulumi.prod.yaml; stacks here: staging" in out


def test_classification_is_data():
    # A stack may widen the per-environment list; the same drift then passes.
    flat = promote_check.flatten({f"{P}:serving": '{"maxModelLen": 1}'}, [])
    other = promote_check.flatten({f"{P}:serving": '{"maxModelLen": 2}'}, [])
    strict = promote_check.compare_configs("a", flat, "b", other)
    relaxed = promote_check.compare_configs("a", flat, "b", other, per_environment=["*.maxModelLen"])
    assert not strict.ok and relaxed.ok


# --- the workflows -------------------------------------------------------------------------------


def _actionlint() -> str:
    found = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")
    assert found, "actionlint is not installed: `make venv-dev` installs it (requirements-dev.txt)"
    return found


def test_actionlint_passes_on_the_workflows():
    args = [_actionlint()]
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if shellcheck:
        args.append(f"-shellcheck={shellcheck}")
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert files, "no workflows under .github/workflows"
    result = subprocess.run([*args, *files], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def _workflow(name: str) -> dict[str, Any]:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def _steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_every_action_is_pinned_to_a_commit():
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for step in _steps(yaml.safe_load(path.read_text())):
            uses = step.get("uses", "")
            if uses and not uses.startswith("./"):
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", uses), f"{path.name}: {uses} is not pinned"


def test_deploy_moves_one_commit_dev_staging_prod_with_the_gate():
    jobs = _workflow("deploy.yml")["jobs"]
    assert [jobs[s].get("needs") for s in ("dev", "staging", "prod")] == [None, "dev", ["staging", "prod-preview"]]
    assert jobs["prod-preview"]["needs"] == "staging"  # the merged commit previewed against prod first
    assert [jobs[s]["with"]["stack"] for s in ("dev", "staging", "prod")] == ["dev", "staging", "prod"]
    assert jobs["prod"]["with"]["promote-from"] == "staging"
    up = _workflow("pulumi-up.yml")["jobs"]["up"]
    assert up["environment"] == "${{ inputs.stack }}"
    assert up["concurrency"] == {"group": "pulumi-up-${{ inputs.stack }}", "cancel-in-progress": False}
    steps = up["steps"]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["ref"] == "${{ github.sha }}"
    names = [s.get("name") or s.get("uses", "").split("@")[0] for s in steps]
    assert names.index("Promotion check") < names.index("pulumi/actions")
    # the first pulumi/actions step only installs the CLI (for the pending-delete guard); the one with a command runs up
    pulumi = next(s for s in steps if s.get("uses", "").startswith("pulumi/actions@") and "command" in s["with"])
    assert pulumi["with"]["command"] == "up" and pulumi["with"]["policyPacks"] == "policies"


# --- secrets on one side, another account's image, malformed files ------------------------


def test_a_must_promote_key_secret_on_one_side_fails(tmp_path, capsys):
    # `pulumi config set --secret --path kuberay.chartVersion ...` in prod: the value cannot be compared.
    write_stacks(tmp_path, BASE, variant(kuberay={"chartVersion": {"secure": "AAABAcipher"}}))
    staging = variant(kuberay={"chartVersion": "1.7.0"})
    write_stacks(tmp_path, staging, variant(kuberay={"chartVersion": {"secure": "AAABAcipher"}}))
    code, out = run_cli(tmp_path, capsys)
    assert code == 1
    assert kinds(tmp_path) == {f"{P}:kuberay.chartVersion": MUST_PROMOTE_KIND}
    assert (
        f"    {P}:kuberay.chartVersion: staging=1.7.0  prod=(secret)  [secret on one side: cannot be "
        "compared; set it the same way in both]"
    ) in out
    assert "AAABA" not in out


def test_a_per_environment_key_secret_on_one_side_passes(tmp_path, capsys):
    write_stacks(tmp_path, BASE, variant(cluster={"adminPrincipalArns": {"secure": "AAABAcipher"}}))
    staging = variant(cluster={"adminPrincipalArns": ["arn:aws:iam::123456789012:role/admin"]})
    write_stacks(tmp_path, staging, variant(cluster={"adminPrincipalArns": {"secure": "AAABAcipher"}}))
    code, _ = run_cli(tmp_path, capsys)
    assert code == 0
    assert kinds(tmp_path) == {f"{P}:cluster.adminPrincipalArns": SECRET_KIND}


def test_an_image_from_another_accounts_registry_fails(tmp_path, capsys):
    image = "999999999999.dkr.ecr.us-east-1.amazonaws.com/ray-llm:2.60.0-py311-cu128"
    write_stacks(tmp_path, BASE, variant(serving={"image": image}))
    code, out = run_cli(tmp_path, capsys)
    assert code == 1
    assert kinds(tmp_path) == {f"{P}:serving.image": MUST_PROMOTE_KIND}
    assert f"prod={image}" in out


def test_an_image_moved_off_ecr_fails(tmp_path, capsys):
    write_stacks(tmp_path, BASE, variant(serving={"image": "docker.io/ray-llm:2.60.0-py311-cu128"}))
    code, _ = run_cli(tmp_path, capsys)
    assert code == 1


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "- config\n",
            "Pulumi.prod.yaml: the file is a YAML list, but a stack file is a mapping with a `config:` key "
            "(`config:` then `namespace:key: value` lines)",
        ),
        (
            "config:\n  aws:region: us-east-1\n  aws:region: us-west-2\n",
            "Pulumi.prod.yaml line 3: key 'aws:region' is defined twice (first at line 2); keep one (the Pulumi CLI "
            "refuses duplicate keys too)",
        ),
        ("config: [unclosed\n", "Pulumi.prod.yaml line 2: expected ',' or ']', but got '<stream end>'"),
        (
            "config: &a {x: 1}\nother: *a\n",
            "Pulumi.prod.yaml line 2: YAML alias *a is not allowed in a stack file; write the value out in full",
        ),
    ],
)
def test_a_malformed_stack_file_is_one_line_with_the_usage_code(tmp_path, text, message):
    write_stacks(tmp_path, BASE, BASE)
    (tmp_path / "Pulumi.prod.yaml").write_text(text)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_pd_eks_tools.promote_check",
            "--from",
            "staging",
            "--to",
            "prod",
            "--root",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.strip() == f"promote-check: {message}"


def test_a_huge_value_is_shown_cut(tmp_path, capsys):
    write_stacks(tmp_path, BASE, variant(serving={"modelId": "m" * 100_000}))
    code, out = run_cli(tmp_path, capsys)
    assert code == 1
    line = next(x for x in out.splitlines() if "serving.modelId" in x)
    assert len(line) < 300 and "…" in line
