"""The traffic gate on the GPU machine: `make verify`'s canaries (llm_pd_eks_tools/ops/verify/canary.py,
loaded from its file) through the real P/D application, judged by the same code.

    gate-agg      the aggregated app: the canaries' reference answers (kept on the machine)
    gate          the P/D app as rendered (decode on `kv_load_failure_policy: recompute`): canaries,
                  the decode raylet's NIXL counters around them, verify's chat probe, the verdicts
    gate-broken   the same P/D app with the KV path broken: the decode engine loads the model from
                  another path (a link to the same files), so NIXL's handshake compatibility hash
                  (vLLM's `compute_nixl_compatibility_hash` hashes the model path) differs from the
                  prefill engine's, every pull fails, and `recompute` prefills on decode instead

Both arms add GATE_OVERRIDES to the rendered bundle and nothing else; the broken arm adds
BROKEN_OVERRIDES. Every phase writes evidence-<phase>.json. Called from gpu_main with gpu_main
itself as `run` (its raylets, deploy, scrape and clock), so neither module imports the other's name.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
CANARY_FILE = HERE.parents[1] / "llm_pd_eks_tools" / "ops" / "verify" / "canary.py"  # in the checkout
REFERENCE_FILE = Path("/tmp/realrun/gate-reference.json")  # the aggregated answers, for the broken arm after
BROKEN_MODEL_DIR = Path("/tmp/realrun/model-decode")  # a link to the model directory
NIXL_BACKEND = "UCX"  # overrides.yaml: no EFA on that machine
# What the gate arms change beyond overrides.yaml, with why (recorded in the evidence).
GATE_OVERRIDES = {
    "engine_kwargs.enforce_eager": (True, "no torch.compile or CUDA graphs: three engine starts fit the lease"),
    "deployment_config.request_router_config": (
        None,
        "Serve's default router on both roles: the gate measures the KV path and the answers, and one "
        "request at a time leaves a router nothing to choose",
    ),
    "decode engine_kwargs.kv_transfer_config.kv_load_failure_policy": (
        "recompute",
        "a failed pull is prefilled again on decode and still answered: the case the gate must see",
    ),
}
# The canaries' filler length on this run. The run's tokenizer (gpu_model.build_tokenizer, trained on
# other words) splits each filler word into about 4.7 tokens: canary.DEFAULT_WORDS (2,400) would be
# about 11,380 tokens, over the dev stack's max_model_len of 8,192, and every canary would be refused.
# 600 words are about 2,940 tokens with it, the length the cluster's canaries have with a 7B/8B model's
# own tokenizer, so each canary still pulls a few hundred KV blocks.
CANARY_WORDS = 600
BROKEN_OVERRIDES = {
    "decode model_loading_config.model_source": (
        str(BROKEN_MODEL_DIR),
        "a link to the same model files: NIXL's compatibility hash (model path among its factors) "
        "differs between prefill and decode, so every handshake, and so every pull, fails",
    ),
}


def load_canary() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gate_canary", CANARY_FILE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


canary = load_canary()


def engine_configs(config: dict) -> list[tuple[str, dict]]:
    """(role, LLMConfig) of the application: prefill and decode, or the aggregated one."""
    args = config["applications"][0]["args"]
    if "llm_configs" in args:
        return [("aggregated", c) for c in args["llm_configs"]]
    return [("prefill", args["prefill_config"]), ("decode", args["decode_config"])]


def gated(config: dict, broken: bool = False) -> dict:
    """The rendered config with GATE_OVERRIDES (and BROKEN_OVERRIDES) applied."""
    out = copy.deepcopy(config)
    for role, llm in engine_configs(out):
        llm.setdefault("engine_kwargs", {})["enforce_eager"] = True
        llm.get("deployment_config", {}).pop("request_router_config", None)
        if role == "decode":
            kv = llm["engine_kwargs"].setdefault("kv_transfer_config", {})
            kv["kv_load_failure_policy"] = "recompute"
            if broken:
                llm["model_loading_config"]["model_source"] = str(BROKEN_MODEL_DIR)
    return out


def kv_bytes_per_token(model_dir: Path) -> Optional[float]:
    """bf16 KV a token: layers x KV heads x head size x 2 (K and V) x 2 bytes, from config.json."""
    try:
        cfg = json.loads((model_dir / "config.json").read_text())
        head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        return float(cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head * 2 * 2)
    except (OSError, KeyError, ValueError, TypeError):
        return None


def decode_reading(text: str) -> Any:
    """The decode raylet's NIXL counters (Ray's names: ray_vllm_...); a counter never incremented is
    not exported yet, so it reads 0."""
    total = {"count": 0.0, "sum": 0.0, "failed": 0.0}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        key, _, value = line.rpartition(" ")
        name = key.split("{")[0]
        field = {
            "ray_vllm_nixl_bytes_transferred_count": "count",
            "ray_vllm_nixl_bytes_transferred_sum": "sum",
            "ray_vllm_nixl_num_failed_transfers_total": "failed",
            "ray_vllm_nixl_num_failed_transfers": "failed",
        }.get(name)
        if field:
            try:
                total[field] += float(value)
            except ValueError:
                pass
    return canary.KvReading(total["count"], total["sum"], total["failed"])


def ask(run: ModuleType, model: str, items: list) -> list[dict]:
    """Each canary through the endpoint, one at a time: its answer, prompt tokens and seconds."""
    out = []
    for item in items:
        started = time.monotonic()
        status, text = run.http("POST", f"{run.SERVE}/v1/chat/completions", canary.chat_body(model, item), timeout=300)
        row: dict[str, Any] = {"canary": item.name, "status": status, "seconds": round(time.monotonic() - started, 3)}
        try:
            reply = json.loads(text)
            row["answer"] = canary.answer_of(reply)
            row["prompt_tokens"] = (reply.get("usage") or {}).get("prompt_tokens")
        except ValueError as exc:
            row["answer"], row["error"] = None, f"{exc}: {text[:300]}"
        out.append(row)
    return out


def canary_round(run: ModuleType, model: str, evidence: dict) -> list:
    """The canaries with the decode raylet scraped before and after (one export interval later)."""
    items = canary.canaries(words=CANARY_WORDS)
    before = run.http("GET", f"http://127.0.0.1:{run.METRICS_PORTS['decode']}/metrics", timeout=30)[1]
    evidence["canaries"] = ask(run, model, items)
    time.sleep(run.EXPORT_WAIT_S)
    after = run.http("GET", f"http://127.0.0.1:{run.METRICS_PORTS['decode']}/metrics", timeout=30)[1]
    evidence["decode_before"] = decode_reading(before).__dict__
    evidence["decode_after"] = decode_reading(after).__dict__
    return items


def today_checks(run: ModuleType, model: str, evidence: dict) -> None:
    """What `make verify` checked before the gate, on this app: its chat completion (a long prompt,
    content not empty) and its KV checks over the counters' lifetime (any pull, no failure)."""
    probe = run.chat(model, run.long_prompt())
    after = decode_reading(run.http("GET", f"http://127.0.0.1:{run.METRICS_PORTS['decode']}/metrics", timeout=30)[1])
    evidence["today"] = {"chat_completion": probe, "decode_lifetime": after.__dict__}


