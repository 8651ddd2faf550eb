"""The traffic gate's canaries and its verdicts: requests whose exact answers are known and depend on
the KV the decode side pulled, judged with the decode side's NIXL counters read around them.

A canary is a long prompt of filler with one fact planted at a depth (`the code word for vault 3 is
...`) and the question for it at the end. At temperature 0 a model that sees the whole prompt answers
with the code word; the decode engine sees the planted sentence only through the KV the prefill
engine computed and NIXL moved (or through its own prefill, when a failed pull is recomputed), so:

- `gate-answers`: every canary's answer holds its code word (a real model; a run on dummy weights
  cannot, and says so by judging against the reference alone);
- `gate-reference`: the answers equal, token for token, those of an aggregated deployment of the
  same model given the same requests (when one is given): a corrupted read that still produces text
  answers differently;
- `gate-kv-bytes`: the decode side's NIXL pulls rose by at least one per canary and its bytes by at
  least the canaries' KV (a failed pull healed by `kv_load_failure_policy: recompute` moves none);
- `gate-kv-failures`: no failed NIXL transfer while the canaries ran;
- `gate-kv-backend`: the decode side's NIXL logged the configured backend (LIBFABRIC on EFA).

Standard library only: the GPU real run (llm_pd_eks_sizing/realrun/gpu_gate.py) loads this file on a
machine with nothing of the project installed, so the cluster's gate and the measured one are the same
code.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

PASS, FAIL, UNVERIFIED = "PASS", "FAIL", "UNVERIFIED"
GATE_CHECK_NAMES = ("gate-answers", "gate-reference", "gate-kv-bytes", "gate-kv-failures", "gate-kv-backend")
# Filler: plain words, no digits, so the vault number and its code word are the prompt's only digits.
FILLER = (
    "the river runs past an old mill where farmers bring grain each autumn and the miller keeps a ledger "
    "of every sack weighed on his brass scale while children watch boats drift under the stone bridge "
    "toward the harbour town whose market opens at dawn with bread cheese apples rope lanterns and wool"
).split()
ANIMALS = ("falcon", "otter", "badger", "heron", "lynx", "marten", "osprey", "walrus", "bison", "gecko")
COLOURS = ("amber", "cobalt", "crimson", "jade", "ochre", "silver", "violet", "umber", "teal", "ivory")
DEPTHS = (0.1, 0.5, 0.9)  # where in the filler each canary's fact sits, as a fraction of its words
DEFAULT_WORDS = 2400  # ~3,000 tokens with a 7B/8B tokenizer: a few hundred KV blocks to pull
MAX_TOKENS = 16


@dataclass(frozen=True)
class Canary:
    """One request: `prompt` holds `code_word` at `depth` of its filler and asks for it at the end."""

    name: str
    prompt: str
    code_word: str
    depth: float


@dataclass(frozen=True)
class KvReading:
    """The decode side's NIXL counters at one moment: pulls, bytes pulled, failed transfers."""

    transfers: float
    bytes: float
    failed: float


@dataclass
class Verdict:
    """One gate check's result, in the shape of verify's Check (name, status, detail, data)."""

    name: str
    status: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


def code_word(rng: random.Random) -> str:
    return f"{rng.choice(COLOURS)}-{rng.choice(ANIMALS)}-{rng.randrange(1000, 10000)}"


def canaries(words: int = DEFAULT_WORDS, seed: int = 0, depths: Sequence[float] = DEPTHS) -> list[Canary]:
    """One canary per depth, each with its own vault number and code word, drawn from `seed`: the same
    seed gives the same prompts everywhere (the cluster's gate, the GPU run, the tests)."""
    rng = random.Random(seed)
    out = []
    for n, depth in enumerate(depths, start=1):
        vault = rng.randrange(10, 100)
        word = code_word(rng)
        filler = [FILLER[(i * 7 + n) % len(FILLER)] for i in range(words)]
        at = int(words * depth)
        fact = f"Remember this: the code word for vault {vault} is {word}."
        body = " ".join(filler[:at]) + f". {fact} " + " ".join(filler[at:]) + "."
        question = f"What is the code word for vault {vault}? Reply with the code word only."
        out.append(Canary(f"vault-{vault}-at-{depth:g}", f"{body}\n\n{question}", word, depth))
    return out


def chat_body(model: str, canary: Canary, max_tokens: int = MAX_TOKENS) -> dict[str, Any]:
    """The OpenAI chat request for one canary: greedy (temperature 0, a fixed seed), short answer."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": canary.prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 0,
    }


def answer_of(reply: Any) -> str:
    """`choices[0].message.content` of a chat reply; ValueError when the reply has none."""
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("the reply has no choices[0].message.content") from None
    if not isinstance(content, str):
        raise ValueError("the reply's message content is not text")
    return content


def _plain(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def knows(answer: str, canary: Canary) -> bool:
    """Whether `answer` holds the canary's code word (case, spaces and punctuation aside)."""
    return _plain(canary.code_word) in _plain(answer)


