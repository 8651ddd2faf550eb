"""The pack answers every request: properties it cannot decode become a verdict, not a crash.

pulumi-policy decodes each request before any rule runs: gRPC parses the bytes
(`AnalyzeRequest.FromString`), then every policy turns each resource's `Struct` into a dict
(`json_format.MessageToDict`). Three inputs break that, and with it the whole preview:

- a NaN or Infinity number: MessageToDict raises ValueError ("Fail to serialize NaN for
  Value.number_value"), so Analyze/AnalyzeStack fail with gRPC UNKNOWN;
- nesting deeper than the decoders recurse: MessageToDict raises RecursionError at about 200
  levels, and protobuf's upb parser crashes the process (SIGSEGV) at some 20,000;
- malformed bytes: a DecodeError for the whole request, every other resource unjudged.

`install()` (called by `../__main__.py` before the server starts) checks each resource's
`properties` on the wire, before protobuf parses them, with a bounded, iterative scan of the
`google.protobuf.Struct` encoding. A resource that fails gets its properties replaced by a marker;
Analyze answers it with one mandatory `resource-decodable` verdict naming the resource, and
AnalyzeStack judges the rest of the stack without it. The policy's level can be lowered in policy
config like any other (`"resource-decodable": "advisory"`).
"""

from __future__ import annotations

import math
import struct
from typing import Any, Callable, Optional

import yaml
from google.protobuf import json_format, struct_pb2
from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs

from . import yaml_text
from .common import memoized, plain, request_scope, resource_policy

POLICY_NAME = "resource-decodable"
MARKER = "__llm_pd_eks_policies_undecodable__"
# Levels of objects/lists allowed in one resource's properties. Kubernetes objects and Helm values
# of this stack stay below 30; MessageToDict fails near 200, and the scan itself is iterative.
MAX_DEPTH = 64

# Field numbers of google/protobuf/struct.proto: Struct.fields (map entry: key 1, value 2),
# Value.number_value (2, double), Value.struct_value (5), Value.list_value (6), ListValue.values (1).
_CHILDREN = {
    ("struct", 1): "entry",
    ("entry", 2): "value",
    ("value", 5): "struct",
    ("value", 6): "list",
    ("list", 1): "value",
}
_NESTING = ("struct", "list")
# pulumi/proto analyzer.proto: AnalyzeRequest / AnalyzerResource .properties = 2, .provider = 6;
# AnalyzerProviderResource.properties = 2; AnalyzeStackRequest.resources = 1.
_PROPERTIES, _PROVIDER, _RESOURCES = 2, 6, 1


