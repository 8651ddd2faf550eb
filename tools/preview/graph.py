"""The recorded plan as graphs: Graphviz DOT, a self-rendered SVG, and a mermaid component diagram.

Graphviz (`dot`) is not on a fresh machine, so the SVG is laid out here: a layered drawing where
each resource sits one row below the deepest resource it depends on. The DOT file is there for
anyone with Graphviz who wants a nicer layout (`dot -Tsvg graph.dot`).

Edges are "A must exist before B": B's `dependencies`, property dependencies and explicit provider. Components (the
resources that have children) are drawn as clusters/colours, not as nodes.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tools.preview.mockrun import ProgramRun, Registration

STACK_TYPE = "pulumi:pulumi:Stack"
PALETTE = ["#dbeafe", "#dcfce7", "#fef9c3", "#fde2e2", "#ede9fe", "#cffafe", "#ffedd5", "#e5e7eb", "#fce7f3", "#d9f99d"]


def short_type(type_: str) -> str:
    """`aws:ec2/subnet:Subnet` -> `Subnet`; `pulumi:providers:kubernetes` -> `provider:kubernetes`."""
    if type_.startswith("pulumi:providers:"):
        return "provider:" + type_.split(":")[-1]
    return type_.split(":")[-1]


def top_level(run: "ProgramRun") -> list["Registration"]:
    """The stack's direct children (components, or resources outside any component), in data-flow order.

    Registration order is not guaranteed, so the order is topological over `component_edges`, ties
    broken by name: deterministic, and upstream components come first.
    """
    urns = {r.urn for r in run.resources}
    tops = {r.name: r for r in run.resources if not r.parent or r.parent not in urns}
    incoming: dict[str, set[str]] = {name: set() for name in tops}
    for a, b in component_edges(run):
        if a in incoming and b in incoming:
            incoming[b].add(a)
    ordered: list["Registration"] = []
    while incoming:
        ready = sorted(n for n, deps in incoming.items() if not deps) or sorted(incoming)[:1]
        name = ready[0]
        ordered.append(tops[name])
        del incoming[name]
        for deps in incoming.values():
            deps.discard(name)
    return ordered


def parents_with_children(run: "ProgramRun") -> set[str]:
    return {r.parent for r in run.resources if r.parent}


def children_by_parent(run: "ProgramRun") -> dict[str, list["Registration"]]:
    """parent urn -> its children, in registration order ("" holds the stack's direct children)."""
    children: dict[str, list["Registration"]] = defaultdict(list)
    for r in run.resources:
        children[r.parent].append(r)
    return children


def component_colours(run: "ProgramRun") -> dict[str, str]:
    """Top-level component name -> its colour, in `top_level` order (DOT clusters, SVG nodes and legend)."""
    return {r.name: PALETTE[i % len(PALETTE)] for i, r in enumerate(top_level(run))}


def ancestor_map(run: "ProgramRun") -> dict[str, str]:
    """urn -> urn of its top-level ancestor (itself when top-level)."""
    by_urn = {r.urn: r for r in run.resources}
    result: dict[str, str] = {}
    for r in run.resources:
        cur = r
        while cur.parent in by_urn:
            cur = by_urn[cur.parent]
        result[r.urn] = cur.urn
    return result


def provider_urn(r: "Registration") -> str:
    """The URN of an explicit provider reference (`urn::id`), or ""."""
    return r.provider.rsplit("::", 1)[0] if r.provider else ""


def dependency_urns(r: "Registration") -> set[str]:
    """What must exist before `r`: its dependencies, property dependencies and explicit provider."""
    deps = set(r.dependencies)
    for urns in r.property_dependencies.values():
        deps.update(urns)
    if r.provider:
        deps.add(provider_urn(r))
    deps.discard(r.urn)
    return deps


@dataclass(frozen=True)
class Graph:
    nodes: list["Registration"]  # every registration that is not a component with children
    edges: list[tuple[str, str]]  # (dependency urn, dependent urn), both nodes
    groups: dict[str, str]  # node urn -> top-level component name


def build_graph(run: "ProgramRun") -> Graph:
    containers = parents_with_children(run)
    nodes = sorted((r for r in run.resources if r.urn not in containers), key=lambda r: r.urn)
    node_urns = {r.urn for r in nodes}
    edges = sorted({(d, r.urn) for r in nodes for d in dependency_urns(r) if d in node_urns})
    by_urn = {r.urn: r for r in run.resources}
    top = ancestor_map(run)
    groups = {r.urn: by_urn[top[r.urn]].name for r in nodes}
    return Graph(nodes, edges, groups)


# -- DOT -----------------------------------------------------------------------------------------
def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(run: "ProgramRun") -> str:
    graph = build_graph(run)
    ids = {r.urn: f"n{i}" for i, r in enumerate(graph.nodes)}
    containers = parents_with_children(run)
    children = children_by_parent(run)
    colours = component_colours(run)
    lines = [
        f"digraph {_q(run.stack)} {{",
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=11, compound=true];',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [color="#64748b"];',
    ]

    def emit(r: "Registration", depth: int, colour: str) -> None:
        pad = "  " * depth
        if r.urn in containers:
            lines.append(f"{pad}subgraph {_q('cluster_' + r.name)} {{")
            lines.append(f"{pad}  label={_q(r.name + ' (' + short_type(r.type) + ')')};")
            lines.append(f'{pad}  style="rounded"; bgcolor={_q(colour)};')
            for child in sorted(children[r.urn], key=lambda c: c.urn):
                emit(child, depth + 1, colour)
            lines.append(f"{pad}}}")
        else:
            label = f"{r.name}\\n{r.type}" + ("\\n(protected)" if r.protect else "")
            lines.append(f'{pad}{ids[r.urn]} [label="{label}", fillcolor="white"];')

    for r in top_level(run):
        emit(r, 1, colours[r.name])
    for a, b in graph.edges:
        lines.append(f"  {ids[a]} -> {ids[b]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- SVG -----------------------------------------------------------------------------------------
NODE_W, NODE_H, H_GAP, V_GAP, ROW_GAP, MARGIN, MAX_PER_ROW = 220, 44, 18, 70, 16, 24, 8


def layers(graph: Graph) -> dict[str, int]:
    """Longest-path layering: a node sits one layer below its deepest dependency."""
    deps: dict[str, list[str]] = defaultdict(list)
    for a, b in graph.edges:
        deps[b].append(a)
    layer: dict[str, int] = {}

    def depth(urn: str, seen: frozenset = frozenset()) -> int:
        if urn in layer:
            return layer[urn]
        if urn in seen:  # a cycle cannot register, but never loop forever on bad input
            return 0
        layer[urn] = value = 1 + max((depth(d, seen | {urn}) for d in deps[urn]), default=-1)
        return value

    for r in graph.nodes:
        depth(r.urn)
    return layer


def to_svg(run: "ProgramRun") -> str:
    graph = build_graph(run)
    layer = layers(graph)
    colour = component_colours(run)
    top_names = list(colour)
    order = {name: i for i, name in enumerate(top_names)}
    by_layer: dict[int, list["Registration"]] = defaultdict(list)
    for r in graph.nodes:
        by_layer[layer[r.urn]].append(r)
    pos: dict[str, tuple[float, float]] = {}
    y = MARGIN + 28.0
    width = 0.0
    for index in sorted(by_layer):
        members = sorted(by_layer[index], key=lambda r: (order.get(graph.groups[r.urn], 99), r.name))
        for start in range(0, len(members), MAX_PER_ROW):
            row = members[start : start + MAX_PER_ROW]
            for i, r in enumerate(row):
                pos[r.urn] = (MARGIN + i * (NODE_W + H_GAP), y)
            width = max(width, MARGIN * 2 + len(row) * (NODE_W + H_GAP) - H_GAP)
            y += NODE_H + ROW_GAP
        y += V_GAP - ROW_GAP
    legend_y = y
    height = legend_y + 30 + MARGIN
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="Helvetica, Arial, sans-serif">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#64748b"/></marker></defs>',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{MARGIN}" y="{MARGIN + 6}" font-size="15" font-weight="bold">'
        f"{escape(run.stack)}: {len(graph.nodes)} resources, {len(graph.edges)} dependencies "
        f"(an arrow points from a dependency to its dependent)</text>",
    ]
    for a, b in graph.edges:
        (ax, ay), (bx, by) = pos[a], pos[b]
        x1, y1, x2, y2 = ax + NODE_W / 2, ay + NODE_H, bx + NODE_W / 2, by
        mid = (y1 + y2) / 2
        out.append(
            f'<path d="M {x1:.0f} {y1:.0f} C {x1:.0f} {mid:.0f}, {x2:.0f} {mid:.0f}, {x2:.0f} {y2:.0f}" '
            'fill="none" stroke="#64748b" stroke-width="1" opacity="0.6" marker-end="url(#arrow)"/>'
        )
    for r in graph.nodes:
        x, y0 = pos[r.urn]
        stroke = "#b91c1c" if r.protect else "#334155"
        out.append(
            f"<g><title>{escape(r.urn)}</title>"
            f'<rect x="{x:.0f}" y="{y0:.0f}" width="{NODE_W}" height="{NODE_H}" rx="6" '
            f'fill="{colour.get(graph.groups[r.urn], "#f1f5f9")}" stroke="{stroke}"/>'
            f'<text x="{x + 8:.0f}" y="{y0 + 18:.0f}" font-size="12" font-weight="bold">'
            f"{escape(_clip(r.name, 30))}</text>"
            f'<text x="{x + 8:.0f}" y="{y0 + 34:.0f}" font-size="10" fill="#475569">'
            f"{escape(_clip(r.type, 38))}{' · protected' if r.protect else ''}</text></g>"
        )
    lx = float(MARGIN)
    for name in top_names:
        out.append(
            f'<rect x="{lx:.0f}" y="{legend_y:.0f}" width="14" height="14" fill="{colour[name]}" stroke="#334155"/>'
            f'<text x="{lx + 20:.0f}" y="{legend_y + 12:.0f}" font-size="12">{escape(name)}</text>'
        )
        lx += 30 + 8 * len(name)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# -- mermaid component diagram -------------------------------------------------------------------
def _mermaid_id(name: str) -> str:
    return re.sub(r"\W", "_", name)


def component_edges(run: "ProgramRun") -> list[tuple[str, str]]:
    """(A, B) between top-level components when something in B depends on something in A."""
    by_urn = {r.urn: r for r in run.resources}
    top = ancestor_map(run)
    edges = set()
    for r in run.resources:
        for d in dependency_urns(r):
            if d in top and top[d] != top[r.urn]:
                edges.add((by_urn[top[d]].name, by_urn[top[r.urn]].name))
    return sorted(edges)


def component_mermaid(run: "ProgramRun") -> str:
    """A mermaid flowchart of the stack's top-level components and the data flowing between them."""
    lines = ["```mermaid", "flowchart LR"]
    for r in top_level(run):
        lines.append(f'  {_mermaid_id(r.name)}["{r.name}<br/>({short_type(r.type)})"]')
    for a, b in component_edges(run):
        lines.append(f"  {_mermaid_id(a)} --> {_mermaid_id(b)}")
    lines.append("```")
    return "\n".join(lines) + "\n"
