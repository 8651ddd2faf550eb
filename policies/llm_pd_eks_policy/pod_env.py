"""What a container gets, read the way Kubernetes gives it: its environment (envFrom sources, then
`env`, ConfigMaps and Secrets of the stack and their server-side-apply patches) and its GPUs (an
extended resource, or DRA resource claims of the stack).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .common import (
    K8S_CONFIG_MAP,
    K8S_CONFIG_MAP_PATCH,
    K8S_SECRET,
    K8S_SECRET_PATCH,
    UNKNOWN,
    as_int,
    dig,
    is_unknown,
    known_list,
)
from .stack import StackView


def requested(container: Any, resource: str) -> Optional[int]:
    """How many of `resource` the container asks for (limits or requests); None if not known yet."""
    values = [dig(container, "resources", part, resource) for part in ("limits", "requests")]
    known = [as_int(v) or 0 for v in values if v is not None and not is_unknown(v)]
    if any(is_unknown(v) for v in values) and not any(known):
        return None
    return max(known, default=0)


@dataclass
class External:
    """A value that comes from something outside the stack (or a field the pack cannot read)."""

    source: str


@dataclass
class EnvView:
    """A container's environment as the kubelet builds it: envFrom sources in order, then `env`
    entries in order, a later entry replacing an earlier one of the same name (Kubernetes docs,
    "Define Environment Variables for a Container": env takes precedence over envFrom)."""

    values: dict[str, Any] = field(default_factory=dict)
    unknown_source: bool = False  # a source whose keys are not known yet may set anything
    external_sources: list[str] = field(default_factory=list)

    def get(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        if self.unknown_source:
            return UNKNOWN
        if self.external_sources:
            return External(", ".join(self.external_sources))
        return None


class ObjectStore:
    """The stack's ConfigMaps and Secrets, by (namespace, name)."""

    def __init__(self, view: Optional[StackView]) -> None:
        self._items: dict[tuple[str, str, str], Any] = {}
        # The objects first, then their server-side-apply patches (ConfigMapPatch / SecretPatch
        # change the live object's keys: a patched key is the value the kubelet reads).
        for types in ((K8S_CONFIG_MAP, K8S_SECRET), (K8S_CONFIG_MAP_PATCH, K8S_SECRET_PATCH)):
            for resource in view.of_type(*types) if view else []:
                props = view.props(resource) if view else {}
                kind = "ConfigMap" if resource.resource_type.startswith(K8S_CONFIG_MAP) else "Secret"
                name, ns = dig(props, "metadata", "name"), dig(props, "metadata", "namespace")
                if not isinstance(name, str):
                    name = resource.name  # auto-named: the logical name is the best we have
                key = (kind, ns if isinstance(ns, str) else "*", name)
                data = self._data(kind, props)
                before = self._items.get(key, {})
                if resource.resource_type in (K8S_CONFIG_MAP_PATCH, K8S_SECRET_PATCH) and isinstance(before, dict):
                    data = {**before, **data} if isinstance(data, dict) else data
                self._items[key] = data

    @staticmethod
    def _data(kind: str, props: dict) -> Any:
        data = dig(props, "data")
        if is_unknown(data) or is_unknown(dig(props, "stringData")):
            return UNKNOWN
        out: dict[str, Any] = {}
        if kind == "Secret" and isinstance(data, dict):
            for key, value in data.items():
                try:
                    out[key] = base64.b64decode(str(value)).decode() if not is_unknown(value) else UNKNOWN
                except (binascii.Error, UnicodeDecodeError):
                    out[key] = UNKNOWN
        elif isinstance(data, dict):
            out.update(data)
        if isinstance(dig(props, "stringData"), dict):
            out.update(dig(props, "stringData"))
        return out

    def lookup(self, kind: str, namespace: Any, name: Any) -> Any:
        """The object's data, UNKNOWN, or None when no such object is in the stack."""
        if is_unknown(name) or is_unknown(namespace):
            return UNKNOWN
        for ns in ((namespace if isinstance(namespace, str) else "default"), "*"):
            if (kind, ns, name) in self._items:
                return self._items[(kind, ns, name)]
        return None


def effective_env(container: Any, namespace: Any, store: ObjectStore) -> EnvView:
    view = EnvView()
    env_from = dig(container, "envFrom")
    if is_unknown(env_from):
        view.unknown_source = True
    for source in known_list(env_from) or []:
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            ref = dig(source, key)
            if ref is None:
                continue
            name = dig(ref, "name")
            data = store.lookup(kind, namespace, name)
            if is_unknown(data):
                view.unknown_source = True
            elif data is None:
                view.external_sources.append(f"{kind} {name!r} (envFrom, not in this stack)")
            else:
                prefix = dig(source, "prefix")
                prefix = prefix if isinstance(prefix, str) else ""
                view.values.update({f"{prefix}{k}": v for k, v in data.items()})
    env = dig(container, "env")
    if is_unknown(env):
        view.unknown_source = True
        return view
    for item in known_list(env) or []:
        name = dig(item, "name")
        if not isinstance(name, str):
            continue
        value_from = dig(item, "valueFrom")
        if value_from is None:
            value = dig(item, "value")
            view.values[name] = "" if value is None else value
            continue
        for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = dig(value_from, key)
            if ref is None:
                continue
            data = store.lookup(kind, namespace, dig(ref, "name"))
            if is_unknown(data):
                view.values[name] = UNKNOWN
            elif data is None:
                view.values[name] = External(f"{kind} {dig(ref, 'name')!r} (not in this stack)")
            else:
                view.values[name] = data.get(
                    dig(ref, "key"), External(f"{kind} {dig(ref, 'name')!r} has no key {dig(ref, 'key')!r}")
                )
            break
        else:
            view.values[name] = UNKNOWN if is_unknown(value_from) else External(f"valueFrom {list(value_from)}")
    return view


