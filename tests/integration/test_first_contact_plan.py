"""The plan as the engine would see it: the children pulumi-eks's own code registers inside
`eks:index:Cluster` (recorded facts, llm_pd_eks_tools/plan/preview/eks_children.json) put back under it,
judged through the analyzer protocol on a known-inputs preview and on a first preview; the cluster
decisions those children show; the first-preview mode; the resource options sent as the engine does."""

from __future__ import annotations

import functools
import json

import pytest
from google.protobuf import json_format
from helpers import RAY_SERVICE, STACKS, engine_config_with
from policy_fixtures import mandatory, of, pack

from llm_pd_eks.pulumi_sdk import rpc
from llm_pd_eks_tools.plan.preview import harness
from llm_pd_eks_tools.plan.preview.analyzer import UNKNOWN, run_resources
from llm_pd_eks_tools.plan.preview.mockrun import run_program
from llm_pd_eks_tools.plan.preview.remote_children import COMPONENT, load_facts, splice

MODES = ("known", "first-preview")
INNER = "aws:eks/cluster:Cluster"
CHILD_TYPES = {
    "eks:index:ServiceRole",
    "aws:iam/role:Role",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    INNER,
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider",
    "pulumi:providers:kubernetes",
}


@functools.cache
def _first_preview(stack: str):
    return run_program(stack, first_preview=True)


def _program(programs, stack: str, mode: str):
    return programs(stack) if mode == "known" else _first_preview(stack)


def _spliced(programs, stack: str, mode: str):
    run, warnings = splice(_program(programs, stack, mode), first_preview=mode == "first-preview")
    assert warnings == []
    return run


def _props(message) -> dict:
    return json_format.MessageToDict(message.properties)


# -- the recorded facts ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stack", STACKS)
def test_the_recorded_children_are_for_what_the_program_now_passes(stack, mode, programs):
    """A change to the program's arguments to pulumi-eks (or to a stack file) makes the record stale:
    `make eks-children` regenerates it."""
    from llm_pd_eks_tools.maint.gen_eks_children import inputs_digest

    (cluster,) = _program(programs, stack, mode).of_type(COMPONENT)
    recorded = load_facts()["stacks"][stack][mode]
    assert recorded["inputs_sha256"] == inputs_digest(json_format.MessageToDict(cluster.inputs_struct)), (
        "run `make eks-children PULUMI_EKS=<git dir of pulumi/pulumi-eks>`"
    )


def test_the_facts_say_where_they_come_from_and_how_to_regenerate_them():
    facts = load_facts()
    assert len(facts["pulumi_eks"]["commit"]) == 40 and facts["pulumi_eks"]["repository"].endswith("pulumi-eks")
    assert facts["regenerate"].startswith("make eks-children")
    assert facts["sdk_versions"]["locked"]["@pulumi/aws"]  # the versions pulumi-eks's own lock pins


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stack", STACKS)
def test_the_children_are_put_back_under_the_component(stack, mode, programs):
    run = _spliced(programs, stack, mode)
    (cluster,) = run.of_type(COMPONENT)
    children = [r for r in run.resources if r.recorded_by]
    assert {r.type for r in children} == CHILD_TYPES
    urns = {r.urn for r in run.resources}
    for child in children:
        assert child.parent in urns and child.urn.startswith("urn:pulumi:" + stack + "::")
        assert set(child.dependencies) <= urns
        assert child.protect == cluster.protect  # inherited from the component, as the Node SDK does
    role = run.one("aws:iam/role:Role", "eksRole-role")
    assert run.by_urn(role.parent).type == "eks:index:ServiceRole"
    assert run.by_urn(run.by_urn(role.parent).parent) is cluster
    # the original run is left as it was
    assert not any(r.recorded_by for r in _program(programs, stack, mode).resources)


# -- the done-when: no mandatory verdict with the children, known inputs and first preview ----------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stack", STACKS)
def test_the_plan_with_pulumi_eks_children_gets_no_mandatory_verdict(stack, mode, programs):
    run = _spliced(programs, stack, mode)
    resources = run_resources(run)
    assert CHILD_TYPES <= {r.type for r in resources}
    verdicts = pack().analyze_all(resources)
    assert mandatory(verdicts) == [], "\n".join(v.message for v in mandatory(verdicts))
    assert [v for v in verdicts if "can't run policy" in v.message] == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_the_children_are_really_judged(stack, mode, programs):
    """Open the inner cluster's public endpoint to the internet: the rule fires on that child."""
    resources = run_resources(_spliced(programs, stack, mode))
    inner = next(r for r in resources if r.type == INNER)
    props = _props(inner)
    props["vpcConfig"]["publicAccessCidrs"] = ["0.0.0.0/0"]
    inner.properties.Clear()
    inner.properties.update(props)
    found = of(pack().analyze_all(resources), "eks-public-endpoint-restricted")
    assert inner.urn in [v.urn for v in found]


