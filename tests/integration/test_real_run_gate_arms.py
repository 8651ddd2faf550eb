"""The traffic gate's three GPU arms (llm_pd_eks_sizing/realrun/gpu_gate.py) on a cluster stood in for
on the CPU: the arms' own phase code, the rendered dev configs, the verify package's canaries and
`canary.judge`; only the endpoints are fakes. The fake answers each chat from its prompt alone (what
greedy decoding of one model does, aggregated or P/D) and moves the decode side's NIXL counters as
vLLM 0.26's NixlConnector does: one pull a request when the two engines' compatibility hashes agree
(the same model path among its factors), one failed transfer (`_handle_failed_transfer`) when not."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from llm_pd_eks_sizing.realrun import gpu_gate, gpu_main, render

KV_PER_TOKEN = 57344  # Qwen2.5-7B: 28 layers x 4 KV heads x 128 x K and V x 2 bytes
ARMS = ("gate-agg", "gate", "gate-broken")


class FakeCluster:
    """The serve endpoint and the decode raylet's metrics endpoint of whatever was deployed last."""

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.pulls = self.bytes = self.failed = 0.0
        self.prompts: list[str] = []

    def deployed(self, evidence: dict, config: dict, clock: Any) -> bool:
        self.config = config
        evidence["app_status"] = "RUNNING"
        return True

    def http(self, method: str, url: str, body: Optional[dict] = None, timeout: float = 60) -> tuple[int, str]:
        if url.endswith("/metrics"):  # a counter never incremented is not exported
            series = {
                "ray_vllm_nixl_bytes_transferred_count": self.pulls,
                "ray_vllm_nixl_bytes_transferred_sum": self.bytes,
                "ray_vllm_nixl_num_failed_transfers_total": self.failed,
            }
            lines = [f'{name}{{Component="decode"}} {value}' for name, value in series.items() if value]
            return 200, "\n".join(["# TYPE ray_vllm_nixl_bytes_transferred histogram", *lines])
        assert url.endswith("/v1/chat/completions") and body is not None
        prompt = body["messages"][0]["content"]
        self.prompts.append(prompt)
        tokens = round(len(prompt.split()) * 1.3)
        engines = dict(gpu_gate.engine_configs(self.config))
        if "decode" in engines:
            source = {role: engines[role]["model_loading_config"]["model_source"] for role in ("prefill", "decode")}
            if source["prefill"] == source["decode"]:
                self.pulls, self.bytes = self.pulls + 1, self.bytes + tokens * KV_PER_TOKEN * 0.98
            else:
                self.failed += 1  # the handshake fails; `recompute` prefills on decode and still answers
        reply = {
            "choices": [{"message": {"content": f"answer {len(prompt) % 997}"}}],
            "usage": {"prompt_tokens": tokens},
        }
        return 200, json.dumps(reply)

    def chat(self, model: str, content: str, max_tokens: int = 16) -> dict:
        status, text = self.http("POST", f"{gpu_main.SERVE}/v1/chat/completions", {"messages": [{"content": content}]})
        return {"status": status, "usage": json.loads(text)["usage"]}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two serve configs the arms read, as render writes them for the dev stack."""
    out = tmp_path_factory.mktemp("bundle")
    inputs = render.run_inputs(render.load_overrides())
    (out / "serve-pd.json").write_text(json.dumps(inputs["serve_pd"]))
    (out / "serve-agg.json").write_text(json.dumps(inputs["serve_agg"]))
    return out


@pytest.fixture
def arms(bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeCluster, dict[str, dict]]:
    """The three arms in their order on one fake cluster: arm -> its evidence and deployed config."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(
        (render.MODEL_CONFIGS / "Qwen" / "Qwen2.5-7B-Instruct" / "config.json").read_text()
    )
    monkeypatch.setattr(gpu_gate, "REFERENCE_FILE", tmp_path / "gate-reference.json")
    monkeypatch.setattr(gpu_gate, "BROKEN_MODEL_DIR", tmp_path / "model-decode")
    cluster = FakeCluster()
    run = SimpleNamespace(
        Clock=gpu_main.Clock,
        begin=lambda phase, clock: {"phase": phase, "timings": clock.timings},
        MODEL_DIR=model_dir,
        ensure_raylets=lambda bundle, evidence: evidence.update(raylets="fake"),
        deployed=cluster.deployed,
        http=cluster.http,
        chat=cluster.chat,
        SERVE=gpu_main.SERVE,
        METRICS_PORTS=gpu_main.METRICS_PORTS,
        EXPORT_WAIT_S=0,
        NIXL_BACKEND_LINE=gpu_main.NIXL_BACKEND_LINE,
        nixl_log_lines=lambda: ["worker-1.out: NIXL INFO nixl_agent.py:1 Backend UCX was instantiated"],
        long_prompt=gpu_main.long_prompt,
        log=lambda *parts: None,
    )
    found = {}
    for phase in ARMS:
        evidence = gpu_gate.phase_gate(run, bundle, tmp_path, phase)
        found[phase] = {"evidence": json.loads(json.dumps(evidence, default=str)), "config": cluster.config}
    return cluster, found


