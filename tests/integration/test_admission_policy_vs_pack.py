"""The cluster's admission policy and the PR-time pack judge the same pod fixtures alike: a Pod of the
pack's `gpu_container` (on the pack's p5 GPU stack, `policy_fixtures.gpu_stack`) through the real
analyzer protocol, and the same pod through the policy's CEL under cel-python: both find the same
fault (the pack's one EFA policy is the policy's `efa-devices` and `fi-provider-literal`)."""

from __future__ import annotations

import json
from typing import Any, Optional

import pytest
from policy_fixtures import Res, gpu_container, gpu_stack, judge, kv_transfer, mandatory

from llm_pd_eks.admission_cel import policy_cel
from llm_pd_eks_tools.ops.verify.admission import CelPolicy

CEL = CelPolicy.from_cel(policy_cel("p5.48xlarge"))  # gpu_stack's type
SERVE = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--kv-transfer-config"]


def container(
    efa: Optional[int] = 32, fi_provider: Optional[str] = "efa", backends: Any = ("LIBFABRIC",)
) -> dict[str, Any]:
    c = gpu_container(efa=efa, fi_provider=fi_provider)
    c["command"] = [*SERVE, json.dumps(kv_transfer(backends))]
    return c


def pod(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vllm", "namespace": "llm"},
        "spec": {"containers": [c], "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},
    }


EFA, NIXL = "ray-gpu-pods-efa", "nixl-libfabric-backend"  # the pack's policies


@pytest.mark.parametrize(
    "c, pack_faults, cel_faults",
    [
        (container(), set(), set()),
        (container(efa=16), {EFA}, {"efa-devices"}),
        (container(efa=None), {EFA}, {"efa-devices"}),
        (container(fi_provider="tcp"), {EFA}, {"fi-provider-literal"}),
        (container(backends=["UCX"]), {NIXL}, {"nixl-libfabric"}),
        (container(backends=["LIBFABRIC", "UCX"]), {NIXL}, {"nixl-libfabric"}),
        (container(backends=None), {NIXL}, {"nixl-libfabric"}),
        (container(efa=None, backends=["UCX"]), {EFA, NIXL}, {"efa-devices", "nixl-libfabric"}),
    ],
    ids=["good", "half-efa", "no-efa", "fi-tcp", "ucx", "libfabric-and-ucx", "no-backends", "two-faults"],
)
def test_both_judges_agree(c, pack_faults, cel_faults):
    manifest = pod(c)
    verdicts = mandatory(judge([*gpu_stack().values(), Res("kubernetes:core/v1:Pod", "vllm", manifest)]))
    assert {v.policy for v in verdicts} == pack_faults
    verdict = CEL.judge(manifest)
    assert verdict.errors == {}
    assert set(verdict.failed) == cel_faults
