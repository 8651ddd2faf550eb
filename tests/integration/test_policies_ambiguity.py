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
        (
            Res("pulumi:pulumi:StackReference", "network", {"name": "org/network/prod"}),
            "pulumi:pulumi:StackReference 'network'",
        ),
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


# -- launch template versions ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "version, template, violation",
    [
        ("$Latest", {"latestVersion": 3}, False),
        (UNKNOWN, {"latestVersion": UNKNOWN, "id": "lt-0123"}, False),  # template.latest_version, changing
        ("3", {"latestVersion": 3}, False),
        ("2", {"latestVersion": 3}, True),  # an older version than the one the plan shows
        ("3", {"latestVersion": UNKNOWN, "id": "lt-0123"}, True),  # the template is changing: 3 is the old one
        ("$Default", {"latestVersion": 3}, True),  # the default stays at version 1
        ("$Default", {"latestVersion": 3, "updateDefaultVersion": True}, False),
        ("$Default", {"latestVersion": 3, "defaultVersion": 3}, False),
        ("$Default", {"latestVersion": 1}, False),
        ("latest", {"latestVersion": 3}, True),
    ],
    ids=[
        "latest",
        "output",
        "same-number",
        "older-number",
        "number-while-changing",
        "default",
        "default-updated",
        "default-pinned",
        "default-single",
        "not-a-version",
    ],
)
def test_launch_template_version_is_the_one_judged(version, template, violation):
    stack = gpu_stack()
    stack["lt"].props.update(template)
    stack["ng"].props["launchTemplate"]["version"] = version
    found = of(judge(stack), REFS)
    assert bool(found) == violation
    if violation:
        assert "launch template 'gpu-nodes-lt' version" in found[0].message
        assert of(judge(stack, {REFS: {"unjudgeable": {"allow": ["gpu-nodes-ng"]}}}), REFS) == []


# -- mixed-instances overrides with their own launch template ---------------------------------------
def _mixed(unknown_ids: bool) -> list[Res]:
    """An ASG of the baseline's EFA template, plus a p5 override launched from a second template."""
    from policy_fixtures import LAUNCH_TEMPLATE

    stack = gpu_stack(unknown_ids=unknown_ids)
    # The second template names no type of its own: the override gives it (so only the override
    # tells the pack that this template launches p5 instances).
    props = {k: v for k, v in stack["lt"].props.items() if k != "instanceType"}
    second = Res(
        LAUNCH_TEMPLATE,
        "second-lt",
        {**props, "id": UNKNOWN if unknown_ids else "lt-0456"},
        deps=dict(stack["lt"].deps),
        parent=stack["component"],
    )
    asg = Res(
        "aws:autoscaling/group:Group",
        "gpu-asg",
        {
            "vpcZoneIdentifiers": [UNKNOWN if unknown_ids else "subnet-us-west-2a-id"],
            "mixedInstancesPolicy": {
                "launchTemplate": {
                    "launchTemplateSpecification": {
                        "launchTemplateId": UNKNOWN if unknown_ids else "lt-0123",
                        "version": "$Latest",
                    },
                    "overrides": [
                        {"instanceType": "p5.48xlarge"},
                        {
                            "instanceType": "p5.48xlarge",
                            "launchTemplateSpecification": {
                                "launchTemplateId": UNKNOWN if unknown_ids else "lt-0456",
                                "version": "$Latest",
                            },
                        },
                    ],
                }
            },
        },
        deps={"vpcZoneIdentifiers": [stack["subnet-us-west-2a"]], "mixedInstancesPolicy": [stack["lt"], second]},
    )
    if not unknown_ids:
        stack["lt"].props["id"] = "lt-0123"
    del stack["ng"]
    return [*stack.values(), second, asg]


@pytest.mark.parametrize("unknown_ids", [False, True], ids=["literal-ids", "first-preview"])
def test_each_overrides_own_launch_template_is_judged(unknown_ids):
    resources = _mixed(unknown_ids)
    assert mandatory(judge(resources)) == []
    second = next(r for r in resources if r.name == "second-lt")
    second.props["networkInterfaces"] = second.props["networkInterfaces"][:1]  # 1 of p5's 32 EFA cards
    found = of(judge(resources), "efa-interface-count")
    assert found and all(v.urn == second.urn for v in found)
