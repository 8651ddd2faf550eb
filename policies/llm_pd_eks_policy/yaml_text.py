"""YAML text read with a bound and read once: every YAML or JSON string the rules open goes
through `load_all`.

PyYAML's `safe_load` builds an alias as a shared reference, so nine nested anchors of ten aliases
each (under 1 KiB of text, "billion laughs") load instantly as a graph of 10^9 paths; any rule that
walks the result then never ends. `load_all` composes the node graph first, counts the nodes the
aliases add once expanded (shared subgraphs counted by multiplication, not by walking), and refuses
text whose aliases add more than `MAX_NODES` (or refer to themselves) before constructing it. The
text's own size is not bounded here: a ConfigGroup of large CRDs is as big as it is, and reading
it costs what parsing it costs. `resource-decodable` reports refused text as a verdict; the other
rules treat it as unreadable.

Speed: JSON text is read by the `json` module; YAML by libyaml (`CSafeLoader`) where PyYAML was
built with it; and each text is parsed once per process (`_parsed`, keyed by the text itself), however
many rules and requests read it. Callers never mutate what they get.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any, cast

import yaml

# Nodes the aliases of a text may add once expanded. The stack's own serve configs, Helm values and
# manifests have none; 10^5 keeps any walk over an expanded document well under a second.
MAX_NODES = 100_000
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Texts kept parsed, by their total length (least recently used first out): enough for every text of a
# large stack, so each rule after the first finds them parsed.
_CACHE_CHARS = 64_000_000


class TextCache:
    """What was computed from a text, kept by the text (with a tag saying what was computed) and
    bounded by the texts' total length, least recently used first out. Process-wide: a value depends
    on the text alone, so every rule and request may share it; the host serves requests on several
    threads."""

    def __init__(self, max_chars: int = _CACHE_CHARS) -> None:
        self.max_chars = max_chars
        self._items: "OrderedDict[tuple[Any, ...], Any]" = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Any:
        """The value kept for `key` (its text last), or None."""
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: tuple[Any, ...], value: Any) -> None:
        if len(key[-1]) > self.max_chars:
            return
        with self._lock:
            if key not in self._items:
                self._chars += len(key[-1])
            self._items[key] = value
            while self._chars > self.max_chars:
                old, _ = self._items.popitem(last=False)
                self._chars -= len(old[-1])


_parsed = TextCache()


class YamlTooLarge(ValueError):
    """YAML text whose aliases expand beyond MAX_NODES nodes (or refer to themselves)."""


def expanded_size(node: yaml.Node, limit: int = MAX_NODES) -> int:
    """Nodes the aliases under `node` add once expanded (0 without aliases), computed over the node
    graph (memoised per node, no recursion); raises YamlTooLarge above `limit` or on a recursive alias."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, done = stack.pop()
        key = id(current)
        if done:
            total = 1 + sum(sizes[id(c)] for c in _children(current))
            open_nodes.discard(key)
            if total - len(sizes) > limit:
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
    return max(0, sizes[id(node)] - len(sizes))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _parse(text: str, limit: int) -> list[Any]:
    if text.lstrip()[:1] in ("{", "["):
        try:
            return [json.loads(text)]
        except (ValueError, RecursionError):
            pass  # not JSON (YAML flow style, or too deep for json): read as YAML
    loader = _LOADER(text)
    try:
        docs = []
        budget = limit
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            if "*" in text:  # no alias without '*': nothing to expand otherwise
                budget -= expanded_size(node, budget)
            docs.append(loader.construct_document(node))
        return docs
    except RecursionError as error:
        raise YamlTooLarge("it nests deeper than the parser recurses") from error
    finally:
        loader.dispose()


def load_all(text: str, limit: int = MAX_NODES) -> list[Any]:
    """Every document of `text` (YAML, so JSON too) as plain data; YamlTooLarge when the documents'
    aliases add more than `limit` nodes, yaml.YAMLError when the text is not YAML."""
    cached = limit == MAX_NODES
    hit = _parsed.get(("parsed", text)) if cached else None
    if hit is None:
        try:
            hit = ("ok", _parse(text, limit))
        except (yaml.YAMLError, YamlTooLarge) as error:
            hit = ("error", error)
        if cached:
            _parsed.put(("parsed", text), hit)
    kind, value = hit
    if kind == "error":
        raise cast(Exception, value)
    return cast(list[Any], value)


def load(text: str, limit: int = MAX_NODES) -> Any:
    """The single document of `text` (None for empty text), bounded as `load_all`."""
    docs = load_all(text, limit)
    if len(docs) > 1:
        raise yaml.YAMLError("expected a single document in the stream")
    return docs[0] if docs else None
