"""Each difference docs/preview.md lists between the offline preview and `pulumi preview`, held by a
test: if one stops being true (the harness learns it, or the SDK changes), the page must change too."""

from __future__ import annotations

import functools
from types import SimpleNamespace

from google.protobuf import json_format

from llm_pd_eks_tools.plan.preview.analyzer import PolicyPackServer, run_resources
from llm_pd_eks_tools.plan.preview.mockrun import _Mocks, run_program
from llm_pd_eks_tools.plan.preview.remote_children import load_facts, splice

ROLE = "aws:iam/role:Role"


@functools.cache
def _first_preview(stack: str):
    return run_program(stack, first_preview=True)


def _props(message) -> dict:
    return json_format.MessageToDict(message.properties)


def test_analyze_gets_the_programs_inputs_not_the_providers_checked_inputs(programs):
    """No provider Check: no `tagsAll`, and no auto-name where the program gives no name."""
    run = programs("dev")
    messages = {m.urn: m for m in run_resources(run)}
    assert not any("tagsAll" in _props(m) for m in messages.values())
    node_role = run.one(ROLE, "cluster-node-role")
    assert "name" not in node_role.inputs and "name" not in _props(messages[node_role.urn])


class _Recorder:
    """An analyzer stub that keeps the requests instead of judging them."""

    def __init__(self) -> None:
        self.analyzed: list = []
        self.stack: list = []

    def Configure(self, request, timeout=None):
        return None

    def Analyze(self, request, timeout=None):
        self.analyzed.append(request)
        return SimpleNamespace(diagnostics=[])

    def AnalyzeStack(self, request, timeout=None):
        self.stack.extend(request.resources)
        return SimpleNamespace(diagnostics=[])


def test_analyze_stack_gets_the_same_inputs_not_the_resources_outputs(programs):
    server = PolicyPackServer()
    recorder = server._stub = _Recorder()
    server._info = SimpleNamespace(policies=[])
    run = programs("dev")
    server.analyze_all(run_resources(run))
    assert [_props(r) for r in recorder.stack] == [_props(r) for r in recorder.analyzed]
    role = next(r for r in recorder.stack if r.type == ROLE)
    assert "arn" not in _props(role)  # an output the engine's AnalyzeStack would carry


def test_urns_name_the_parents_type_only(programs):
    """The engine's URN carries every ancestor's type; the mock monitor's only the parent's."""
    node_role = programs("dev").one(ROLE, "cluster-node-role")
    assert node_role.urn.split("::")[2] == f"llm-pd-eks:index:Cluster${ROLE}"  # no LlmPdEks before it


def test_no_default_provider_is_registered_and_the_version_asked_for_is_recorded(programs):
    run, _ = splice(programs("prod"))
    assert run.of_type("pulumi:providers:aws") == []
    vpc = run.one("aws:ec2/vpc:Vpc")
    assert vpc.provider == ""
    children = [r for r in run.resources if r.recorded_by and r.type.startswith("aws:")]
    assert children and {r.version for r in children} == {load_facts()["sdk_versions"]["locked"]["@pulumi/aws"]}


def test_invokes_are_answered_by_the_mocks_with_fixed_values():
    mocks = _Mocks()
    assert mocks.call(SimpleNamespace(token="aws:index/getCallerIdentity:getCallerIdentity"))["accountId"] == (
        "123456789012"
    )
    assert mocks.call(SimpleNamespace(token="aws:index/getRegion:getRegion"))["name"] == "us-west-2"
    assert mocks.call(SimpleNamespace(token="aws:ec2/getAmi:getAmi")) == {}


def test_known_input_ids_are_made_up_by_the_mocks(programs):
    run = programs("dev")
    subnet = next(r for r in run.of_type("aws:ec2/subnet:Subnet"))
    assert subnet.id == f"{subnet.name}-id" and subnet.id in run.mock_values


def test_a_first_preview_leaves_a_remote_components_outputs_all_unknown():
    run = _first_preview("dev")
    (cluster,) = run.of_type("eks:index:Cluster")
    assert cluster.outputs == {}


def test_only_pulumi_eks_cluster_children_are_put_back(programs):
    """The plan's remote components (non-custom types of another package): eks:index:Cluster, whose
    children are put back, and the KubeRay CRDs' yaml/v2 ConfigFiles, whose children (the
    CustomResourceDefinitions their files hold, inert for the pack) are not."""
    from llm_pd_eks_policy.universe import INERT

    run, _ = splice(programs("prod"))
    remote = {r.type for r in run.resources if not r.custom and not r.type.startswith(("llm-pd-eks:", "pulumi:"))}
    assert remote == {"eks:index:Cluster", "eks:index:ServiceRole", "kubernetes:yaml/v2:ConfigFile"}
    files = run.of_type("kubernetes:yaml/v2:ConfigFile")
    assert files and not any(r.parent in {f.urn for f in files} for r in run.resources)
    assert "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition" in INERT


def test_the_oidc_thumbprint_is_a_fixed_value_offline(programs):
    known = next(
        c for c in load_facts()["stacks"]["dev"]["known"]["children"] if c["type"].endswith("OpenIdConnectProvider")
    )
    assert known["inputs"]["thumbprintLists"] == ["0" * 40]


def test_kubernetes_objects_are_judged_as_the_program_writes_them(programs):
    """No API server dry run: no defaults, no server-set fields."""
    run = programs("dev")
    namespace = next(r for r in run.of_type("kubernetes:core/v1:Namespace"))
    message = next(m for m in run_resources(run) if m.urn == namespace.urn)
    assert "status" not in _props(message) and "uid" not in _props(message).get("metadata", {})
