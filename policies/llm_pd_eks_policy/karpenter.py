"""Karpenter NodePools: which EFA GPU types a pool's requirements admit, wherever the pool is
declared (a resource of its own, or an object carried in a ConfigGroup, a Helm release's values or
YAML text). Its EC2NodeClass is a launch path the pack does not judge (EFA per card, placement group,
reservation, one AZ), so a pool that may launch EFA GPU types is refused by gpu-references-in-stack.
"""

from __future__ import annotations

import re
from typing import Any

from .common import (
    TypeTable,
    as_int,
    dig,
    is_unknown,
    known_list,
)
from .efa_table import ROWS
from .stack import StackView
from .workloads import embedded

KARPENTER_NODE_POOLS = ("kubernetes:karpenter.sh/v1:NodePool", "kubernetes:karpenter.sh/v1beta1:NodePool")
_KARPENTER_TYPE_KEYS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
_KARPENTER_FAMILY_KEY = "karpenter.k8s.aws/instance-family"
_KARPENTER_CATEGORY_KEY = "karpenter.k8s.aws/instance-category"
_KARPENTER_GPU_COUNT_KEY = "karpenter.k8s.aws/instance-gpu-count"


def _family(instance_type: str) -> str:
    return instance_type.split(".")[0]


# Well-known labels karpenter-provider-aws gives each instance type (pkg/providers/instancetype/types.go,
# computeRequirements): category/generation from instanceTypeScheme, family/size from the name,
# GPU name/manufacturer in lower kebab case, counts and MiB as decimal strings, arch as Kubernetes names.
_KARPENTER_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
_NUMERIC_OPS = {
    "Gt": lambda a, b: a > b,
    "Lt": lambda a, b: a < b,
    "Gte": lambda a, b: a >= b,
    "Lte": lambda a, b: a <= b,
}


def _karpenter_labels(instance_type: str) -> dict[str, set[str]]:
    """The label values Karpenter would give `instance_type` (only those the pack knows)."""
    family, _, size = instance_type.partition(".")
    labels = {key: {instance_type} for key in _KARPENTER_TYPE_KEYS}
    labels[_KARPENTER_FAMILY_KEY] = {family}
    labels["karpenter.k8s.aws/instance-size"] = {size}
    scheme = re.match(r"(^[a-z]+)(-[0-9]+tb)?([0-9]+).*\.", instance_type)
    if scheme:
        labels[_KARPENTER_CATEGORY_KEY] = {scheme.group(1)}
        labels["karpenter.k8s.aws/instance-generation"] = {scheme.group(3)}
    row = ROWS.get(instance_type)
    if row is not None:
        labels["kubernetes.io/arch"] = {_KARPENTER_ARCH.get(a, a) for a in row["architectures"]}
        labels["karpenter.k8s.aws/instance-cpu"] = {str(row["vcpus"])}
        labels["karpenter.k8s.aws/instance-memory"] = {str(row["memoryMiB"])}
        labels[_KARPENTER_GPU_COUNT_KEY] = {str(row["gpus"])}
        labels["karpenter.k8s.aws/instance-gpu-name"] = {row["gpuName"].lower().replace(" ", "-")}
        labels["karpenter.k8s.aws/instance-gpu-manufacturer"] = {row["gpuManufacturer"].lower().replace(" ", "-")}
        labels["karpenter.k8s.aws/instance-gpu-memory"] = {str(row["gpuMemoryMiB"])}
    return labels


def _admits(labels: dict[str, set[str]], key: str, op: str, values: list[str]) -> bool:
    """Whether one NodePool requirement lets a type with `labels` through (Kubernetes node selector
    semantics; a label the pack does not model never excludes)."""
    if key not in labels:
        return True
    have = labels[key]
    if op == "In":
        return bool(have & set(values))
    if op == "NotIn":
        return not have & set(values)
    if op == "Exists":
        return True
    if op == "DoesNotExist":
        return False
    if op in _NUMERIC_OPS and len(values) == 1 and as_int(values[0]) is not None:
        return any(as_int(v) is not None and _NUMERIC_OPS[op](as_int(v), as_int(values[0])) for v in have)
    return True  # an operator Kubernetes would refuse: it excludes nothing the pack can show


def karpenter_types(pool: Any, table: TypeTable) -> tuple[set[str], set[str]]:
    """(EFA table types, unlisted GPU types) a NodePool's requirements allow.

    Karpenter ANDs the requirements and evaluates each against every instance type's labels, as
    sets: a category minus some families still admits the other GPU families; an arch or size
    restriction can exclude every GPU type. A NodePool that restricts nothing may launch any type a
    pending pod fits, GPU types included (a pod asking for nvidia.com/gpu makes it pick one)."""
    possible = set(table.efa)
    named: set[str] = set()  # types/families named by In requirements (for unlisted ones)
    for req in known_list(dig(pool, "spec", "template", "spec", "requirements")) or []:
        key, op = dig(req, "key"), dig(req, "operator")
        if is_unknown(key) or is_unknown(op) or is_unknown(dig(req, "values")) or not isinstance(key, str):
            continue  # not known yet: it might restrict, so it does not narrow either
        raw = [str(v).strip() for v in known_list(dig(req, "values")) or [] if not is_unknown(v)]
        values = [v.lower() for v in raw] if key in (*_KARPENTER_TYPE_KEYS, _KARPENTER_FAMILY_KEY) else raw
        if op == "In" and key in _KARPENTER_TYPE_KEYS:
            named |= set(values)
        elif op == "In" and key == _KARPENTER_FAMILY_KEY:
            named |= {f"{v}.*" for v in values if not any(_family(t) == v for t in table.efa)}
        possible = {t for t in possible if _admits(_karpenter_labels(t), key, str(op), values)}
    return possible, table.unlisted(named)


# Resources that launch EC2 instances which the joined view does not model: judged only for whether
# they can launch a GPU type, and then refused as unjudgeable (the classic provider's fleet and spot
# resources by token; every aws-native EC2 / Auto Scaling / EKS resource by module).


def _is_node_pool(node: dict) -> bool:
    api = node.get("apiVersion")
    return node.get("kind") == "NodePool" and isinstance(api, str) and api.startswith("karpenter.sh/")


def node_pools(view: StackView) -> list[tuple[str, Any, dict]]:
    """(label, owning resource, NodePool object) of every NodePool in the stack, declared or carried."""
    found: list[tuple[str, Any, dict]] = []
    for resource in view.resources:
        if not resource.resource_type.startswith("kubernetes:"):
            continue
        props = view.props(resource)
        if resource.resource_type in KARPENTER_NODE_POOLS:
            found.append((f"Karpenter NodePool '{resource.name}'", resource, props))
        elif resource.resource_type.startswith("kubernetes:"):
            for path, pool in embedded(props, _is_node_pool):
                name = dig(pool, "metadata", "name")
                found.append(
                    (
                        f"Karpenter NodePool '{name if isinstance(name, str) else '?'}' (in "
                        f"{resource.resource_type.split(':')[-1]} '{resource.name}' at {path or '(root)'})",
                        resource,
                        pool,
                    )
                )
    return found