class _Malformed(Exception):
    pass


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Malformed("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def struct_problem(data: bytes, max_depth: int = MAX_DEPTH) -> Optional[str]:
    """Why a serialized `google.protobuf.Struct` cannot be judged, or None when it can."""
    buf = memoryview(data)
    stack: list[tuple[str, int]] = [("struct", len(buf))]
    depth, pos = 1, 0
    try:
        while stack:
            kind, end = stack[-1]
            if pos >= end:
                if pos > end:
                    raise _Malformed("a field runs past its parent")
                stack.pop()
                depth -= kind in _NESTING
                continue
            key, pos = _varint(buf, pos)
            field, wire = key >> 3, key & 7
            if wire == 2:
                length, pos = _varint(buf, pos)
                child = _CHILDREN.get((kind, field))
                if child is None:
                    pos += length
                    continue
                if child in _NESTING:
                    depth += 1
                    if depth > max_depth:
                        return f"properties nest deeper than {max_depth} levels of objects/lists"
                stack.append((child, pos + length))
            elif wire == 0:
                _, pos = _varint(buf, pos)
            elif wire == 1:
                if pos + 8 > end:
                    raise _Malformed("truncated number")
                if kind == "value" and field == 2 and not math.isfinite(struct.unpack_from("<d", buf, pos)[0]):
                    return "a property is NaN or Infinity, which JSON (and the policy host) cannot represent"
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise _Malformed(f"wire type {wire}")
    except _Malformed as error:
        return f"properties are not a valid protobuf Struct ({error})"
    return None


def _fields(data: bytes) -> list[tuple[int, int, bytes]]:
    """Top-level (field, wire type, raw bytes of the whole field) of one message."""
    buf = memoryview(data)
    out, pos = [], 0
    while pos < len(buf):
        start = pos
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 2:
            length, pos = _varint(buf, pos)
            pos += length
        elif wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise _Malformed(f"wire type {wire}")
        if pos > len(buf):
            raise _Malformed("a field runs past the message")
        out.append((key >> 3, wire, bytes(buf[start:pos])))
    return out


def _payload(raw: bytes) -> bytes:
    buf = memoryview(raw)
    _, pos = _varint(buf, 0)
    length, pos = _varint(buf, pos)
    return bytes(buf[pos : pos + length])


def _field(number: int, payload: bytes) -> bytes:
    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            low, n = n & 0x7F, n >> 7
            out.append(low | (0x80 if n else 0))
            if not n:
                return bytes(out)

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def marker_struct(reason: str) -> bytes:
    marked = struct_pb2.Struct()
    marked.update({MARKER: reason})
    return marked.SerializeToString()


def clean_resource(data: bytes) -> bytes:
    """An AnalyzeRequest / AnalyzerResource with undecodable properties replaced by the marker
    (a provider's undecodable properties are dropped: no rule judges the provider's config)."""
    try:
        fields = _fields(data)
    except _Malformed as error:
        return _field(_PROPERTIES, marker_struct(f"the resource is not a valid protobuf message ({error})"))
    out = []
    for number, wire, raw in fields:
        if number == _PROPERTIES and wire == 2:
            problem = struct_problem(_payload(raw))
            raw = _field(_PROPERTIES, marker_struct(problem)) if problem else raw
        elif number == _PROVIDER and wire == 2:
            try:
                kept = b"".join(
                    r
                    for n, w, r in _fields(_payload(raw))
                    if not (n == _PROPERTIES and w == 2 and struct_problem(_payload(r)))
                )
            except _Malformed:
                kept = b""
            raw = _field(_PROVIDER, kept)
        out.append(raw)
    return b"".join(out)


def clean_stack(data: bytes) -> bytes:
    """An AnalyzeStackRequest whose every resource went through `clean_resource`."""
    try:
        fields = _fields(data)
    except _Malformed:
        return b""  # nothing readable: an empty stack (Analyze judges each resource on its own)
    return b"".join(
        _field(_RESOURCES, clean_resource(_payload(raw))) if number == _RESOURCES and wire == 2 else raw
        for number, wire, raw in fields
    )


def problem_of(properties: struct_pb2.Struct) -> Optional[str]:
    """Why a decoded resource cannot be judged: the marker, or a failing MessageToDict."""
    marked = properties.fields.get(MARKER)
    if marked is not None:
        return marked.string_value or "its properties could not be decoded"
    try:
        # The host's own steps (pulumi_policy.policy: deserialize_properties(MessageToDict(...))), through
        # the host module so that, once install() ran, the rules reuse what this decoded.
        from pulumi_policy import policy as host

        plain = host.json_format.MessageToDict(properties)
    except (ValueError, RecursionError, TypeError) as error:
        return f"its properties could not be decoded ({type(error).__name__})"
    try:
        # a malformed signature, e.g. a secret marker without its value, fails there.
        host.deserialize_properties(plain)
    except Exception as error:  # whatever the host would crash on is "cannot be judged"
        return f"its properties could not be decoded ({type(error).__name__} in a Pulumi value signature)"
    return None


def _message(name: str, urn: str, reason: str) -> str:
    return (
        f"could not judge resource '{name}' ({urn}): {reason}. No rule of the pack saw it. Fix the "
        f"property (finite numbers, shallower nesting), or lower '{POLICY_NAME}' in the policy config "
        f"once the resource is checked elsewhere."
    )


def _bounded_text(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Decoding failures are reported by the servicer wrapper (`install`), before any rule runs; here,
    YAML text among the properties whose aliases expand past `yaml_text.MAX_NODES` (the other rules
    treat such text as unreadable, so it gets its verdict here, once)."""
    stack: list[tuple[str, Any]] = [("", plain(args.props))]
    found: list[str] = []
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
        elif isinstance(node, str) and "&" in node and "*" in node:  # anchors and aliases
            try:
                yaml_text.load_all(node)
            except yaml_text.YamlTooLarge as error:
                found.append(f"{path or '(root)'} ({error})")
            except (yaml.YAMLError, ValueError):
                pass  # not YAML: the rules that read it say so
    if found:
        report(
            f"could not judge resource '{args.name}': YAML text at {', '.join(sorted(found)[:3])}; no rule of the "
            f"pack read it. Fix: write the text without aliases (yaml.safe_dump of the data does), or lower "
            f"'{POLICY_NAME}' in the policy config once the resource is checked elsewhere."
        )


resource_decodable = resource_policy(
    name=POLICY_NAME,
    description="Every resource's properties can be decoded and judged (finite numbers, bounded nesting, YAML "
    "text whose aliases stay within bounds); "
    "one that cannot gets this verdict instead of crashing the analyzer.",
    validate=_bounded_text,
)

POLICIES = [resource_decodable]


def install() -> None:
    """Make the policy host lenient: properties checked on the wire, then the servicer's Analyze and
    AnalyzeStack answer an undecodable resource with a verdict. Call before `PolicyPack(...)`."""
    from pulumi.runtime.proto import analyzer_pb2
    from pulumi_policy import policy as host

    for message, clean in (
        (analyzer_pb2.AnalyzeRequest, clean_resource),
        (analyzer_pb2.AnalyzeStackRequest, clean_stack),
    ):
        parse = message.FromString
        message.FromString = staticmethod(_lenient(parse, clean))

    servicer = host._PolicyAnalyzerServicer
    analyze, analyze_stack = servicer.Analyze, servicer.AnalyzeStack

    def diagnostic(self: Any, name: str, urn: str, reason: str) -> Any:
        level = _level(self)
        if level is None:
            return None
        return analyzer_pb2.AnalyzeDiagnostic(
            policyName=POLICY_NAME,
            policyPackName=getattr(self, "_PolicyAnalyzerServicer__policy_pack_name", ""),
            policyPackVersion=getattr(self, "_PolicyAnalyzerServicer__policy_pack_version", ""),
            message=_message(name, urn, reason),
            urn=urn,
            description=resource_decodable.description,
            enforcementLevel=self._map_enforcement_level(level),
        )

    def lenient_analyze(self: Any, request: Any, context: Any) -> Any:
        reason = problem_of(request.properties)
        if reason is None:
            return analyze(self, request, context)
        response = analyzer_pb2.AnalyzeResponse()
        found = diagnostic(self, request.name, request.urn, reason)
        if found is not None:
            response.diagnostics.append(found)
        return response

    def lenient_analyze_stack(self: Any, request: Any, context: Any) -> Any:
        resources = list(request.resources)
        reasons = [problem_of(r.properties) for r in resources]
        bad = [(r, reason) for r, reason in zip(resources, reasons) if reason is not None]
        if bad:
            request = analyzer_pb2.AnalyzeStackRequest(
                resources=[r for r, reason in zip(resources, reasons) if reason is None]
            )
        response = analyze_stack(self, request, context)
        for resource, reason in bad:
            found = diagnostic(self, resource.name, resource.urn, reason)
            if found is not None:
                response.diagnostics.append(found)
        return response

    def scoped(method: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: Any, request: Any, context: Any) -> Any:
            with request_scope():
                return method(self, request, context)

        return run

    servicer.Analyze = scoped(lenient_analyze)  # type: ignore[method-assign]
    servicer.AnalyzeStack = scoped(lenient_analyze_stack)  # type: ignore[method-assign]
    # The host decodes a request's properties again for every policy (pulumi_policy 1.21 policy.py,
    # Analyze / AnalyzeStack: deserialize_properties(json_format.MessageToDict(r.properties)) inside the
    # per-policy loop): within a request, once per resource.
    decode, proxy = host.deserialize_properties, host.unknown_checking_proxy

    def decode_once(props: dict[str, Any], proxy_secrets: bool = False) -> dict[str, Any]:
        return memoized(("decoded", id(props), proxy_secrets), props, lambda: decode(props, proxy_secrets))

    def proxy_once(props: dict[str, Any]) -> dict[str, Any]:
        return memoized(("proxy", id(props)), props, lambda: proxy(props))

    host.json_format = _OnceJsonFormat()
    host.deserialize_properties = decode_once
    host.unknown_checking_proxy = proxy_once


class _OnceJsonFormat:
    """json_format for the host module: MessageToDict once per message within a request scope."""

    def __getattr__(self, name: str) -> Any:
        return getattr(json_format, name)

    @staticmethod
    def MessageToDict(message: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return json_format.MessageToDict(message, *args, **kwargs)
        # keyed by the bytes: the host reads `r.properties` anew for each policy (a new wrapper each time)
        return memoized(("dict", message.SerializeToString()), None, lambda: json_format.MessageToDict(message))


def _lenient(parse: Callable[[bytes], Any], clean: Callable[[bytes], bytes]) -> Callable[[bytes], Any]:
    def from_string(data: bytes) -> Any:
        return parse(clean(data))

    return from_string


def _level(servicer: Any) -> Optional[EnforcementLevel]:
    """The configured level of `resource-decodable` (None when disabled)."""
    level = servicer._get_enforcement_level(resource_decodable)
    if level == EnforcementLevel.DISABLED:
        return None
    return EnforcementLevel.MANDATORY if level == EnforcementLevel.REMEDIATE else level
