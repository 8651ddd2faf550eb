"""Reading resource properties the way a first preview presents them.

On a first `pulumi preview` most IDs and many computed values are unknown. pulumi-policy wraps
properties in a proxy that raises on any unknown access, which aborts a whole stack policy because
of one unknown subnet ID. The rules therefore work on plain copies (`plain`) and treat the unknown
sentinels explicitly: an unknown never yields a violation, it only makes a check skip.
"""

from __future__ import annotations

import copy
import re
import threading
import traceback
from collections.abc import Mapping as MappingABC
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)
from pulumi_policy.deserialize import serialize_properties
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
    unknown_checking_proxy,
)

from .efa_table import EFA_GPU_TYPES, EFA_NETWORK_CARDS, GPUS_PER_INSTANCE

UNKNOWN_SENTINELS = frozenset(
    {
        UNKNOWN_BOOLEAN_VALUE,
        UNKNOWN_NUMBER_VALUE,
        UNKNOWN_STRING_VALUE,
        UNKNOWN_ARRAY_VALUE,
        UNKNOWN_ASSET_VALUE,
        UNKNOWN_ARCHIVE_VALUE,
        UNKNOWN_OBJECT_VALUE,
    }
)


class _Unknown:
    """Marker returned by `dig` when any step of the path is not known yet."""

    def __repr__(self) -> str:
        return "<unknown>"


UNKNOWN = _Unknown()

# Resource types the rules look at.
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
MANAGED_NODE_GROUP = "eks:index:ManagedNodeGroup"  # pulumi-eks component; its child is a NODE_GROUP
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"
EKS_COMPONENT_CLUSTER = "eks:index:Cluster"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
K8S_SERVICE = "kubernetes:core/v1:Service"
K8S_SERVICE_PATCH = "kubernetes:core/v1:ServicePatch"  # server-side apply of a Service's fields
K8S_INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"

EFA_INTERFACE_TYPES = ("efa", "efa-only")

# Further paths to EC2 capacity (judged like the managed node group).
EC2_INSTANCE = "aws:ec2/instance:Instance"
LAUNCH_CONFIGURATION = "aws:ec2/launchConfiguration:LaunchConfiguration"
AUTOSCALING_GROUP = "aws:autoscaling/group:Group"
EKS_NODE_GROUP = "eks:index:NodeGroup"  # pulumi-eks self-managed node groups (ASG + launch template)
EKS_NODE_GROUP_V2 = "eks:index:NodeGroupV2"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SG_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG_EGRESS_RULE = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
ROUTE = "aws:ec2/route:Route"
ROUTE_TABLE_ASSOCIATION = "aws:ec2/routeTableAssociation:RouteTableAssociation"
INTERNET_GATEWAY = "aws:ec2/internetGateway:InternetGateway"
K8S_CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
K8S_SECRET = "kubernetes:core/v1:Secret"
K8S_CONFIG_MAP_PATCH = "kubernetes:core/v1:ConfigMapPatch"
K8S_SECRET_PATCH = "kubernetes:core/v1:SecretPatch"


def is_unknown(value: Any) -> bool:
    return value is UNKNOWN or (type(value) is str and value in UNKNOWN_SENTINELS)


# Work shared within one rule's judgement (one validate call), per thread: a stack rule reads each
# resource's properties once however many joins ask for them. `guarded` opens the scope around
# every validate call; nothing is shared between calls, so no verdict can come from another request.
_scope = threading.local()


@contextmanager
def request_scope() -> Iterator[None]:
    previous = getattr(_scope, "memo", None)
    _scope.memo = {}
    try:
        yield
    finally:
        _scope.memo = previous


def memoized(key: Any, anchor: Any, build: Callable[[], Any]) -> Any:
    """`build()` once per scope for `key` (outside a scope: every time). `anchor` is kept alive with
    the value, so an id() in the key is not reused within the scope. Callers share the value: rules
    never mutate what `plain` or `StackView` give them."""
    memo = getattr(_scope, "memo", None)
    if memo is None:
        return build()
    if key not in memo:
        memo[key] = (anchor, build())
    return memo[key][1]


def plain(props: Any) -> Any:
    """Plain dicts and lists of (possibly proxied) properties, unknown sentinels kept as strings.

    The host hands properties wrapped in its unknown-checking proxy (`unknown_checking_proxy`), which
    raises `UnknownValueError` on an unknown value; the walk reads each value through that public
    interface and keeps the error's sentinel instead. Assets and archives go through
    `serialize_properties`. New containers, shared immutable leaves: no further copy needed."""
    if type(props) in _LEAVES:
        return props
    return memoized(("plain", id(props)), props, lambda: _unwrap(props))


