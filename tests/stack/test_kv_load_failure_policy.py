"""What a decode replica does when reading a request's KV cache from prefill fails: it recomputes.

Judged by the image's vLLM's own option (tests/data/vllm/engine-args-<vLLM>.json, generated from the
wheel's vllm/config/kv_transfer.py by llm_pd_eks_tools/maint/gen_vllm_facts.py): the value is one vLLM
accepts and not its default (`fail`, which ends the request with an error).
"""

from __future__ import annotations

import json

import yaml
from helpers import DATA, RAY_SERVICE

from llm_pd_eks.versions import DLC_VLLM_VERSION
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun

FACTS = DATA / "vllm" / f"engine-args-{DLC_VLLM_VERSION}.json"
VLLM = json.loads(FACTS.read_text())["kv_load_failure_policy"]


def kv_transfer_configs(run: ProgramRun) -> dict[str, dict]:
    (app,) = yaml.safe_load(run.one(RAY_SERVICE).inputs["spec"]["serveConfigV2"])["applications"]
    args = app["args"]
    return {role: args[f"{role}_config"]["engine_kwargs"]["kv_transfer_config"] for role in ("prefill", "decode")}


def test_both_roles_set_the_policy_explicitly_to_recompute(run: ProgramRun):
    for role, kv in kv_transfer_configs(run).items():
        assert kv["kv_load_failure_policy"] in VLLM["values"], role
        # explicit, and not vLLM's default: a failed read must not end the client's request
        assert kv["kv_load_failure_policy"] == "recompute" != VLLM["default"], role


def test_the_policy_is_written_in_the_manifest_for_a_reviewer(run: ProgramRun):
    text = run.one(RAY_SERVICE).inputs["spec"]["serveConfigV2"]
    assert text.count("kv_load_failure_policy: recompute") == 2
