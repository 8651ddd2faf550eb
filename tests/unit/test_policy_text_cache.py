"""What the pack computes from a text is kept by the text, bounded by the texts' total length, and
the same finds come back whether they were computed now or kept: a kept walk must not change a path
a verdict quotes."""

from __future__ import annotations

import json

from llm_pd_eks_policy.workloads import embedded, is_workload_object
from llm_pd_eks_policy.yaml_text import TextCache


def test_the_least_recently_used_text_goes_first_once_the_bound_is_passed():
    cache = TextCache(max_chars=10)
    cache.put(("a", "12345"), 1)
    cache.put(("b", "67890"), 2)
    assert cache.get(("a", "12345")) == 1  # "a" is now the most recently used
    cache.put(("c", "xyz"), 3)
    assert cache.get(("b", "67890")) is None
    assert cache.get(("a", "12345")) == 1 and cache.get(("c", "xyz")) == 3


def test_a_text_longer_than_the_bound_is_never_kept():
    cache = TextCache(max_chars=4)
    cache.put(("a", "12345"), 1)
    assert cache.get(("a", "12345")) is None


def _deployment(name: str) -> dict:
    spec = {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec}


def test_objects_in_text_are_found_at_the_same_paths_the_second_time():
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [_deployment("a"), _deployment("b")]})
    props = {"yaml": [text], "other": {"nested": text}}
    first = [(path, obj["metadata"]["name"]) for path, obj in embedded(props, is_workload_object)]
    second = [(path, obj["metadata"]["name"]) for path, obj in embedded(props, is_workload_object)]
    assert (
        first
        == second
        == [
            ("yaml[0]<document 0>.items[0]", "a"),
            ("yaml[0]<document 0>.items[1]", "b"),
            ("other.nested<document 0>.items[0]", "a"),
            ("other.nested<document 0>.items[1]", "b"),
        ]
    )
