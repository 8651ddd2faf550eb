"""Inputs the policy host cannot decode (NaN/Infinity numbers, nesting deeper than its JSON
conversion recurses, malformed bytes) fail the request closed: the host answers with an error, the
engine fails the preview, and the analyzer process keeps serving (the real gRPC protocol, raw bytes
where a Python client could not even encode the request)."""

from __future__ import annotations

import math

import grpc
import pytest
from policy_fixtures import gpu_stack, judge, mandatory, of, pack

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


def _refused(method: str, payload: bytes, words: str) -> None:
    """The host answers the request with an error naming what it could not decode: the engine fails
    the preview (fail closed), no resource passes unjudged, and the same process serves on."""
    with pytest.raises(grpc.RpcError) as failed:
        _call(method, payload)
    assert words in (failed.value.details() or "")
    _still_serving()


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_a_non_finite_number_fails_the_request_closed_and_the_analyzer_serves_on(number):
    pack().configure()
    stack = gpu_stack()
    stack["lt"].props["metadataOptions"]["httpPutResponseHopLimit"] = number
    words = "NaN" if math.isnan(number) else "Infinity"
    _refused("Analyze", stack["lt"].message().SerializeToString(), words)
    payload = b"".join(_ld(1, r.message().SerializeToString()) for r in stack.values())
    _refused("AnalyzeStack", payload, words)


@pytest.mark.parametrize(
    "value",
    [
        {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"},  # a secret without its value
        {"4dabf18193072939515e22adb298388d": "c44067f5952c0a294b673a41bacd8c17"},  # an asset with no fields
    ],
    ids=["secret-without-value", "empty-asset"],
)
def test_a_malformed_value_signature_fails_the_request_closed(value):
    pack().configure()
    stack = gpu_stack()
    stack["lt"].props["userData"] = value
    with pytest.raises(grpc.RpcError):
        _call("Analyze", stack["lt"].message().SerializeToString())
    _still_serving()


def test_the_same_stack_with_finite_numbers_has_no_decode_verdict():
    assert of(judge(gpu_stack()), DECODE) == []


@pytest.mark.parametrize("depth", [300, 3300])
def test_nesting_deeper_than_the_host_decodes_fails_closed_and_the_analyzer_serves_on(depth):
    """300 levels break the host's JSON conversion (RecursionError); 3,300 is about the deepest
    Struct a Pulumi engine relays (its protobuf decoder stops at 10,000 message levels, three per
    object)."""
    pack().configure()
    _refused("Analyze", raw_resource("deep-lt", nested_struct(depth)), "recursion")


def test_nesting_of_realistic_depth_is_judged_normally():
    pack().configure()
    response = _call("Analyze", raw_resource("ok-lt", nested_struct(40)))
    assert _decode_verdicts(response) == []


def test_malformed_bytes_fail_the_request_closed():
    pack().configure()
    truncated = raw_resource("cut-lt", _ld(1, b"\x0a\x05ab"))  # a map entry whose key runs past its end
    with pytest.raises(grpc.RpcError):
        _call("Analyze", truncated)
    _still_serving()


def test_huge_numbers_are_judged_as_numbers():
    stack = gpu_stack()
    stack["lt"].props["networkInterfaces"][1]["networkCardIndex"] = 1e300
    verdicts = judge(stack)
    assert of(verdicts, DECODE) == []
    assert of(verdicts, "efa-interface-count")  # card 1 lost its EFA interface to card 1e300
