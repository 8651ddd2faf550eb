"""What the preview diff says a GPU change will cost: blue/green, recreate, in place, or EKS's failing roll.

Both sides are the program's own plans (the mock engine run, recorded as resources.json records),
so the test follows the real node group and launch template, not a hand-made stand-in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import engine_config_with

from llm_pd_eks.prices import load_prices
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.gpu_node_rollout import (
    BLUE_GREEN,
    EKS_ROLL,
    IN_PLACE,
    NO_CHANGE,
    RECREATE,
    classify_gpu_roll,
)
from llm_pd_eks_tools.plan.preview.diff import Side, compare, render
from llm_pd_eks_tools.plan.preview.harness import resource_records
from llm_pd_eks_tools.plan.preview.mockrun import run_program

RID = "cr-0123456789abcdef0"
P5_HOURLY = load_prices().regions["us-east-1"]["instances"]["p5.48xlarge"]


def records(**gpu_changes) -> dict[str, dict]:
    run = run_program("prod", *engine_config_with("prod", "gpuNodes", **gpu_changes))
    return {r["urn"]: r for r in resource_records(run)}


@pytest.fixture(scope="module")
def prod() -> dict[str, dict]:
    return records()


def test_unchanged_plan_is_no_change(prod):
    assert classify_gpu_roll(prod, records()).kind == NO_CHANGE


def test_template_change_on_demand_is_blue_green_with_its_cost(prod):
    roll = classify_gpu_roll(prod, records(diskSizeGib=600), P5_HOURLY)
    desired = stack_config("prod").gpu_nodes.desired_size
    assert roll.kind == BLUE_GREEN and not roll.downtime
    assert roll.extra_nodes == desired and roll.hourly == pytest.approx(desired * P5_HOURLY)
    assert any("blockDeviceMappings" in r for r in roll.reasons), roll.reasons
    line = roll.describe()
    assert f"{desired} extra GPU node(s) while both run (about ${desired * P5_HOURLY:,.2f}/hour)" in line
    assert roll.old_name != roll.new_name and f"`{roll.new_name}`" in line


def test_template_change_on_a_reservation_is_recreate_with_downtime():
    before = records(capacity={"reservationId": RID})
    roll = classify_gpu_roll(before, records(capacity={"reservationId": RID}, diskSizeGib=600), P5_HOURLY)
    assert roll.kind == RECREATE and roll.downtime and roll.hourly is None
    assert "the endpoint is DOWN" in roll.describe()


def test_scaling_change_is_in_place(prod):
    roll = classify_gpu_roll(prod, records(maxSize=7))
    assert roll.kind == IN_PLACE and roll.reasons == ("scalingConfig.maxSize",)


def test_template_change_keeping_the_group_name_is_the_failing_eks_roll(prod):
    """Today's plan shape: the template changes under a group whose name stays (EKS rolls it in place)."""
    changed = records(diskSizeGib=600)
    (ng_urn,) = [u for u, r in prod.items() if r["type"] == "aws:eks/nodeGroup:NodeGroup" and "gpu" in r["name"]]
    changed[ng_urn] = {
        **changed[ng_urn],
        "inputs": {**changed[ng_urn]["inputs"], "nodeGroupName": prod[ng_urn]["inputs"]["nodeGroupName"]},
    }
    roll = classify_gpu_roll(prod, changed, P5_HOURLY)
    # update strategy MINIMAL (node_common.IN_PLACE_UPDATE): no surge, one node at a time
    assert roll.kind == EKS_ROLL and roll.extra_nodes == 0 and roll.hourly is None
    assert "one node at a time (MINIMAL)" in roll.describe() and "PodEvictionFailure" in roll.describe()
    default = {**changed[ng_urn]["inputs"], "updateConfig": {"maxUnavailable": 1, "updateStrategy": "DEFAULT"}}
    surged = classify_gpu_roll(prod, {**changed, ng_urn: {**changed[ng_urn], "inputs": default}}, P5_HOURLY)
    assert surged.extra_nodes == 2 and surged.hourly == pytest.approx(2 * P5_HOURLY)  # max(2 x 1 AZ, 1)


def test_preview_diff_prints_the_gpu_line(prod):
    base = Side("base", Path("."), 0, "", prod, None)
    head = Side("head", Path("."), 0, "", records(diskSizeGib=600), None)
    text = render(compare("prod", base, head))
    (line,) = [x for x in text.splitlines() if x.startswith("**GPU nodes:**")]
    assert "replaced blue/green" in line and "extra GPU node(s)" in line
    assert "**Cut-over:**" in text
    assert "**GPU nodes:**" not in render(compare("prod", base, Side("head", Path("."), 0, "", prod, None)))