def statuses(evidence: dict) -> dict[str, str]:
    return {v["name"]: v["status"] for v in evidence["gate"]}


def test_every_arm_sends_the_same_canaries_sized_for_the_runs_context(arms):
    cluster, found = arms
    items = gpu_gate.canary.canaries(words=gpu_gate.CANARY_WORDS)
    prompts = [c.prompt for c in items]
    canary_prompts = [p for p in cluster.prompts if p in prompts]
    assert canary_prompts == prompts * 3  # the reference is comparable: one prompt list, in order, per arm
    assert all(found[a]["evidence"]["canary_words"] == 600 for a in ARMS)
    assert all(len(p.split()) < gpu_gate.canary.DEFAULT_WORDS / 3 for p in prompts)


def test_the_aggregated_arm_keeps_its_answers_as_the_reference(arms):
    _, found = arms
    agg = found["gate-agg"]
    answers = [row["answer"] for row in agg["evidence"]["canaries"]]
    assert len(answers) == 3 and all(answers)
    assert json.loads(gpu_gate.REFERENCE_FILE.read_text())["answers"] == answers
    (role, engine), *rest = gpu_gate.engine_configs(agg["config"])
    assert (role, rest, engine["engine_kwargs"]["enforce_eager"]) == ("aggregated", [], True)
    assert "kv_transfer_config" not in engine["engine_kwargs"]


def test_the_healthy_arm_passes_the_kv_checks_and_the_broken_arm_fails_them(arms):
    _, found = arms
    healthy, broken = found["gate"]["evidence"], found["gate-broken"]["evidence"]
    assert statuses(healthy) == {
        "gate-answers": "UNVERIFIED",  # dummy weights: judged against the reference alone
        "gate-reference": "PASS",
        "gate-kv-bytes": "PASS",
        "gate-kv-failures": "PASS",
        "gate-kv-backend": "PASS",
    }
    assert statuses(broken)["gate-kv-bytes"] == "FAIL" and statuses(broken)["gate-kv-failures"] == "FAIL"
    assert statuses(broken)["gate-reference"] == "PASS"  # recomputed on decode, the answers are the same
    assert broken["today"]["chat_completion"]["status"] == 200  # what verify checked before the gate passes
    assert broken["reference_answers"] == [row["answer"] for row in found["gate-agg"]["evidence"]["canaries"]]


def test_only_the_broken_arm_moves_the_decode_engine_to_the_models_link(arms, bundle):
    _, found = arms
    rendered = dict(gpu_gate.engine_configs(json.loads((bundle / "serve-pd.json").read_text())))
    source = rendered["prefill"]["model_loading_config"]["model_source"]
    assert source == rendered["decode"]["model_loading_config"]["model_source"] == str(gpu_main.MODEL_DIR)
    for phase in ("gate", "gate-broken"):
        engines = dict(gpu_gate.engine_configs(found[phase]["config"]))
        for engine in engines.values():
            assert engine["engine_kwargs"]["enforce_eager"] is True
            assert engine["engine_kwargs"]["kv_transfer_config"]["kv_load_failure_policy"] == "recompute"
            assert "request_router_config" not in engine["deployment_config"]
        sources = {role: e["model_loading_config"]["model_source"] for role, e in engines.items()}
        if phase == "gate":
            assert sources == {"prefill": source, "decode": source}
        else:  # the link the arm made points at the files prefill loads (the machine's MODEL_DIR)
            assert sources == {"prefill": source, "decode": str(gpu_gate.BROKEN_MODEL_DIR)}
            assert gpu_gate.BROKEN_MODEL_DIR.resolve() == Path(found[phase]["evidence"]["model_dir"]).resolve()
            assert "decode model_loading_config.model_source" in found[phase]["evidence"]["overrides"]