def verdicts(evidence: dict, items: list, reference: Optional[list]) -> list[dict]:
    rows = evidence.get("canaries") or []
    found = canary.judge(
        items,
        [r.get("answer") for r in rows],
        canary.KvReading(**evidence["decode_before"]),
        canary.KvReading(**evidence["decode_after"]),
        prompt_tokens=[r.get("prompt_tokens") for r in rows],
        kv_bytes_per_token=kv_bytes_per_token(Path(evidence["model_dir"])),
        backends=evidence.get("nixl_backends"),
        expected_backend=NIXL_BACKEND,
        reference=reference,
        known_answers=False,  # dummy weights (overrides.yaml): the reference judges the answers
    )
    return [v.__dict__ for v in found]


def phase_gate(run: ModuleType, bundle: Path, out: Path, phase: str) -> dict:
    """One arm: `gate` (P/D as rendered), `gate-broken` (P/D, the KV path broken) or `gate-agg` (the
    aggregated app: the reference answers, kept on the machine for the P/D arms after it)."""
    clock = run.Clock()
    evidence = run.begin(phase, clock)
    evidence["overrides"] = {k: list(v) for k, v in GATE_OVERRIDES.items()}
    broken = phase == "gate-broken"
    if broken:
        evidence["overrides"].update({k: list(v) for k, v in BROKEN_OVERRIDES.items()})
        if not BROKEN_MODEL_DIR.exists():
            os.symlink(run.MODEL_DIR, BROKEN_MODEL_DIR)
    evidence["model_dir"] = str(run.MODEL_DIR)
    run.ensure_raylets(bundle, evidence)
    clock.lap("raylets")
    items = canary.canaries(words=CANARY_WORDS)
    evidence["canary_words"] = CANARY_WORDS
    if phase == "gate-agg":
        config = gated(json.loads((bundle / "serve-agg.json").read_text()))
        model = config["applications"][0]["args"]["llm_configs"][0]["model_loading_config"]["model_id"]
        if run.deployed(evidence, config, clock):
            evidence["canaries"] = ask(run, model, items)
            REFERENCE_FILE.write_text(json.dumps({"answers": [r.get("answer") for r in evidence["canaries"]]}) + "\n")
            clock.lap("canaries")
        return evidence
    config = gated(json.loads((bundle / "serve-pd.json").read_text()), broken=broken)
    model = config["applications"][0]["args"]["decode_config"]["model_loading_config"]["model_id"]
    if not run.deployed(evidence, config, clock):
        return evidence
    canary_round(run, model, evidence)
    evidence["nixl_backends"] = sorted(set(run.NIXL_BACKEND_LINE.findall("\n".join(run.nixl_log_lines()))))
    today_checks(run, model, evidence)
    clock.lap("canaries")
    reference = json.loads(REFERENCE_FILE.read_text())["answers"] if REFERENCE_FILE.is_file() else None
    evidence["reference_answers"] = reference
    evidence["gate"] = verdicts(evidence, items, reference)
    run.log("gate:", [(v["name"], v["status"], v["detail"][:120]) for v in evidence["gate"]])
    return evidence