def test_without_the_pack_knowing_pulumi_eks_components_the_service_role_would_be_refused(programs):
    """What the first real preview hit: eks:index:ServiceRole is only a component of pulumi-eks."""
    resources = run_resources(_spliced(programs, "prod", "known"))
    role = next(r for r in resources if r.type == "eks:index:ServiceRole")
    role.type = "eks:index:ServiceRoleRenamed"  # a type the pack's generated list does not name
    found = of(pack().analyze_all(resources), "unjudgeable-type")
    assert [v.urn for v in found] == [role.urn]


# -- the cluster decisions, as pulumi-eks's code turns them into its children -----------------------------
@pytest.mark.parametrize("stack", STACKS)
def test_the_inner_cluster_uses_the_private_subnets_only(stack, programs):
    run = _spliced(programs, stack, "known")
    inner = run.one(INNER)
    private = {r.id for r in run.of_type("aws:ec2/subnet:Subnet") if "private" in r.name}
    public = {r.id for r in run.of_type("aws:ec2/subnet:Subnet") if "public" in r.name}
    assert private and public
    assert set(inner.inputs["vpcConfig"]["subnetIds"]) == private


@pytest.mark.parametrize("stack", STACKS)
def test_bootstrap_settings_are_what_the_program_decided(stack, programs):
    inner = _spliced(programs, stack, "known").one(INNER)
    assert inner.inputs["bootstrapSelfManagedAddons"] is True
    assert inner.inputs["accessConfig"] == {
        "authenticationMode": "API",
        "bootstrapClusterCreatorAdminPermissions": True,
    }
    # pulumi-eks leaves both alone after creation: the engine skips diffs on them
    assert {"accessConfig.bootstrapClusterCreatorAdminPermissions", "bootstrapSelfManagedAddons"} <= set(
        inner.ignore_changes
    )


def test_pulumi_eks_children_ask_for_their_own_aws_provider_version(programs):
    """pulumi-eks's build pins @pulumi/aws: its children ask the engine for that version's default
    provider, beside the program's pulumi-aws (a second default aws provider in the stack)."""
    import importlib.metadata

    run = _spliced(programs, "prod", "known")
    versions = {r.version for r in run.resources if r.recorded_by and r.type.startswith("aws:")}
    assert versions == {load_facts()["sdk_versions"]["locked"]["@pulumi/aws"]}
    assert versions != {importlib.metadata.version("pulumi-aws")}


def test_admin_and_preview_principals_become_access_entries():
    admin, viewer = "arn:aws:iam::210987654321:role/platform-admins", "arn:aws:iam::210987654321:role/preview"
    config, secret_keys = engine_config_with(
        "dev", "cluster", adminPrincipalArns=[admin], previewPrincipalArns=[viewer]
    )
    entries = run_program("dev", config, secret_keys).one(COMPONENT).inputs["accessEntries"]
    by_principal = {e["principalArn"]: e["accessPolicies"] for e in entries.values()}
    assert by_principal[admin]["cluster-admin"]["policyArn"].endswith("/AmazonEKSClusterAdminPolicy")
    assert by_principal[viewer]["read-only"]["policyArn"].endswith("/AmazonEKSAdminViewPolicy")
    assert all(p["accessScope"] == {"type": "cluster"} for ps in by_principal.values() for p in ps.values())


# -- the first-preview mode ---------------------------------------------------------------------------------
@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_a_first_preview_has_no_ids_and_no_computed_outputs(stack, programs):
    run = _spliced(programs, stack, "first-preview")
    assert [r.name for r in run.resources if r.custom and r.id] == []
    messages = {r.name: r for r in run_resources(run)}
    assert _props(messages["gpu-nodes-ng"])["subnetIds"] == [UNKNOWN] * len(
        programs(stack).one("aws:eks/nodeGroup:NodeGroup", "gpu-nodes").inputs["subnetIds"]
    )
    inner = _props(next(m for m in messages.values() if m.type == INNER))
    assert inner["roleArn"] == UNKNOWN and inner["vpcConfig"]["subnetIds"] == UNKNOWN
    # known inputs stay known
    assert inner["version"] == programs(stack).one(COMPONENT).inputs["version"]
    # the known-inputs run has them
    assert programs(stack).one("aws:eks/nodeGroup:NodeGroup", "gpu-nodes").id


