"""The stack's resources indexed for joining: by type, by a property's value, by the property
dependencies the engine recorded, and references resolved to one of the states `Ref` names (see
stack.py). Shared by the network view (network.py) and the capacity view (stack.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .common import (
    SUBNET,
    is_unknown,
    known_list,
    plain,
)

NO_SOURCE = "a value no resource of this stack feeds (an invoke result?)"


@dataclass
class Ref:
    state: str  # "none" | "resolved" | "unresolved" | "external" | "unjudgeable"
    resource: Any = None
    literal: str = ""
    candidates: list = field(default_factory=list)  # unresolved: the resources the engine says feed it


@dataclass
class SubnetRefs:
    resolved: list = field(default_factory=list)  # subnet PolicyResources
    unknown: bool = False  # some entries are not known yet
    external: list[str] = field(default_factory=list)  # literal IDs no subnet of the stack carries
    unjudgeable: str = ""  # unknown IDs fed by something other than a subnet (what feeds them)


@dataclass
class EfaInterfaces:
    """The EFA interfaces of a launch template, as far as they are known."""

    known: bool  # False when the list or any interface type / card is unknown
    count: int  # interfaces whose type is efa/efa-only
    cards: dict[int, int]  # network card index -> EFA interfaces on it
    public: list[int]  # indexes of interfaces that ask for a public IP
    malformed: list[str] = field(default_factory=list)  # e.g. networkCardIndex "zero"


def merge_subnets(a: SubnetRefs, b: SubnetRefs) -> SubnetRefs:
    """Both sets of subnet references (a capacity's and its template's or ENIs')."""
    resolved = {s.urn: s for s in [*a.resolved, *b.resolved]}
    return SubnetRefs(
        list(resolved.values()),
        unknown=a.unknown or b.unknown,
        external=[*a.external, *b.external],
        unjudgeable=a.unjudgeable or b.unjudgeable,
    )


class ResourceIndex:
    def __init__(self, resources: list) -> None:
        self.resources = list(resources)
        self._by_urn = {r.urn: r for r in self.resources}
        self._props: dict[str, Any] = {}  # read on first use: a rule reads only the types it joins
        # Indexes, so that joining a 10,000-resource stack stays linear (llm_pd_eks_tools/maint/bench_policies.py).
        self._by_type: dict[str, list] = {}
        for r in self.resources:
            self._by_type.setdefault(r.resource_type, []).append(r)
        self._by_value: dict[tuple[str, str], dict[Any, list]] = {}

    def props(self, resource: Any) -> dict:
        found = self._props.get(resource.urn)
        if found is None:
            found = self._props[resource.urn] = plain(self._by_urn.get(resource.urn, resource).props)
        return found

    def of_type(self, *types: str) -> list:
        if len(types) == 1:
            return list(self._by_type.get(types[0], ()))
        return [r for r in self.resources if r.resource_type in types]

    def deps(self, resource: Any, key: str, *types: str) -> list:
        """Resources of `types` the engine recorded as feeding property `key` of `resource`."""
        seen, found = set(), []
        for dep in (resource.property_dependencies or {}).get(key, []):
            if dep.resource_type in types and dep.urn not in seen:
                seen.add(dep.urn)
                found.append(dep)
        return found

    def fed_by(self, resource: Any, *types: str) -> list:
        """Resources of `types` the engine recorded as feeding any property of `resource`."""
        found = {
            d.urn: d for ds in (resource.property_dependencies or {}).values() for d in ds if d.resource_type in types
        }
        return list(found.values())

    def by_property(self, type_: str, key: str, value: Any) -> list:
        if value is None or is_unknown(value):
            return []
        if not isinstance(value, (str, int, float, bool)):
            return [r for r in self.of_type(type_) if self.props(r).get(key) == value]
        index = self._by_value.get((type_, key))
        if index is None:
            index = self._by_value[(type_, key)] = {}
            for r in self.of_type(type_):
                found = self.props(r).get(key)
                if isinstance(found, (str, int, float, bool)):
                    index.setdefault(found, []).append(r)
        return list(index.get(value, ()))

    def ref(self, owner: Any, dep_key: str, type_: str, candidates: list[tuple[str, Any]]) -> Ref:
        """Resolve a reference given as (property of the target, value) pairs, e.g. [("id", "lt-1")]."""
        values = [(k, v) for k, v in candidates if v is not None]
        if not values:
            return Ref("none")
        found = self.deps(owner, dep_key, type_)
        if not found:
            for key, value in values:
                found = self.by_property(type_, key, value)
                if found:
                    break
        if len(found) == 1:
            return Ref("resolved", found[0])
        if not found and any(is_unknown(v) for _, v in values):
            return self._unknown_ref(owner, dep_key, type_)
        if found:
            return Ref("unresolved", candidates=found)
        literal = next((str(v) for _, v in values if isinstance(v, str)), "")
        if not literal:  # a number, a list...: not a reference anything could resolve
            return Ref("external", literal=repr(values[0][1]))
        return Ref("external", literal=literal)

    def _unknown_ref(self, owner: Any, dep_key: str, type_: str) -> Ref:
        """A reference not known yet that no resource of `type_` feeds is "unjudgeable": its value
        comes from something else — a component's output, a remote component, a StackReference, a
        resource of another provider — or from nothing the engine records (an invoke whose inputs are
        not known yet), and the pack cannot resolve it."""
        others = self.feeders(owner, dep_key, type_)
        return Ref("unjudgeable", literal=others or NO_SOURCE)

    def feeders(self, owner: Any, key: str, type_: str) -> str:
        """What feeds property `key` of `owner` other than resources of `type_` ("" when nothing)."""
        others = [d for d in (owner.property_dependencies or {}).get(key, []) if d.resource_type != type_]
        return ", ".join(sorted({f"{d.resource_type} '{d.name}'" for d in others}))

    def subnet_refs(self, owner: Any, key: str, ids: Any) -> SubnetRefs:
        refs = SubnetRefs()
        dep_subnets = self.deps(owner, key, SUBNET)
        listed = known_list(ids)
        if listed is None:  # the whole list is unknown: only the dependencies can tell
            others = self.feeders(owner, key, SUBNET)
            return SubnetRefs(
                dep_subnets,
                unknown=not dep_subnets,
                unjudgeable=others if others else "" if dep_subnets else NO_SOURCE,
            )
        found = {s.urn: s for s in dep_subnets}
        matched: set[str] = set()
        unmatched: list[str] = []
        for subnet_id in listed:
            if is_unknown(subnet_id):
                refs.unknown = True
                continue
            hits = self.by_property(SUBNET, "id", subnet_id)
            for s in hits:
                found.setdefault(s.urn, s)
                matched.add(s.urn)
            if not hits:
                unmatched.append(str(subnet_id))
        refs.resolved = list(found.values())
        # IDs of the stack's own subnets are outputs the inputs do not carry: the dependencies stand
        # for them, one entry each. An unknown entry beyond them comes from something else (an invoke
        # whose inputs are not known yet, another stack): unjudgeable. Literal IDs beyond them point
        # outside the stack.
        covered = len([s for s in dep_subnets if s.urn not in matched])
        unknown_entries = sum(1 for i in listed if is_unknown(i))
        if unknown_entries > covered:
            refs.unjudgeable = self.feeders(owner, key, SUBNET) or NO_SOURCE
        covered = max(0, covered - unknown_entries)
        if len(unmatched) > covered:
            refs.external = unmatched if covered == 0 else unmatched[covered:]
        return refs
