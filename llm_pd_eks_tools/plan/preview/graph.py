"""The recorded plan as graphs: Graphviz DOT (graph.dot) and Mermaid diagrams (summary.md, README).

GitHub renders Mermaid in Markdown, so summary.md (the pull-request comment) carries the graph: one
Mermaid flowchart per top-level component, small enough to read, and the component-level overview.
graph.dot holds the whole resource-level graph for anyone with Graphviz (`dot -Tsvg graph.dot`).

Edges are "A must exist before B": B's `dependencies`, property dependencies and explicit provider.
Components (the resources that have children) are clusters/subgraphs, not nodes. Ordering uses the
standard library's `graphlib` (topological, ties broken by name, so output is deterministic).
"""

from __future__ import annotations

import heapq
import re
from collections import defaultdict
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration

STACK_TYPE = "pulumi:pulumi:Stack"
PALETTE = ["#dbeafe", "#dcfce7", "#fef9c3", "#fde2e2", "#ede9fe", "#cffafe", "#ffedd5", "#e5e7eb", "#fce7f3", "#d9f99d"]


def short_type(type_: str) -> str:
    """`aws:ec2/subnet:Subnet` -> `Subnet`; `pulumi:providers:kubernetes` -> `provider:kubernetes`."""
    if type_.startswith("pulumi:providers:"):
        return "provider:" + type_.split(":")[-1]
    return type_.split(":")[-1]


def top_level(run: "ProgramRun") -> list["Registration"]:
    """The stack's direct children (components, or resources outside any component), in data-flow order.

    Registration order is not guaranteed, so the order is topological over `component_edges`, the
    alphabetically first ready component each time: deterministic, and upstream components come first.
    Components that depend on each other both ways (a cycle between components, which a resource
    graph can have) are listed by name.
    """
    urns = {r.urn for r in run.resources}
    tops = {r.name: r for r in run.resources if not r.parent or r.parent not in urns}
    return [tops[name] for name in _ordered(set(tops), component_edges(run))]


def _ordered(names: set[str], edges: list[tuple[str, str]]) -> list[str]:
    """`names` topologically over `edges` (a before b), smallest ready name first; by name on a cycle."""
    sorter: TopologicalSorter[str] = TopologicalSorter({n: set() for n in names})
    for a, b in edges:
        if a in names and b in names:
            sorter.add(b, a)
    try:
        sorter.prepare()
    except CycleError:
        return sorted(names)
    ordered: list[str] = []
    ready = list(sorter.get_ready())
    heapq.heapify(ready)
    while ready:
        name = heapq.heappop(ready)
        ordered.append(name)
        sorter.done(name)
        for n in sorter.get_ready():
            heapq.heappush(ready, n)
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
    """Component name -> its colour, in `top_level` then `sections` order (DOT clusters)."""
    names = dict.fromkeys(r.name for r in [*top_level(run), *sections(run)])
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def sections(run: "ProgramRun") -> list["Registration"]:
    """The components a reader looks at one by one: the package component's children where the stack
    holds one (`package_root`), else the top-level components; in data-flow order."""
    root = package_root(run)
    if root is None:
        return top_level(run)
    children = {r.name: r for r in run.resources if r.parent == root.urn}
    return [children[name] for name in _ordered(set(children), component_edges(run, root.urn))]


def ancestor_map(run: "ProgramRun", below: str = "") -> dict[str, str]:
    """urn -> urn of its top-level ancestor (itself when top-level); with `below`, the ancestor that
    is a child of the component `below` instead (`below` itself maps to itself)."""
    by_urn = {r.urn: r for r in run.resources}
    result: dict[str, str] = {}
    for r in run.resources:
        cur = r
        while cur.parent in by_urn and cur.parent != below:
            cur = by_urn[cur.parent]
        result[r.urn] = cur.urn
    return result


def package_root(run: "ProgramRun") -> Optional["Registration"]:
    """The one component the stack holds when it holds nothing else (the program's `LlmPdEks`,
    llm_pd_eks/deployment.py), whose children are the deployment's sections; else None."""
    urns = {r.urn for r in run.resources}
    tops = [r for r in run.resources if r.parent not in urns]
    return tops[0] if len(tops) == 1 and tops[0].urn in parents_with_children(run) else None


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
    root = package_root(run)
    top = ancestor_map(run, root.urn if root is not None else "")
    groups = {r.urn: by_urn[top[r.urn]].name for r in nodes}
    return Graph(nodes, edges, groups)


