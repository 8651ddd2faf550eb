"""The generator of pulumi-eks's recorded children, without node: how record.js's registrations become
facts (positions for URNs, the lock's versions), and how the preview turns them back into a plan."""

from __future__ import annotations

from llm_pd_eks.pulumi_sdk import rpc
from llm_pd_eks_tools.maint import gen_eks_children as gen
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration, duration_seconds
from llm_pd_eks_tools.plan.preview.remote_children import children_of

PARENT = "urn:pulumi:dev::proj::proj:index:Cluster::cluster"
OWN = "urn:pulumi:dev::proj::proj:index:Cluster$eks:index:Cluster::c"


def _reg(type_, name, parent, custom=True, obj=None, deps=(), version="7.25.0"):
    return {
        "type": type_,
        "name": name,
        "parent": parent,
        "custom": custom,
        "protect": None,
        "provider": "",
        "version": version,
        "object": obj or {},
        "dependencies": list(deps),
        "propertyDependencies": {"role": list(deps)} if deps else {},
        "ignoreChanges": [],
        "replaceOnChanges": [],
        "deleteBeforeReplace": False,
        "deleteBeforeReplaceDefined": False,
        "additionalSecretOutputs": [],
        "aliasSpecs": [],
        "aliasURNs": [],
        "customTimeouts": {"create": "15m", "update": "", "delete": "1h30m"},
        "retainOnDelete": None,
        "id": f"{name}-id",
    }


def _recorded():
    """What record.js prints: the mock monitor's URNs name only the parent's last type."""
    role_urn = "urn:pulumi:dev::proj::eks:index:ServiceRole$aws:iam/role:Role::c-role"
    ref = {rpc._special_sig_key: rpc._special_resource_sig, "urn": role_urn, "id": "c-role-id"}
    return [
        _reg("eks:index:Cluster", "c", PARENT, custom=False, version=""),
        _reg("eks:index:ServiceRole", "c-sr", OWN, custom=False, version=""),
        _reg("aws:iam/role:Role", "c-role", "urn:pulumi:dev::proj::eks:index:Cluster$eks:index:ServiceRole::c-sr"),
        _reg(
            "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            "c-att",
            "urn:pulumi:dev::proj::eks:index:Cluster$eks:index:ServiceRole::c-sr",
            obj={"role": ref},
            deps=[role_urn],
        ),
        _reg("pulumi:providers:kubernetes", "c-k8s", OWN, version="4.18.1"),
    ]


def test_registrations_become_positions_and_locked_versions():
    children = gen._children(_recorded(), {"@pulumi/aws": "7.25.0", "@pulumi/kubernetes": "4.19.0"})
    assert [c["parent"] for c in children] == [-1, 0, 0, -1]
    attachment = children[2]
    assert attachment["dependencies"] == [1] and attachment["propertyDependencies"] == {"role": [1]}
    assert attachment["inputs"]["role"]["urn"] == 1  # a resource reference names the child it points at
    assert children[3]["version"] == "4.19.0"  # the lock's version, where another was installed


def test_the_preview_puts_them_back_with_urns_refs_and_timeouts():
    facts_children = gen._children(_recorded(), {"@pulumi/aws": "7.25.0"})
    component = Registration(
        urn=OWN,
        type="eks:index:Cluster",
        name="c",
        parent=PARENT,
        custom=False,
        protect=True,
        provider="",
        dependencies=[],
        property_dependencies={},
        inputs={},
        inputs_struct=None,
    )
    made = children_of(component, {"children": facts_children}, "known")
    by_name = {r.name: r for r in made}
    assert by_name["c-role"].parent == by_name["c-sr"].urn
    assert by_name["c-role"].urn == "urn:pulumi:dev::proj::eks:index:ServiceRole$aws:iam/role:Role::c-role"
    assert by_name["c-att"].dependencies == [by_name["c-role"].urn]
    assert by_name["c-att"].inputs["role"] == "c-role-id"  # a reference is its id in `inputs`
    assert by_name["c-role"].custom_timeouts == {"create": 900.0, "delete": 5400.0}
    first = {r.name: r for r in children_of(component, {"children": facts_children}, "first-preview")}
    assert first["c-role"].id == "" and first["c-att"].inputs["role"] == by_name["c-role"].urn
    assert isinstance(ProgramRun(stack="dev", resources=made, stack_outputs={}).one("aws:iam/role:Role"), Registration)


def test_durations_are_read_as_the_engine_reads_them():
    assert duration_seconds("45m") == 2700.0 and duration_seconds("1h30m") == 5400.0
    assert duration_seconds("90s") == 90.0


def test_the_inputs_digest_ignores_key_order():
    assert gen.inputs_digest({"a": 1, "b": [2]}) == gen.inputs_digest({"b": [2], "a": 1})
    assert gen.inputs_digest({"a": 1}) != gen.inputs_digest({"a": 2})


def test_a_folder_that_is_no_pulumi_eks_clone_is_one_line(tmp_path):
    import pytest

    from llm_pd_eks_tools.core.cli import Exit, ToolError

    with pytest.raises(ToolError) as error:
        gen.generate(tmp_path, "HEAD", tmp_path / "work")
    assert error.value.exit_code == Exit.USAGE and "github.com/pulumi/pulumi-eks" in str(error.value)
