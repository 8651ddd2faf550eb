"""Which GPU capacity a pod's nodeSelector admits, from the labels its nodes will carry: the
group's `labels` input and the labels EKS and the kubelet put on every node (the node group's name,
the instance type, the zone). A prefill pod selecting `eks.amazonaws.com/nodegroup: g6e` lands on
that group alone, so it is judged for g6e's EFA share and that group's AZ, not for every GPU type
of the stack.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from .common import MANAGED_NODE_GROUP, NODE_GROUP, dig, is_unknown
from .stack import Capacity, StackView

NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
_ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")

Labels = dict[str, Optional[set[str]]]  # label -> the values its nodes may carry (None: any, not known)


def node_labels(view: StackView, cap: Capacity, azs: set[str]) -> Optional[Labels]:
    """The labels a capacity's nodes carry; None when its own `labels` are not known yet."""
    props = view.props(cap.resource)
    given = dig(props, "labels")
    if is_unknown(given):
        return None
    labels: Labels = {
        str(k): None if is_unknown(v) else {str(v)} for k, v in (given.items() if isinstance(given, dict) else ())
    }
    if cap.resource.resource_type in (NODE_GROUP, MANAGED_NODE_GROUP):
        name = dig(props, "nodeGroupName")
        labels[NODEGROUP_LABEL] = {name} if isinstance(name, str) and not is_unknown(name) else None
    if cap.instance_types:
        labels.update({key: set(cap.instance_types) for key in _TYPE_LABELS})
    if azs:
        labels.update({key: set(azs) for key in _ZONE_LABELS})
    return labels


class LabelIndex:
    """Which capacities' nodes satisfy a pod's nodeSelector. A label the pack does not know the nodes
    to carry (set by user data or elsewhere), a value not known yet, and a capacity whose `labels` are
    not known never exclude. Indexed rather than tested pod by group: a stack of a thousand GPU groups
    and thousands of pods would otherwise test each pair. Per label: the capacities whose nodes carry
    each value, and those whose nodes are known to carry the label at all."""

    def __init__(self, labelled: Sequence[Optional[Labels]]) -> None:
        self.everyone = frozenset(range(len(labelled)))
        self._carriers: dict[str, set[int]] = {}
        self._by_value: dict[str, dict[str, set[int]]] = {}
        for i, labels in enumerate(labelled):
            for key, values in (labels or {}).items():
                if values is not None:
                    self._carriers.setdefault(key, set()).add(i)
                    for value in values:
                        self._by_value.setdefault(key, {}).setdefault(value, set()).add(i)

    def admitted(self, selector: Any) -> frozenset[int]:
        """The indexes of the capacities whose nodes satisfy `selector`."""
        out = self.everyone
        if not isinstance(selector, dict):
            return out
        for key, value in selector.items():
            carriers = self._carriers.get(str(key))
            if carriers is None or is_unknown(value):
                continue
            matching = self._by_value[str(key)].get(str(value), set())
            out = (out - carriers) | (out & matching)
        return out