_LEAVES = frozenset({str, int, float, bool, type(None)})
# The proxy types themselves, learnt from the public constructor rather than named.
_MAP_PROXY = type(unknown_checking_proxy({}))
_LIST_PROXY = type(unknown_checking_proxy({"a": []})["a"])


def _read(container: Any, key: Any) -> Any:
    try:
        return container[key]
    except UnknownValueError as unknown:
        return unknown.unknown_type_sentinel


def _unwrap(node: Any) -> Any:
    kind = type(node)
    if kind in _LEAVES:
        return node
    if kind is _MAP_PROXY:
        try:  # no unknown at this level (the common case): one comprehension, no per-key handler
            return {key: v if type(v := node[key]) in _LEAVES else _unwrap(v) for key in node}
        except UnknownValueError:
            return {key: _unwrap(_read(node, key)) for key in node}
    if kind is _LIST_PROXY:
        try:
            return [v if type(v := node[i]) in _LEAVES else _unwrap(v) for i in range(len(node))]
        except UnknownValueError:
            return [_unwrap(_read(node, i)) for i in range(len(node))]
    if kind is dict:
        return {key: _unwrap(value) for key, value in node.items()}
    if kind is list or kind is tuple:
        return [_unwrap(value) for value in node]
    return serialize_properties(node)


def dig(obj: Any, *path: Any) -> Any:
    """`obj[p0][p1]...`: None where something is absent, UNKNOWN where something is not known yet."""
    for step in path:
        if is_unknown(obj):
            return UNKNOWN
        if isinstance(step, int):
            if not isinstance(obj, list) or step >= len(obj):
                return None
            obj = obj[step]
        else:
            if not (type(obj) is dict or isinstance(obj, MappingABC)) or step not in obj:
                return None
            obj = obj[step]
    return UNKNOWN if is_unknown(obj) else obj


def known_list(value: Any) -> Optional[list]:
    """The list if it is known (elements may still be unknown), else None."""
    if is_unknown(value):
        return None
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def truthy(value: Any) -> Optional[bool]:
    """Booleans as the providers accept them (true/"true"); None when unknown or absent."""
    if value is None or is_unknown(value):
        return None
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def as_int(value: Any) -> Optional[int]:
    if value is None or is_unknown(value):
        return None
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):  # OverflowError: "1e999" is float infinity
        return None


# -- policy config -----------------------------------------------------------------------------

EFA_TYPES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "EFA-capable GPU instance types and their EFA interface counts (one per network card)",
    "additionalProperties": {"type": "integer", "minimum": 1},
    "default": dict(EFA_GPU_TYPES),
}


