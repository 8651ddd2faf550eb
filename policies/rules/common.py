"""Reading resource properties the way a first preview presents them.

On a first `pulumi preview` most IDs and many computed values are unknown. pulumi-policy wraps
properties in a proxy that raises on any unknown access, which aborts a whole stack policy because
of one unknown subnet ID. The rules therefore work on plain copies (`plain`) and treat the unknown
sentinels explicitly: an unknown never yields a violation, it only makes a check skip.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterable, Mapping, Optional

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
)

from .efa_table import EFA_GPU_TYPES

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
K8S_INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"

EFA_INTERFACE_TYPES = ("efa", "efa-only")


def is_unknown(value: Any) -> bool:
    return value is UNKNOWN or (isinstance(value, str) and value in UNKNOWN_SENTINELS)


def plain(props: Any) -> Any:
    """A plain dict/list copy of (possibly proxied) properties, unknown sentinels kept as strings."""
    if isinstance(props, Mapping):
        return copy.deepcopy(dict(serialize_properties(props)))
    return copy.deepcopy(serialize_properties(props))


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
            if not isinstance(obj, Mapping) or step not in obj:
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
    except (TypeError, ValueError):
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
    given = dict(args.get_config() or {})
    result = {k: copy.deepcopy(v["default"]) for k, v in schema.items() if "default" in v}
    result.update(given)
    return result


def efa_types(config: Mapping[str, Any]) -> dict[str, int]:
    """`efaGpuTypes` as {type: count} (protobuf hands numbers over as floats)."""
    return {name: int(count) for name, count in (config.get("efaGpuTypes") or {}).items()}


def name_of(resource: Any) -> str:
    """`Kind 'name'` of a resource or of validation args (both carry resource_type and name)."""
    return f"{resource.resource_type.split(':')[-1]} '{resource.name}'"


def join(items: Iterable[str]) -> str:
    return ", ".join(sorted(items))


def resource_policy(
    name: str,
    description: str,
    validate: Callable[[ResourceValidationArgs, ReportViolation], None],
    config: Optional[dict[str, dict[str, Any]]] = None,
) -> ResourceValidationPolicy:
    """A mandatory per-resource rule whose thresholds are `config` (JSON-schema properties with defaults).

    One place states the level: a policy the engine is given without one silently becomes advisory.
    """
    return ResourceValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties=config) if config is not None else None,
    )
