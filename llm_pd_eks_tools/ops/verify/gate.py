"""The traffic gate in `make verify`: canaries (canary.py) through the stack's endpoint, judged by
their answers, an aggregated reference's answers when one is given, and the decode side's NIXL
counters read from Prometheus around them.

Why beside the other checks rather than inside them: `chat-completion` passes on any non-empty text,
and the KV checks read the counters over the service's lifetime, so a KV path that broke after the
first transfers, or a pull that failed and was prefilled again on decode (`kv_load_failure_policy:
recompute`), or a corrupted read that still produces text, passes them all. The gate reads only what
moved for its own requests, and judges what came back.

What a failing gate does to a deploy (docs/day-two.md, "The traffic gate"): the deploy job's
`make verify` step exits 1 with the failing gate check named, so the stage is not promoted and the
next stage keeps serving what it served. Within the stage itself, KubeRay has already moved traffic
to the new cluster when `pulumi up` returns (with `NewCluster` it switches as soon as the new
cluster's Serve application is healthy, before any later step can run), so the gate cannot hold that
switch; it names the reason, and the way back is `pulumi up` of the previous commit.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Callable, Optional

from llm_pd_eks import metrics as m
from llm_pd_eks.serving_names import NAMESPACE, SERVE_PORT

from . import canary
from .kube import HttpError, KubeClient
from .results import Check, Context, Expected, Status

GATE_SECONDS = 180.0  # one canary's answer may queue behind a cold engine; still bounded by the run's deadline
REFERENCE_SECONDS = 120.0
DECODE_COUNT = f'sum({m.NIXL_BYTES}_count{{{m.PHASE_LABEL}="decode"}})'
DECODE_BYTES = f'sum({m.NIXL_BYTES}_sum{{{m.PHASE_LABEL}="decode"}})'
FAILED = f"sum({m.NIXL_FAILED_TRANSFERS})"
QueryFn = Callable[[str], Optional[float]]  # one Prometheus instant query -> its value (None: empty)


def kv_reading(query: QueryFn) -> canary.KvReading:
    """The decode side's counters now; an empty result (a counter never incremented is not
    exported) reads 0."""
    return canary.KvReading(query(DECODE_COUNT) or 0.0, query(DECODE_BYTES) or 0.0, query(FAILED) or 0.0)


def reference_answers(url: str, model: str, items: list[canary.Canary], deadline_left: float) -> list[Optional[str]]:
    """Each canary's answer from an OpenAI-compatible endpoint at `url` (an aggregated deployment of
    the same model): None for one that got no usable reply."""
    out: list[Optional[str]] = []
    for item in items:
        body = json.dumps(canary.chat_body(model, item)).encode()
        request = urllib.request.Request(
            url.rstrip("/") + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=max(1.0, min(REFERENCE_SECONDS, deadline_left))) as reply:
                out.append(canary.answer_of(json.loads(reply.read().decode())))
        except (OSError, ValueError, urllib.error.URLError):
            out.append(None)
    return out


def decode_backends(results: list[Check], ctx: Context) -> list[str]:
    """The NIXL backends the `nixl-backend` check read from the decode pods' logs."""
    per_pod = next((c.data for c in results if c.name == "nixl-backend"), {}) or {}
    names = {p["metadata"]["name"] for p in ctx.pods.get("decode", [])}
    return [b for pod, found in per_pod.items() if pod in names for b in found]


def run_gate(
    client: KubeClient,
    exp: Expected,
    ctx: Context,
    results: list[Check],
    query: QueryFn,
    reference_url: Optional[str] = None,
    wait_seconds: float = 90.0,
    poll_seconds: float = 5.0,
) -> list[Check]:
    """The canaries, then the gate's checks (canary.GATE_CHECK_NAMES), each a Check."""
    if exp.model_id is None or exp.endpoint_service is None:
        return [
            Check(n, Status.UNVERIFIED, "the stack sets no `serving`: nothing to ask") for n in canary.GATE_CHECK_NAMES
        ]
    items = canary.canaries()
    path = KubeClient.service_proxy(NAMESPACE, exp.endpoint_service, str(SERVE_PORT), "/v1/chat/completions")
    before = kv_reading(query)
    answers: list[Optional[str]] = []
    tokens: list[Optional[int]] = []
    for item in items:
        try:
            reply = client.post_json(path, canary.chat_body(exp.model_id, item), cap=GATE_SECONDS)
            answers.append(canary.answer_of(reply))
            tokens.append((reply.get("usage") or {}).get("prompt_tokens"))
        except (HttpError, ValueError) as exc:
            answers.append(None)
            tokens.append(None)
            ctx.probe_errors[item.name] = str(exc)
    end = time.monotonic() + min(wait_seconds, client.deadline.left())
    after = kv_reading(query)
    while after.transfers < before.transfers + len(items) and time.monotonic() < end:
        time.sleep(min(poll_seconds, max(0.0, end - time.monotonic())))  # the scrape after the canaries
        after = kv_reading(query)
    reference = reference_answers(reference_url, exp.model_id, items, client.deadline.left()) if reference_url else None
    verdicts = canary.judge(
        items,
        answers,
        before,
        after,
        prompt_tokens=tokens,
        kv_bytes_per_token=exp.kv_bytes_per_token,
        backends=decode_backends(results, ctx),
        expected_backend=exp.nixl_backend,
        reference=reference,
    )
    return [Check(v.name, Status(v.status), v.detail, v.data) for v in verdicts]
