"""The policy pack's answer deadline is per exchange: a server kept for a whole test session (as
tests/policy_fixtures.py keeps one) gives every judging exchange the full `answer_timeout`, while the
answers inside one exchange still share it (the preview's `--policy-timeout`). The clock is a stand-in."""

from __future__ import annotations

from typing import Any

import pytest

from llm_pd_eks.pulumi_sdk import analyzer_pb2
from llm_pd_eks_tools.plan.preview import analyzer
from llm_pd_eks_tools.plan.preview.analyzer import PolicyPackServer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Stub:
    """The analyzer's gRPC stub: answers at once, records each call's timeout, lets time pass per call."""

    def __init__(self, clock: Clock, step: float) -> None:
        self.clock, self.step, self.timeouts = clock, step, []

    def _answer(self, reply: Any, timeout: float) -> Any:
        self.timeouts.append(timeout)
        self.clock.now += self.step
        return reply

    def GetAnalyzerInfo(self, _request: Any, timeout: float) -> Any:
        return self._answer(analyzer_pb2.AnalyzerInfo(name="pack"), timeout)

    def Configure(self, _request: Any, timeout: float) -> Any:
        return self._answer(None, timeout)

    def Analyze(self, _request: Any, timeout: float) -> Any:
        return self._answer(analyzer_pb2.AnalyzeResponse(), timeout)

    def AnalyzeStack(self, _request: Any, timeout: float) -> Any:
        return self._answer(analyzer_pb2.AnalyzeResponse(), timeout)


def server(monkeypatch: pytest.MonkeyPatch, step: float) -> tuple[PolicyPackServer, Stub, Clock]:
    clock = Clock()
    monkeypatch.setattr(analyzer.time, "monotonic", clock)
    pack = PolicyPackServer(answer_timeout=10.0)
    stub = Stub(clock, step)
    pack._stub = stub  # the process itself is not needed to judge the deadline
    return pack, stub, clock


def resource(name: str) -> Any:
    return analyzer_pb2.AnalyzerResource(urn=f"urn:pulumi:test::p::t::{name}", type="t", name=name)


def test_an_exchange_long_after_the_first_gets_the_whole_deadline(monkeypatch):
    pack, stub, clock = server(monkeypatch, step=1.0)
    pack.analyze_all([resource("a")])
    clock.now += 3600.0  # an hour of other tests on the same server
    stub.timeouts.clear()
    pack.analyze_all([resource("b")])
    assert stub.timeouts[0] == pytest.approx(10.0)  # Configure: the new exchange's whole deadline


def test_the_answers_of_one_exchange_share_its_deadline(monkeypatch):
    pack, stub, _ = server(monkeypatch, step=3.0)
    with pytest.raises(TimeoutError, match="no answer within 10 s"):
        pack.analyze_all([resource(str(i)) for i in range(5)])
    assert stub.timeouts == sorted(stub.timeouts, reverse=True) and stub.timeouts[0] == pytest.approx(10.0)


def test_a_call_outside_an_exchange_has_a_deadline_of_its_own(monkeypatch):
    pack, stub, clock = server(monkeypatch, step=4.0)
    pack.analyze(resource("a"))
    clock.now += 50.0
    pack.analyze(resource("b"))
    assert stub.timeouts == [pytest.approx(10.0), pytest.approx(10.0)]