def config_with_defaults(args: Any, schema: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The policy's config with schema defaults filled in (the engine does this; tests may not)."""
    result = dict(_defaults(id(schema), schema))
    result.update(args.get_config() or {})
    return result


_schema_defaults: dict[int, tuple[Mapping[str, Any], dict[str, Any]]] = {}


def _defaults(key: int, schema: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A schema's defaults, built once (every rule reads its config on every call; rules never
    mutate what config gives them). The schema is kept with them, so its id is not reused."""
    if key not in _schema_defaults:
        _schema_defaults[key] = (schema, {k: copy.deepcopy(v["default"]) for k, v in schema.items() if "default" in v})
    return _schema_defaults[key][1]


def norm_type(name: Any) -> Optional[str]:
    """An instance type as EC2 spells it (lower case, no blanks); None if it is not a known string.

    EC2 API names are lower case; a table lookup must not miss `P5.48xlarge`."""
    if not isinstance(name, str) or is_unknown(name):
        return None
    return name.strip().lower() or None


def efa_types(config: Mapping[str, Any]) -> dict[str, int]:
    """`efaGpuTypes` plus `extraEfaGpuTypes` as {normalised type: count} (protobuf sends floats)."""
    table: dict[str, int] = {}
    for key in ("efaGpuTypes", "extraEfaGpuTypes"):
        for name, count in (config.get(key) or {}).items():
            if norm_type(name) is not None and as_int(count):
                table[str(norm_type(name))] = int(as_int(count) or 0)
    return table


# -- the type table as policy config (shared by every GPU rule) ---------------------------------
GPU_TABLE_SCHEMA: dict[str, dict[str, Any]] = {
    "efaGpuTypes": EFA_TYPES_SCHEMA,
    "extraEfaGpuTypes": {
        "type": "object",
        "description": "more EFA GPU types (type -> EFA interfaces), merged over efaGpuTypes",
        "additionalProperties": {"type": "integer", "minimum": 1},
        "default": {},
    },
    "gpuFamilyPattern": {
        "type": "string",
        "description": "regex (case-insensitive) on the instance family of accelerated types that must be "
        "in the table (or in nonEfaGpuTypes)",
        "default": r"^(p|g|gr|trn)\d",
    },
    "nonEfaGpuTypes": {
        "type": "array",
        "items": {"type": "string"},
        "description": "accelerated types deliberately used without EFA (not judged by the EFA rules)",
        "default": [],
    },
    "unlistedGpuTypes": {
        "type": "string",
        "enum": ["deny", "allow"],
        "description": "a type of a GPU family in neither table: deny (violation) or allow",
        "default": "deny",
    },
}


@dataclass
class TypeTable:
    """The EFA GPU types a rule judges, from its policy config."""

    efa: dict[str, int]
    family: re.Pattern
    non_efa: set[str]
    deny_unlisted: bool
    gpus: dict[str, int] = dataclass_field(default_factory=lambda: dict(GPUS_PER_INSTANCE))

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "TypeTable":
        try:
            family = re.compile(str(config.get("gpuFamilyPattern") or "$^"), re.IGNORECASE)
        except re.error:
            family = re.compile(GPU_TABLE_SCHEMA["gpuFamilyPattern"]["default"], re.IGNORECASE)
        return cls(
            efa=efa_types(config),
            family=family,
            non_efa={t for t in (norm_type(n) for n in config.get("nonEfaGpuTypes") or []) if t},
            deny_unlisted=config.get("unlistedGpuTypes", "deny") != "allow",
        )

    def efa_of(self, types: Iterable[str]) -> set[str]:
        return {t for t in types if t in self.efa}

    def cards(self, instance_type: str) -> tuple[int, ...]:
        """The network cards that must each carry one EFA interface: EC2's EFA cards of the type when
        the configured count is EC2's, else cards 0..count-1."""
        count = self.efa[instance_type]
        ec2 = EFA_NETWORK_CARDS.get(instance_type)
        return ec2 if ec2 is not None and len(ec2) == count else tuple(range(count))

    def strictest(self, types: Iterable[str]) -> str:
        """Of several EFA GPU types, the one with the most EFA cards (ties: by name, for stable messages)."""
        return max(sorted(t for t in types if t in self.efa), key=lambda t: self.efa[t])

    def unlisted(self, types: Iterable[str]) -> set[str]:
        """Types of a GPU family that neither table names."""
        return {t for t in types if t not in self.efa and t not in self.non_efa and self.family.search(t)}


def name_of(resource: Any) -> str:
    """`Kind 'name'` of a resource or of validation args (both carry resource_type and name)."""
    return f"{resource.resource_type.split(':')[-1]} '{resource.name}'"


def join(items: Iterable[str]) -> str:
    return ", ".join(sorted(items))


def guarded(name: str, validate: Callable[[Any, ReportViolation], None]) -> Callable[[Any, ReportViolation], None]:
    """`validate` that turns its own failure into a violation instead of a crashed gRPC call.

    pulumi-policy lets an exception escape as gRPC UNKNOWN, which aborts the whole preview with no
    hint which property is wrong; and a rule that cannot judge must not pass silently either.
    """

    def run(args: Any, report: ReportViolation) -> None:
        try:
            with request_scope():
                validate(args, report)
        except Exception as error:  # any failure becomes a verdict, never a crashed call
            where = getattr(args, "name", None)
            frame = traceback.extract_tb(error.__traceback__)[-1]
            report(
                f"{name} could not judge {f'resource {where!r}' if where else 'the stack'}: "
                f"{type(error).__name__}: {str(error)[:200]} (at {frame.name}). A property or the policy "
                f"config has a shape the rule does not handle; fix it, or report the rule."
            )

    return run


def resource_policy(
    name: str,
    description: str,
    validate: Callable[[ResourceValidationArgs, ReportViolation], None],
    config: Optional[dict[str, dict[str, Any]]] = None,
    level: EnforcementLevel = EnforcementLevel.MANDATORY,
) -> ResourceValidationPolicy:
    """A per-resource rule (mandatory unless stated) whose thresholds are `config` (JSON-schema
    properties with defaults).

    One place states the level: a policy the engine is given without one silently becomes advisory.
    """
    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=guarded(name, validate),
        enforcement_level=level,
        config_schema=PolicyConfigSchema(properties=config) if config is not None else None,
    )