# -- DOT -----------------------------------------------------------------------------------------
def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(run: "ProgramRun", component: Optional[str] = None) -> str:
    """The resource graph as DOT: the whole stack, or only the top-level `component` (the screen-sized view).

    In a component's view, a resource of another component that something inside depends on is one
    ellipse naming that component, as in the Mermaid charts.
    """
    graph = build_graph(run)
    ids = {r.urn: f"n{i}" for i, r in enumerate(graph.nodes)}
    containers = parents_with_children(run)
    children = children_by_parent(run)
    colours = component_colours(run)
    title = run.stack if component is None else f"{run.stack}: {component}"
    lines = [
        f"digraph {_q(title)} {{",
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

    for r in top_level(run) if component is None else sections(run):
        if component is None or r.name == component:
            emit(r, 1, colours[r.name])
    if component is None:
        lines += [f"  {ids[a]} -> {ids[b]};" for a, b in graph.edges]
    else:
        outside: list[str] = []
        for a, b in graph.edges:
            if graph.groups[b] != component:
                continue
            if graph.groups[a] == component:
                lines.append(f"  {ids[a]} -> {ids[b]};")
            else:
                other = graph.groups[a]
                if other not in outside:
                    outside.append(other)
                    lines.append(f'  {_q("x_" + other)} [label={_q(other)}, shape=ellipse, style="dashed"];')
                lines.append(f"  {_q('x_' + other)} -> {ids[b]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def component_dots(run: "ProgramRun") -> dict[str, str]:
    """File name (`<component>.dot`) -> that component's DOT view, for each of the `sections`."""
    return {f"{re.sub(r'[^A-Za-z0-9_.-]', '_', r.name)}.dot": to_dot(run, r.name) for r in sections(run)}


# -- mermaid component diagram -------------------------------------------------------------------
def _mermaid_id(name: str) -> str:
    return re.sub(r"\W", "_", name)


def component_edges(run: "ProgramRun", below: str = "") -> list[tuple[str, str]]:
    """(A, B) between top-level components (with `below`: children of that component) when
    something in B depends on something in A."""
    by_urn = {r.urn: r for r in run.resources}
    top = ancestor_map(run, below)
    edges = set()
    for r in run.resources:
        for d in dependency_urns(r):
            if d in top and top[d] != top[r.urn]:
                edges.add((by_urn[top[d]].name, by_urn[top[r.urn]].name))
    return sorted(edges)


def component_mermaid(run: "ProgramRun") -> str:
    """A mermaid flowchart of the stack's top-level components and the data flowing between them."""
    lines = ["```mermaid", "flowchart LR"]
    root = package_root(run)
    if root is None:
        for r in top_level(run):
            lines.append(f'  {_mermaid_id(r.name)}["{r.name}<br/>({short_type(r.type)})"]')
        edges = component_edges(run)
    else:  # one package component: its sections, inside it
        edges = component_edges(run, root.urn)
        sections = {r.name: r for r in run.resources if r.parent == root.urn}
        lines.append(f'  subgraph {_mermaid_id("c_" + root.name)}["{root.name} ({short_type(root.type)})"]')
        for name in _ordered(set(sections), edges):
            r = sections[name]
            lines.append(f'    {_mermaid_id(r.name)}["{r.name}<br/>({short_type(r.type)})"]')
        lines.append("  end")
        edges = [(a, b) for a, b in edges if a in sections and b in sections]
    for a, b in edges:
        lines.append(f"  {_mermaid_id(a)} --> {_mermaid_id(b)}")
    lines.append("```")
    return "\n".join(lines) + "\n"


def component_graphs(run: "ProgramRun") -> list[tuple["Registration", str]]:
    """(top-level component, a Mermaid flowchart of the resources inside it), in `top_level` order.

    Each chart shows the component's resources (nested components as subgraphs) and the dependencies
    between them; a dependency on a resource of another component is drawn from a stadium-shaped
    node naming that component, so every chart stays small enough to read in a PR comment.
    """
    graph = build_graph(run)
    containers = parents_with_children(run)
    children = children_by_parent(run)
    by_urn = {r.urn: r for r in run.resources}
    ids = {r.urn: f"n{i}" for i, r in enumerate(graph.nodes)}
    charts = []

    def emit(lines: list[str], r: "Registration", depth: int) -> None:
        pad = "  " * depth
        if r.urn in containers:
            lines.append(f'{pad}subgraph {_mermaid_id("c_" + r.name)}["{_label(r)}"]')
            for child in sorted(children[r.urn], key=lambda c: c.urn):
                emit(lines, child, depth + 1)
            lines.append(f"{pad}end")
        else:
            lines.append(f'{pad}{ids[r.urn]}["{_label(r)}"]')

    for top in top_level(run):
        name = top.name
        lines = ["```mermaid", "flowchart TB"]
        emit(lines, top, 1)
        outside: set[str] = set()
        edges = []
        for a, b in graph.edges:
            if graph.groups[b] != name:
                continue
            if graph.groups[a] == name:
                edges.append(f"  {ids[a]} --> {ids[b]}")
            else:
                other = graph.groups[a]
                outside.add(other)
                edges.append(f"  {_mermaid_id('x_' + other)} --> {ids[b]}")
        for other in sorted(outside):
            lines.append(f'  {_mermaid_id("x_" + other)}(["{other}"])')
        lines += sorted(set(edges), key=edges.index)
        lines.append("```")
        charts.append((by_urn[top.urn], "\n".join(lines) + "\n"))
    return charts


def _label(r: "Registration") -> str:
    """A Mermaid node label: name and short type (quotes cannot appear inside a quoted label)."""
    return f"{r.name}<br/>{short_type(r.type)}".replace('"', "#quot;")
