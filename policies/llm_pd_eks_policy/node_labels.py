"""Which GPU capacity a pod's nodeSelector admits, from the labels its nodes will carry: the
group's `labels` input and the labels EKS and the kubelet put on every node (the node group's name,
the instance type, the zone). A prefill pod selecting `eks.amazonaws.com/nodegroup: g6e` lands on
that group alone, so it is judged for g6e's EFA share and that group's AZ, not for every GPU type
of the stack.
"""

from __future__ import annotations

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


def admits(labels: Optional[Labels], selector: Any) -> bool:
    """Whether nodes with `labels` satisfy a pod's nodeSelector. A label the pack does not know the
    nodes to carry (set by user data or elsewhere) and a value not known yet never exclude."""
    if labels is None or not isinstance(selector, dict):
        return True
    for key, value in selector.items():
        values = labels.get(str(key))
        if values is not None and not is_unknown(value) and str(value) not in values:
            return False
    return True
