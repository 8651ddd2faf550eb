"""The node-label index the placement rules use, held against the rule it indexes: a pod's
nodeSelector admits a capacity unless some selector key names a label its nodes are known to carry
with a known value they do not have (Kubernetes' nodeSelector is an AND of equalities; a label the
pack cannot see, a value not known yet, or a capacity whose labels are not known never exclude)."""

from __future__ import annotations

import random
from typing import Any, Optional

import pytest

from llm_pd_eks_policy.common import UNKNOWN
from llm_pd_eks_policy.node_labels import LabelIndex

Labels = Optional[dict[str, Optional[set[str]]]]


def admits_one_by_one(labels: Labels, selector: Any) -> bool:
    """The rule, one capacity at a time (the oracle)."""
    if labels is None or not isinstance(selector, dict):
        return True
    for key, value in selector.items():
        values = labels.get(str(key))
        if values is not None and value is not UNKNOWN and str(value) not in values:
            return False
    return True


KEYS = ("eks.amazonaws.com/nodegroup", "role", "node.kubernetes.io/instance-type", "team")
VALUES = ("a", "b", "c", "p5.48xlarge")


def random_labels(rng: random.Random) -> Labels:
    if rng.random() < 0.1:
        return None  # labels not known yet
    out: dict[str, Optional[set[str]]] = {}
    for key in rng.sample(KEYS, rng.randint(0, len(KEYS))):
        out[key] = None if rng.random() < 0.15 else set(rng.sample(VALUES, rng.randint(1, 2)))
    return out


def random_selector(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return None
    return {key: UNKNOWN if rng.random() < 0.1 else rng.choice(VALUES) for key in rng.sample(KEYS, rng.randint(0, 3))}


@pytest.mark.parametrize("seed", range(20))
def test_the_index_admits_exactly_what_the_rule_admits_one_by_one(seed):
    rng = random.Random(seed)
    capacities = [random_labels(rng) for _ in range(rng.randint(0, 30))]
    index = LabelIndex(capacities)
    for _ in range(50):
        selector = random_selector(rng)
        expected = {i for i, labels in enumerate(capacities) if admits_one_by_one(labels, selector)}
        assert index.admitted(selector) == expected, (capacities, selector)


def test_a_selector_on_one_group_name_admits_that_group_alone():
    groups = [{"eks.amazonaws.com/nodegroup": {f"g{i}"}} for i in range(1000)]
    assert LabelIndex(groups).admitted({"eks.amazonaws.com/nodegroup": "g417"}) == {417}


def test_a_label_no_capacity_is_known_to_carry_excludes_none():
    groups = [{"eks.amazonaws.com/nodegroup": {"g0"}}, None]
    assert LabelIndex(groups).admitted({"karpenter.sh/nodepool": "x"}) == {0, 1}
