"""What the Ray pods ask Kubernetes for: the head sized as the AWS Ray LLM DLC sizes it.

The DLC's own KubeRay test manifest is vendored as data (tests/data/dlc-ray-llm, SOURCE); quantities
are compared by value, not by spelling.
"""

from __future__ import annotations

import json
from decimal import Decimal

from helpers import DATA, RAY_SERVICE
from kuberay_start_params import parse_quantity

from llm_pd_eks_tools.preview.mockrun import ProgramRun

KINDS = ("requests", "limits")
DLC = json.loads((DATA / "dlc-ray-llm" / "eks-multi-node-pods.json").read_text())


def amounts(resources: dict) -> dict[str, dict[str, Decimal]]:
    """requests and limits by value (Kubernetes' resource.ParseQuantity, tests/kuberay_start_params.py)."""
    return {kind: {k: parse_quantity(str(v)) for k, v in (resources.get(kind) or {}).items()} for kind in KINDS}


def head_container(run: ProgramRun) -> dict:
    spec = run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "ray-head"]
    return container


def test_the_head_is_sized_as_the_dlc_sizes_its_head(run: ProgramRun):
    assert amounts(head_container(run)["resources"]) == amounts(DLC["head"]["resources"])
