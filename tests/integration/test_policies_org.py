"""The pack in an organization, through the analyzer protocol: component types recognized by package in
any project, pulumi-eks's components judged by their children, and what the pack does to other
projects' resources in a shared policy group (with and without `onlyProjects`)."""

from __future__ import annotations

import pytest
from google.protobuf import struct_pb2
from policy_fixtures import mandatory, of, pack

from llm_pd_eks.config import PROJECT
from llm_pd_eks.pulumi_sdk import analyzer_pb2
from llm_pd_eks_policy import universe
from llm_pd_eks_tools.plan.preview.remote_children import load_facts

TYPE = "unjudgeable-type"
ENDPOINT = "eks-public-endpoint-restricted"


def _res(
    project: str, type_: str, name: str, props: dict | None = None, parent: str = ""
) -> analyzer_pb2.AnalyzerResource:
    """A resource of `project`'s stack `org`, as the engine hands it to the pack."""
    parent_types = parent.split("::")[2].split("$")[-1] + "$" if parent else ""
    urn = f"urn:pulumi:org::{project}::{parent_types}{type_}::{name}"
    struct = struct_pb2.Struct()
    struct.update(props or {})
    return analyzer_pb2.AnalyzerResource(
        type=type_,
        name=name,
        urn=urn,
        parent=parent,
        properties=struct,
        options=analyzer_pb2.AnalyzerResourceOptions(parent=parent),
    )


def _judge(resources, config=None):
    return pack().analyze_all(list(resources), config)


def test_the_pack_names_the_package_the_component_provider_serves():
    assert universe.COMPONENT_PACKAGE == PROJECT


@pytest.mark.parametrize("project", ["platform-yaml", "inference-ts", PROJECT])
def test_the_component_package_types_are_components_in_any_project(project):
    top = _res(project, f"{PROJECT}:index:LlmPdEks", "llm")
    cluster = _res(project, f"{PROJECT}:index:Cluster", "cluster", parent=top.urn)
    assert of(_judge([top, cluster]), TYPE) == []


def test_a_type_of_another_package_named_like_the_project_is_still_refused():
    """Package recognition is by the package's name, not any token that merely contains it."""
    found = of(_judge([_res("platform", "llm-pd-eks-extra:index:Thing", "x")]), TYPE)
    assert [v.urn.split("::")[-1] for v in found] == ["x"]


def test_another_projects_own_component_is_judged_by_its_children():
    assert of(_judge([_res("billing", "billing:index:Ledger", "ledger")]), TYPE) == []


def test_pulumi_eks_components_are_judged_by_their_children():
    """The service role component the eks plugin registers inside its Cluster passes; its children are
    judged one by one (an IAM role is inert), and an unknown child type is still refused."""
    assert "eks:index:ServiceRole" in universe.EKS_COMPONENTS
    role = _res(PROJECT, "eks:index:ServiceRole", "cluster-eks-eksRole")
    inner = _res(PROJECT, "aws:iam/role:Role", "cluster-eks-eksRole-role", {"assumeRolePolicy": "{}"}, role.urn)
    odd = _res(PROJECT, "aws:sagemaker/endpoint:Endpoint", "cluster-eks-odd", {}, role.urn)
    found = of(_judge([role, inner, odd]), TYPE)
    assert [v.urn for v in found] == [odd.urn]


def test_the_pack_list_of_pulumi_eks_components_covers_every_component_recorded_from_its_code():
    facts = load_facts()
    recorded = {
        child["type"]
        for stack in facts["stacks"].values()
        for mode in stack.values()
        for child in mode["children"]
        if not child["custom"]
    }
    assert recorded and recorded <= set(universe.EKS_COMPONENTS)
    header = universe.EKS_COMPONENTS_FILE.read_text().splitlines()[0]
    assert facts["pulumi_eks"]["commit"] in header  # generated from the same pulumi-eks as the children


# -- a policy group shared with other projects ------------------------------------------------------------
def _other_project():
    """Another project's stack: a Lambda function (no rule judges it) and a wide-open public EKS endpoint."""
    return [
        _res("billing", "aws:lambda/function:Function", "invoices", {"runtime": "python3.12"}),
        _res(
            "billing",
            "aws:eks/cluster:Cluster",
            "billing-eks",
            {"vpcConfig": {"endpointPublicAccess": True, "publicAccessCidrs": ["0.0.0.0/0"], "subnetIds": ["s-1"]}},
        ),
    ]


def test_in_a_shared_group_another_projects_unknown_type_is_refused_by_default():
    verdicts = _judge(_other_project())
    assert [v.urn.split("::")[-1] for v in of(verdicts, TYPE)] == ["invoices"]
    assert [v.urn.split("::")[-1] for v in of(verdicts, ENDPOINT)] == ["billing-eks"]


def test_only_projects_leaves_other_projects_types_to_them_but_the_rules_still_judge_them():
    verdicts = _judge(_other_project(), {TYPE: {"onlyProjects": [PROJECT]}})
    assert of(verdicts, TYPE) == []
    assert [v.urn.split("::")[-1] for v in of(verdicts, ENDPOINT)] == ["billing-eks"]
    # and this project's own unknown types are still refused
    mine = _res(PROJECT, "aws:lambda/function:Function", "mine")
    assert [v.urn for v in mandatory(_judge([mine], {TYPE: {"onlyProjects": [PROJECT]}}))] == [mine.urn]
