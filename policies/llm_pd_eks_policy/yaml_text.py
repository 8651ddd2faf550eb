"""YAML text read with a bound: every YAML or JSON string the rules open goes through `load_all`.

PyYAML's `safe_load` builds an alias as a shared reference, so nine nested anchors of ten aliases
each (under 1 KiB of text, "billion laughs") load instantly as a graph of 10^9 paths; any rule that
walks the result then never ends. `load_all` composes the node graph first, counts the nodes the
document has once every alias is expanded (shared subgraphs counted by multiplication, not by
walking), and refuses text above `MAX_NODES` (or with a recursive alias) before constructing it.
`resource-decodable` reports such text as a verdict; the other rules treat it as unreadable.
"""

from __future__ import annotations

from typing import Any

import yaml

# Nodes a document may have with every alias expanded. The stack's own serve configs, Helm values
# and manifests have a few thousand; 10^5 keeps any walk over them well under a second.
MAX_NODES = 100_000


class YamlTooLarge(ValueError):
    """YAML text whose aliases expand beyond MAX_NODES nodes (or refer to themselves)."""


def expanded_size(node: yaml.Node, limit: int = MAX_NODES) -> int:
    """Nodes of `node` with aliases expanded, computed over the node graph (memoised per node, no
    recursion); raises YamlTooLarge above `limit` or on a recursive alias."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, done = stack.pop()
        key = id(current)
        if done:
            children = _children(current)
            total = 1 + sum(sizes[id(c)] for c in children)
            open_nodes.discard(key)
            if total > limit:
                raise YamlTooLarge(f"its aliases expand to more than {limit} nodes")
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise YamlTooLarge("an alias refers to the node that contains it")
        open_nodes.add(key)
        stack.append((current, True))
        for child in _children(current):
            if id(child) in open_nodes:
                raise YamlTooLarge("an alias refers to the node that contains it")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(node)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_all(text: str, limit: int = MAX_NODES) -> list[Any]:
    """Every document of `text` (YAML, so JSON too) as plain data; YamlTooLarge when the documents'
    expanded size passes `limit`, yaml.YAMLError when the text is not YAML."""
    loader = yaml.SafeLoader(text)
    try:
        docs = []
        budget = limit
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            budget -= expanded_size(node, budget)
            docs.append(loader.construct_document(node))
        return docs
    finally:
        loader.dispose()


def load(text: str, limit: int = MAX_NODES) -> Any:
    """The single document of `text` (None for empty text), bounded as `load_all`."""
    docs = load_all(text, limit)
    if len(docs) > 1:
        raise yaml.YAMLError("expected a single document in the stream")
    return docs[0] if docs else None
