"""Ambiguity fails closed, through the real analyzer protocol: a GPU group's reference whose value is
not known and comes from something other than the expected resource (a component's output, a remote
component, a StackReference, another provider's resource, an invoke) is refused by
gpu-references-in-stack with how to make it judgeable, unless the policy config names the group."""

from __future__ import annotations

import pytest
from policy_fixtures import UNKNOWN, Res, gpu_stack, judge, mandatory, of

REFS = "gpu-references-in-stack"


def test_first_preview_baseline_is_clean():
    assert mandatory(judge(gpu_stack(unknown_ids=True))) == []


def _subnets_from(feeder: Res | None) -> list[Res]:
    stack = gpu_stack(unknown_ids=True)
    stack["ng"].deps["subnetIds"] = [feeder] if feeder else []
    return [*stack.values(), *([feeder] if feeder else [])]


@pytest.mark.parametrize(
    "feeder, named",
    [
        (Res("awsx:ec2:Vpc", "vpc", {}), "awsx:ec2:Vpc 'vpc'"),  # a remote component's output
        (Res("pulumi:pulumi:StackReference", "network", {"name": "org/network/prod"}),
         "pulumi:pulumi:StackReference 'network'"),
        (None, "invoke"),  # unknown with nothing recorded as its source
    ],
    ids=["remote-component", "stack-reference", "invoke"],
)
def test_subnet_ids_from_an_unresolvable_source(feeder, named):
    found = of(judge(_subnets_from(feeder)), REFS)
    assert len(found) == 1 and "subnet IDs from" in found[0].message and named in found[0].message
    assert "unjudgeable.allow" in found[0].message and "'gpu-nodes-ng'" in found[0].message


def test_opt_out_is_by_the_groups_name():
    resources = _subnets_from(Res("awsx:ec2:Vpc", "vpc", {}))
    assert of(judge(resources, {REFS: {"unjudgeable": {"allow": ["other-group"]}}}), REFS)
    assert of(judge(resources, {REFS: {"unjudgeable": {"allow": ["gpu-nodes-ng"]}}}), REFS) == []


def test_placement_group_from_another_provider():
    stack = gpu_stack(unknown_ids=True)
    native = Res("aws-native:ec2:PlacementGroup", "pg-native", {"strategy": "cluster"})
    stack["lt"].deps["placement"] = [native]
    found = of(judge([*stack.values(), native]), REFS)
    assert len(found) == 1 and "aws-native:ec2:PlacementGroup 'pg-native'" in found[0].message
    assert "of launch template 'gpu-nodes-lt'" in found[0].message


def test_launch_template_from_a_component_output():
    stack = gpu_stack(unknown_ids=True)
    comp = Res("llm-pd-eks:index:Templates", "templates", {})
    stack["ng"].deps["launchTemplate"] = [comp]
    found = of(judge([*stack.values(), comp]), REFS)
    assert len(found) == 1 and "launch template from llm-pd-eks:index:Templates 'templates'" in found[0].message


def test_known_references_are_not_affected():
    # Literal IDs linked by value (as after an update) stay judged as before.
    from policy_fixtures import without_deps

    assert mandatory(judge(without_deps(gpu_stack()))) == []
    stack = gpu_stack(unknown_ids=True)
    stack["ng"].props["subnetIds"] = UNKNOWN  # the whole list unknown, fed by the subnets: resolved by deps
    assert mandatory(judge(stack)) == []
