"""The pack answers every request: NaN/Infinity numbers, nesting deeper than the decoders recurse and
malformed bytes give a mandatory `resource-decodable` verdict naming the resource, while the rest of
the stack is judged and the analyzer process keeps serving (the real gRPC protocol, raw bytes where
a Python client could not even encode the request)."""

from __future__ import annotations

import math

import pytest
from helpers import NODE_GROUP
from policy_fixtures import Res, gpu_stack, judge, mandatory, of, pack

from llm_pd_eks.pulumi_sdk import analyzer_pb2
from llm_pd_eks_policy import intake

DECODE = intake.POLICY_NAME


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def nested_struct(depth: int) -> bytes:
    """A google.protobuf.Struct `{"a": {"a": ... {}}}` `depth` objects deep, encoded iteratively
    (the Python client's Struct.update recurses and could not build it)."""
    data = b""
    for _ in range(depth):
        data = _ld(1, _ld(1, b"a") + _ld(2, _ld(5, data)))
    return data


def raw_resource(name: str, properties: bytes, type_: str = "aws:ec2/launchTemplate:LaunchTemplate") -> bytes:
    urn = f"urn:pulumi:test::llm-pd-eks::{type_}::{name}"
    return _ld(1, type_.encode()) + _ld(2, properties) + _ld(3, urn.encode()) + _ld(4, name.encode())


def _call(method: str, payload: bytes) -> analyzer_pb2.AnalyzeResponse:
    server = pack()
    assert server._channel is not None
    rpc = server._channel.unary_unary(
        f"/pulumirpc.Analyzer/{method}", response_deserializer=analyzer_pb2.AnalyzeResponse.FromString
    )
    return rpc(payload, timeout=120)


def _decode_verdicts(response: analyzer_pb2.AnalyzeResponse) -> list[analyzer_pb2.AnalyzeDiagnostic]:
    return [d for d in response.diagnostics if d.policyName == DECODE]


def _still_serving() -> None:
    """The same process answers an ordinary request afterwards (it did not crash)."""
    assert mandatory(judge(gpu_stack())) == []


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_number_is_judged_not_crashed_and_the_stack_goes_on(number):
    stack = gpu_stack()
    stack["lt"].props["metadataOptions"]["httpPutResponseHopLimit"] = number
    # an unrelated violation elsewhere in the stack must still be found
    other = Res(NODE_GROUP, "cpu-in-public", {"instanceTypes": ["p5.48xlarge"], "subnetIds": ["subnet-x"]})
    verdicts = judge([*stack.values(), other])
    found = of(verdicts, DECODE)
    assert found and all("gpu-nodes-lt" in v.message and "NaN or Infinity" in v.message for v in found)
    assert any(v.policy != DECODE and "cpu-in-public" in v.message for v in mandatory(verdicts))
    _still_serving()


@pytest.mark.parametrize(
    "value",
    [
        {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"},  # a secret without its value
        {"4dabf18193072939515e22adb298388d": "c44067f5952c0a294b673a41bacd8c17"},  # an asset with no fields
    ],
    ids=["secret-without-value", "empty-asset"],
)
def test_a_malformed_value_signature_is_judged_not_crashed(value):
    stack = gpu_stack()
    stack["lt"].props["userData"] = value
    found = of(judge(list(stack.values())), DECODE)
    assert found and all("gpu-nodes-lt" in v.message and "signature" in v.message for v in found)
    _still_serving()


def test_the_same_stack_with_finite_numbers_has_no_decode_verdict():
    assert of(judge(gpu_stack()), DECODE) == []


@pytest.mark.parametrize("depth", [intake.MAX_DEPTH + 1, 300, 50_000])
def test_nesting_too_deep_gives_a_verdict_naming_the_resource(depth):
    """300 levels break MessageToDict (RecursionError); 50,000 crash protobuf's parser outright."""
    pack().configure()
    response = _call("Analyze", raw_resource("deep-lt", nested_struct(depth)))
    (found,) = _decode_verdicts(response)
    assert "deep-lt" in found.message and f"deeper than {intake.MAX_DEPTH}" in found.message
    assert found.enforcementLevel == analyzer_pb2.MANDATORY
    _still_serving()


def test_nesting_at_the_limit_is_judged_normally():
    pack().configure()
    assert _decode_verdicts(_call("Analyze", raw_resource("ok-lt", nested_struct(intake.MAX_DEPTH - 1)))) == []


def test_analyze_stack_judges_the_rest_of_the_stack_around_an_undecodable_resource():
    pack().configure()
    stack = gpu_stack()
    stack["lt"].props["networkInterfaces"] = []  # efa-on-gpu-nodes must still see this
    good = b"".join(_ld(1, r.message().SerializeToString()) for r in stack.values())
    bad = _ld(1, raw_resource("deep-lt", nested_struct(50_000)))
    response = _call("AnalyzeStack", good + bad)
    (found,) = _decode_verdicts(response)
    assert "deep-lt" in found.message and found.urn.endswith("::deep-lt")
    assert any(d.policyName == "efa-on-gpu-nodes" and "gpu-nodes-lt" in d.message for d in response.diagnostics)


def test_malformed_bytes_give_a_verdict():
    pack().configure()
    truncated = raw_resource("cut-lt", _ld(1, b"\x0a\x05ab"))  # a map entry whose key runs past its end
    (found,) = _decode_verdicts(_call("Analyze", truncated))
    assert "cut-lt" in found.message and "not a valid protobuf Struct" in found.message
    _still_serving()


def test_huge_numbers_are_judged_as_numbers():
    stack = gpu_stack()
    stack["lt"].props["networkInterfaces"][1]["networkCardIndex"] = 1e300
    verdicts = judge(stack)
    assert of(verdicts, DECODE) == []
    assert of(verdicts, "efa-interface-count")  # card 1 lost its EFA interface to card 1e300


def test_the_verdict_level_comes_from_policy_config():
    stack = gpu_stack()
    stack["lt"].props["metadataOptions"]["httpPutResponseHopLimit"] = math.nan
    verdicts = judge(stack, {DECODE: "advisory"})
    assert of(verdicts, DECODE) == [] and of(verdicts, DECODE, "advisory")


def test_scanner_agrees_with_protobuf_on_what_decodes():
    from google.protobuf import struct_pb2

    value = struct_pb2.Struct()
    value.update({"a": [1, "x", {"b": None, "c": True}], "n": 2.5})
    assert intake.struct_problem(value.SerializeToString()) is None
    value.update({"n": math.nan})
    assert intake.struct_problem(value.SerializeToString()) is not None