DRA_CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")


DEVICE_CLASS = "DeviceClass"
# What a DeviceClass of the stack selects that makes it a GPU class whatever its name: its selectors'
# CEL names a GPU driver (`device.driver == "gpu.nvidia.com"`, NVIDIA's DRA driver) or GPU attributes.
_GPU_CLASS_TEXT = re.compile(r"gpu|nvidia", re.IGNORECASE)


class ClaimStore:
    """The stack's DRA ResourceClaims and ResourceClaimTemplates (any resource.k8s.io version):
    (kind, namespace, name) -> the device requests of the claim; and its DeviceClasses that select
    GPUs (by driver or attribute, whatever the class is called)."""

    def __init__(self, view: StackView) -> None:
        self._items: dict[tuple[str, str, str], Any] = {}
        self.gpu_classes: set[str] = set()
        for resource in view.resources:
            kind = resource.resource_type.split(":")[-1]
            if not resource.resource_type.startswith("kubernetes:resource.k8s.io/"):
                continue
            if kind == DEVICE_CLASS:
                props = view.props(resource)
                name = dig(props, "metadata", "name")
                if _GPU_CLASS_TEXT.search(repr(dig(props, "spec"))):
                    self.gpu_classes.add(name if isinstance(name, str) else resource.name)
                continue
            if kind not in DRA_CLAIM_KINDS:
                continue
            props = view.props(resource)
            name, ns = dig(props, "metadata", "name"), dig(props, "metadata", "namespace")
            spec = dig(props, "spec", "spec") if kind == "ResourceClaimTemplate" else dig(props, "spec")
            self._items[
                (kind, ns if isinstance(ns, str) else "*", name if isinstance(name, str) else resource.name)
            ] = dig(spec, "devices", "requests")

    def requests(self, kind: str, namespace: Any, name: Any) -> Any:
        """The claim's requests, UNKNOWN, or None when no such claim is in the stack."""
        if is_unknown(name) or is_unknown(namespace):
            return UNKNOWN
        for ns in ((namespace if isinstance(namespace, str) else "default"), "*"):
            if (kind, ns, name) in self._items:
                return self._items[(kind, ns, name)]
        return None


def dra_gpus(pod: Any, container: Any, namespace: Any, claims: ClaimStore, pattern: str) -> Any:
    """GPUs a container gets through DRA claims: a count, "all" (allocationMode All), 0, or UNKNOWN.

    Pod `resourceClaims[]` name a ResourceClaim (`resourceClaimName`) or template
    (`resourceClaimTemplateName`); a container uses them by `resources.claims[].name` (optionally one
    `request`). A request's device class is `deviceClassName` (v1beta1) or `exactly.deviceClassName`
    (v1), with `allocationMode` ExactCount (`count`, default 1) or All; `firstAvailable` lists
    alternatives (the largest GPU count holds). A claim the stack does not declare counts as one GPU:
    the pack cannot see what it allocates."""
    used = known_list(dig(container, "resources", "claims"))
    if used is None:
        return UNKNOWN
    by_name = {dig(c, "name"): c for c in known_list(dig(pod, "resourceClaims")) or [] if isinstance(c, dict)}
    total: Any = 0
    for use in used:
        source = by_name.get(dig(use, "name"))
        if source is None:
            continue
        if dig(source, "resourceClaimName") is not None:
            kind, name = "ResourceClaim", dig(source, "resourceClaimName")
        else:
            kind, name = "ResourceClaimTemplate", dig(source, "resourceClaimTemplateName")
        requests = claims.requests(kind, namespace, name)
        if is_unknown(requests):
            return UNKNOWN
        if requests is None:
            total = total if total == "all" else total + 1
            continue
        only = dig(use, "request")
        for request in known_list(requests) or []:
            if isinstance(only, str) and dig(request, "name") != only:
                continue
            count = _request_gpus(request, pattern, claims.gpu_classes)
            if is_unknown(count):
                return UNKNOWN
            total = "all" if "all" in (count, total) else total + count
    return total


def _request_gpus(request: Any, pattern: str, gpu_classes: set[str]) -> Any:
    options = [request, *(known_list(dig(request, "firstAvailable")) or [])]
    best: Any = 0
    for option in options:
        exact = dig(option, "exactly") if isinstance(dig(option, "exactly"), dict) else option
        device_class = dig(exact, "deviceClassName")
        if is_unknown(device_class):
            return UNKNOWN
        if not isinstance(device_class, str) or not (
            device_class in gpu_classes or re.search(pattern, device_class, re.IGNORECASE)
        ):
            continue
        if dig(exact, "allocationMode") == "All":
            return "all"
        count = as_int(dig(exact, "count"))
        best = max(best, 1 if count is None else count)
    return best
