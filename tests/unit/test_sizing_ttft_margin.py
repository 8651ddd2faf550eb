"""The sizer plans TTFT with the model's measured shortfall under load folded in: the ratio is the
lowest predicted/measured mean TTFT of the 8B at 8-128 closed-loop clients on the saved GPU
calibration, and every feasible plan's TTFT sits within that fraction of the objective."""

from __future__ import annotations

import math

import pytest
from helpers import ROOT

from llm_pd_eks_sizing.calibrate import gpu_fit
from llm_pd_eks_sizing.model import VLLM_BF16, load_workload, size
from llm_pd_eks_sizing.model.engine import CALIBRATION_RUN
from llm_pd_eks_sizing.model.plan import TTFT_UNDER_LOAD_RATIO, ttft_budget_s
from llm_pd_eks_tools.core.stack import stack_config

SMALL_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def test_the_ratio_is_the_calibrations_worst_under_load():
    record = gpu_fit.load_records(sorted((ROOT / CALIBRATION_RUN).glob("*.json")))
    ceiling = gpu_fit.ceiling_level(record)
    judged = gpu_fit.judge(
        SMALL_MODEL,
        record["models"][SMALL_MODEL],
        record["instance_type"],
        VLLM_BF16,
        (ceiling[0], ceiling[1]["label"]),
    )
    ratios = [j.predicted / j.measured for j in judged if j.metric == "ttft_ms" and 8 <= j.clients <= 128]
    assert len(ratios) >= 8
    assert math.floor(min(ratios) * 100) / 100 == TTFT_UNDER_LOAD_RATIO


def test_every_feasible_plan_keeps_its_ttft_within_the_ratio():
    for stack in ("dev", "staging", "prod"):
        result = size(stack, stack_config(stack, ROOT), load_workload(ROOT / "workloads" / f"{stack}.yaml"))
        budget_ms = ttft_budget_s(result.workload) * 1e3
        assert budget_ms == pytest.approx(result.workload.slo.ttft_ms * TTFT_UNDER_LOAD_RATIO)
        for plan in (result.disaggregated, result.aggregated):
            for side in plan.sides if plan.feasible else ():
                if side.ttft_ms is not None:
                    assert side.ttft_ms <= budget_ms, (stack, plan.mode, side.role)
        assert any("TTFT planned at 0.65 of the objective" in f for f in result.flags)