# -- resource options, as the engine hands them to an analyzer ----------------------------------------------
def test_options_reach_the_pack_as_the_engine_sends_them(programs):
    run = _spliced(programs, "prod", "known")
    messages = {r.urn: r for r in run_resources(run)}
    inner = messages[run.one(INNER).urn]
    assert "bootstrapSelfManagedAddons" in inner.options.ignoreChanges
    assert inner.options.protect and inner.options.parent == run.one(COMPONENT).urn
    (svc,) = run.of_type(RAY_SERVICE)
    options = messages[svc.urn].options
    assert options.customTimeouts.create == svc.custom_timeouts["create"] > 0
    assert options.deleteBeforeReplace == svc.delete_before_replace and options.deleteBeforeReplaceDefined
    cluster_component = run.one("llm-pd-eks:index:Cluster")
    assert list(messages[cluster_component.urn].options.aliases) == [
        "urn:pulumi:prod::llm-pd-eks::llm-pd-eks:index:Cluster::cluster"
    ]


# -- when the record does not fit ---------------------------------------------------------------------------
def test_a_changed_argument_is_named_as_stale(programs):
    config, secret_keys = engine_config_with("dev", "cluster", kubernetesVersion="1.34")
    run, warnings = splice(run_program("dev", config, secret_keys))
    assert len(warnings) == 1 and "recorded for other inputs" in warnings[0] and "make eks-children" in warnings[0]
    assert {r.type for r in run.resources if r.recorded_by} == CHILD_TYPES  # shown as recorded


def test_a_stack_with_no_record_is_named(programs):
    facts = json.loads(json.dumps(load_facts()))
    del facts["stacks"]["dev"]
    run, warnings = splice(programs("dev"), facts=facts)
    assert len(warnings) == 1 and "no children of pulumi-eks recorded for stack 'dev'" in warnings[0]
    assert not any(r.recorded_by for r in run.resources)


def test_the_preview_records_the_children_and_judges_a_first_preview(tmp_path, programs):
    result = harness.preview("prod", out=tmp_path / "out", progress=lambda _m: None, first_preview=True)
    assert result.exit_code == 0 and result.report.verdicts == []
    records = json.loads((tmp_path / "out" / "resources.json").read_text())
    recorded = [r for r in records if r["recorded_by"]]
    assert {r["type"] for r in recorded} == CHILD_TYPES
    inner = next(r for r in recorded if r["type"] == INNER)
    assert inner["inputs"]["roleArn"] == harness.UNKNOWN
    assert rpc.UNKNOWN not in json.dumps(records)  # the wire sentinel never reaches the artifact


def test_the_docs_quote_the_versions_and_policies_the_plan_holds(programs):
    """docs/cluster-access.md and docs/preview.md quote the provider versions and the access policies."""
    import importlib.metadata

    from helpers import ROOT

    from llm_pd_eks.cluster import PREVIEW_POLICY

    access = (ROOT / "docs" / "cluster-access.md").read_text()
    preview_doc = (ROOT / "docs" / "preview.md").read_text()
    facts = load_facts()
    aws_locked = facts["sdk_versions"]["locked"]["@pulumi/aws"]
    assert f"`@pulumi/aws` {aws_locked}" in access and f"`@pulumi/aws` {aws_locked}" in preview_doc
    assert f"pulumi-aws {importlib.metadata.version('pulumi-aws')}" in access
    assert PREVIEW_POLICY.rsplit("/", 1)[1] in access
    assert facts["pulumi_eks"]["describe"] in preview_doc
    assert f"default_{aws_locked.replace('.', '_')}" in preview_doc


def test_the_preview_warns_when_the_record_does_not_fit(tmp_path):
    """A stack whose arguments to pulumi-eks changed: one WARNING line names the command to rerun."""
    import os
    import subprocess
    import sys

    from helpers import ROOT, copy_checkout

    root = copy_checkout(tmp_path / "checkout")
    stack_file = root / "Pulumi.dev.yaml"
    text = stack_file.read_text()
    assert "  llm-pd-eks:cluster:\n" in text
    stack_file.write_text(
        text.replace("  llm-pd-eks:cluster:\n", '  llm-pd-eks:cluster:\n    kubernetesVersion: "1.34"\n')
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "llm_pd_eks_tools.plan.preview",
            "--stack=dev",
            f"--root={root}",
            f"--out={tmp_path / 'out'}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if "pulumi-eks" in line and line.startswith("WARNING")]
    assert len(lines) == 1 and "recorded for other inputs" in lines[0] and "make eks-children" in lines[0], done.stdout


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_put_back_inner_cluster_is_priced_once(stack, programs):
    from llm_pd_eks_tools.core.stack import stack_config
    from llm_pd_eks_tools.plan.preview.figures import key_figures

    config = stack_config(stack)
    before = key_figures(programs(stack), config, config.region)
    after = key_figures(_spliced(programs, stack, "known"), config, config.region)
    assert before.eks_clusters == after.eks_clusters == 1
    assert before.cost == after.cost