def judge(
    gate_canaries: Sequence[Canary],
    answers: Sequence[Optional[str]],
    before: Optional[KvReading],
    after: Optional[KvReading],
    *,
    prompt_tokens: Sequence[Optional[int]] = (),
    kv_bytes_per_token: Optional[float] = None,
    backends: Optional[Sequence[str]] = None,
    expected_backend: str = "LIBFABRIC",
    reference: Optional[Sequence[Optional[str]]] = None,
    known_answers: bool = True,
) -> list[Verdict]:
    """The gate's verdicts. `answers[i]` is canary i's answer (None: it got none); `before`/`after`
    the decode side's counters around the canaries (None: unreadable); `prompt_tokens` and
    `kv_bytes_per_token` size the KV each canary must have pulled (half of it at least: vLLM pulls
    whole blocks and recomputes the last token, so a canary moves a little less than its prompt's KV);
    `backends` the NIXL backends the decode side logged; `reference` an aggregated deployment's
    answers to the same canaries; `known_answers` off where the model cannot read (dummy weights)."""
    out = [_answers(gate_canaries, answers, known_answers)]
    if reference is not None:  # no reference given: the check is not made, rather than left unverified
        out.append(_reference(gate_canaries, answers, reference))
    out += kv_verdicts(len(gate_canaries), before, after, prompt_tokens, kv_bytes_per_token)
    out.append(_backend(backends, expected_backend))
    return out


def _answers(gate_canaries: Sequence[Canary], answers: Sequence[Optional[str]], known_answers: bool) -> Verdict:
    missing = [c.name for c, a in zip(gate_canaries, answers) if a is None]
    data = {"answers": {c.name: a for c, a in zip(gate_canaries, answers)}}
    if missing:
        return Verdict("gate-answers", FAIL, f"no answer to canary {', '.join(missing)}", data)
    if not known_answers:
        return Verdict("gate-answers", UNVERIFIED, "the model cannot read (dummy weights): code words not judged", data)
    wrong = [
        f"{c.name} ({(a or '')[:40]!r}, not {c.code_word})"
        for c, a in zip(gate_canaries, answers)
        if not knows(a or "", c)
    ]
    if wrong:
        return Verdict("gate-answers", FAIL, f"wrong answer to canary {'; '.join(wrong)}", data)
    return Verdict("gate-answers", PASS, f"{len(gate_canaries)} canaries answered with their code words", data)


def _reference(
    gate_canaries: Sequence[Canary], answers: Sequence[Optional[str]], reference: Sequence[Optional[str]]
) -> Verdict:
    if len(reference) != len(gate_canaries) or any(r is None for r in reference):
        return Verdict("gate-reference", UNVERIFIED, "the aggregated reference did not answer every canary")
    differ = [c.name for c, a, r in zip(gate_canaries, answers, reference) if a != r]
    data = {"reference": {c.name: r for c, r in zip(gate_canaries, reference)}}
    if differ:
        return Verdict(
            "gate-reference", FAIL, f"answers differ from the aggregated reference: {', '.join(differ)}", data
        )
    return Verdict("gate-reference", PASS, f"{len(gate_canaries)} answers equal the aggregated reference", data)


def kv_verdicts(
    n: int,
    before: Optional[KvReading],
    after: Optional[KvReading],
    prompt_tokens: Sequence[Optional[int]],
    kv_bytes_per_token: Optional[float],
) -> list[Verdict]:
    """`gate-kv-bytes` and `gate-kv-failures` for `n` requests sent between the two readings."""
    if before is None or after is None:
        why = "the decode side's NIXL counters could not be read"
        return [Verdict("gate-kv-bytes", UNVERIFIED, why), Verdict("gate-kv-failures", UNVERIFIED, why)]
    pulls, moved, failed = (
        after.transfers - before.transfers,
        after.bytes - before.bytes,
        after.failed - before.failed,
    )
    data = {"pulls": pulls, "bytes": moved, "failed": failed}
    floor = None
    if kv_bytes_per_token and prompt_tokens and all(t for t in prompt_tokens):
        floor = 0.5 * kv_bytes_per_token * sum(t or 0 for t in prompt_tokens)
        data["bytes_floor"] = floor
    if pulls < n:
        kv = Verdict(
            "gate-kv-bytes",
            FAIL,
            f"the decode side pulled KV {pulls:.0f} time(s) for {n} canaries: their prefill did not reach it over NIXL",
            data,
        )
    elif floor is not None and moved < floor:
        kv = Verdict(
            "gate-kv-bytes", FAIL, f"{moved / 2**20:.1f} MiB pulled, under the canaries' {floor / 2**20:.1f} MiB", data
        )
    else:
        kv = Verdict("gate-kv-bytes", PASS, f"{pulls:.0f} pull(s), {moved / 2**20:.1f} MiB for {n} canaries", data)
    if failed > 0:
        fails = Verdict("gate-kv-failures", FAIL, f"{failed:.0f} failed NIXL transfer(s) while the canaries ran", data)
    else:
        fails = Verdict("gate-kv-failures", PASS, "no failed NIXL transfer while the canaries ran", data)
    return [kv, fails]


def _backend(backends: Optional[Sequence[str]], expected: str) -> Verdict:
    if not backends:
        return Verdict("gate-kv-backend", UNVERIFIED, "no NIXL backend line read from the decode side")
    found = sorted(set(backends))
    if found != [expected]:
        return Verdict("gate-kv-backend", FAIL, f"decode's NIXL backend {', '.join(found)}, not {expected}")
    return Verdict("gate-kv-backend", PASS, f"decode's NIXL backend {expected}")
