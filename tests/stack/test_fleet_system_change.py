"""A system node change builds no second Ray cluster: the head selects system nodes by role, so the
RayService is unchanged, no GPU node is added, and the preview's cut-over says what does happen (one head
restart when the old system group goes, carried by GCS fault tolerance, or DOWN without it).

Both sides are the program's own plans (the mock engine run, as resources.json records), as
`make preview-diff` compares them.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers import NODE_GROUP, RAY_SERVICE

from llm_pd_eks_tools.core.stack import load_stack_config
from llm_pd_eks_tools.plan.cutover import plan_cutover
from llm_pd_eks_tools.plan.gpu_node_rollout import BLUE_GREEN, SYSTEM_COMPONENT, classify_node_group_roll
from llm_pd_eks_tools.plan.preview.diff import Side, compare, render
from llm_pd_eks_tools.plan.preview.harness import resource_records
from llm_pd_eks_tools.plan.preview.mockrun import run_program
from stack.test_cutover import P5_HOURLY, one

SYSTEM_TYPE = "m7i.4xlarge"  # prod runs m7i.2xlarge


def records(**sections: dict) -> dict[str, dict]:
    config, secret_keys = load_stack_config("prod")
    for section, changes in sections.items():
        key = f"llm-pd-eks:{section}"
        config[key] = json.dumps({**json.loads(config[key]), **changes})
    return {r["urn"]: r for r in resource_records(run_program("prod", config, secret_keys))}


def test_a_system_type_change_leaves_the_ray_cluster_and_adds_no_gpu_node():
    before, after = records(), records(systemNodes={"instanceType": SYSTEM_TYPE})
    system = classify_node_group_roll(before, after, SYSTEM_COMPONENT)
    assert system.kind == BLUE_GREEN and system.old_name != system.new_name
    # the RayService (the head's nodeSelector inside KubeRay's cluster hash) does not change at all
    assert one(before, RAY_SERVICE, "rayservice")["inputs"] == one(after, RAY_SERVICE, "rayservice")["inputs"]
    assert one(before, NODE_GROUP, "gpu-nodes")["inputs"] == one(after, NODE_GROUP, "gpu-nodes")["inputs"]
    plan = plan_cutover(before, after, P5_HOURLY)
    group_step, delete, head = plan.steps
    assert group_step.startswith(f"System nodes: `{system.new_name}`")
    assert delete.startswith(f"Pulumi deletes `{system.old_name}`")
    assert "no second Ray cluster, no extra GPU nodes" in head and "GCS fault tolerance keeps" in head
    assert (plan.overlap_hours, plan.overlap_gpu_hours, plan.overlap_cost, plan.downtime) == (0.0, 0.0, 0.0, False)
    # the preview diff shows the same figures
    text = render(
        compare("prod", Side("base", Path("."), 0, "", before, None), Side("head", Path("."), 0, "", after, None))
    )
    assert "overlap the new ones for up to 0.00 h (0.0 GPU-hours); no downtime." in text
    assert "restarts on a node of the new group" in text


def test_without_gcs_fault_tolerance_the_head_restart_is_downtime():
    serving = {"gcsFaultTolerance": False}
    before = records(serving=serving)
    after = records(serving=serving, systemNodes={"instanceType": SYSTEM_TYPE})
    plan = plan_cutover(before, after, P5_HOURLY)
    assert plan.downtime and "DOWN" in plan.steps[-1]
    assert "the endpoint is DOWN while the new cluster loads" in plan.lines()[-1]
