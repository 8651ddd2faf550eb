"""The preview's graph and formatting: hand-made plans (ordering, Mermaid, numbers), the dev plan's Graphviz views."""

from __future__ import annotations

import re

from llm_pd_eks_tools.plan.preview import fmt
from llm_pd_eks_tools.plan.preview.graph import _ordered, component_graphs, component_mermaid, top_level
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration

STACK_URN = "urn:pulumi:t::p::pulumi:pulumi:Stack::p-t"


def reg(name: str, type_: str, parent: str = "", deps: tuple[str, ...] = ()) -> Registration:
    return Registration(
        urn=f"urn:pulumi:t::p::{type_}::{name}",
        type=type_,
        name=name,
        parent=parent,
        custom=":" in type_ and not type_.startswith("my:"),
        protect=False,
        provider="",
        dependencies=list(deps),
        property_dependencies={},
        inputs={},
        inputs_struct=None,
    )


def plan() -> ProgramRun:
    """net (vpc, subnet) <- app (server); `lone` sits outside any component."""
    net = reg("net", "my:x:Net")
    vpc = reg("vpc", "aws:ec2/vpc:Vpc", parent=net.urn)
    subnet = reg("subnet", "aws:ec2/subnet:Subnet", parent=net.urn, deps=(vpc.urn,))
    app = reg("app", "my:x:App")
    server = reg("server", "aws:ec2/instance:Instance", parent=app.urn, deps=(subnet.urn,))
    lone = reg("lone", "aws:s3/bucket:Bucket")
    # Registered in an order that is not the data-flow order.
    return ProgramRun(stack="t", resources=[app, server, lone, net, subnet, vpc], stack_outputs={})


def test_order_is_topological_then_by_name():
    # b depends on a; c and a are both ready first: a (by name), then b (now ready, and smaller than c), then c.
    assert _ordered({"c", "b", "a"}, [("a", "b")]) == ["a", "b", "c"]
    assert _ordered({"c", "b", "a"}, [("c", "a")]) == ["b", "c", "a"]
    # A cycle between components cannot be ordered: listed by name rather than failing.
    assert _ordered({"x", "y"}, [("x", "y"), ("y", "x")]) == ["x", "y"]


def test_top_level_puts_upstream_components_first():
    assert [r.name for r in top_level(plan())] == ["lone", "net", "app"]


def test_one_mermaid_chart_per_component_with_its_inner_and_incoming_edges():
    charts = {comp.name: chart for comp, chart in component_graphs(plan())}
    assert list(charts) == ["lone", "net", "app"]
    net, app = charts["net"], charts["app"]
    assert net.startswith("```mermaid\nflowchart TB\n") and net.endswith("```\n")
    assert 'subgraph c_net["net<br/>Net"]' in net and re.search(r'n\d+\["vpc<br/>Vpc"\]', net)
    ids = dict(re.findall(r'(n\d+)\["(\w+)<br/>', net + app))
    by_name = {v: k for k, v in ids.items()}
    assert f"{by_name['vpc']} --> {by_name['subnet']}" in net  # inside the component
    # The server's dependency on another component's subnet is drawn from a node naming that component.
    assert 'x_net(["net"])' in app and f"x_net --> {by_name['server']}" in app
    assert "subnet" not in app  # the other component's resources are not repeated
    # Changing the plan changes the chart: without the dependency, no incoming edge.
    bare = plan()
    bare.by_urn("urn:pulumi:t::p::aws:ec2/instance:Instance::server").dependencies.clear()
    assert "x_net" not in {c.name: ch for c, ch in component_graphs(bare)}["app"]


def test_component_overview():
    text = component_mermaid(plan())
    assert text.splitlines()[:2] == ["```mermaid", "flowchart LR"]
    assert "  net --> app" in text


def test_formatting_by_hand():
    assert fmt.money(1234.5) == "$1,234.50" and fmt.money(None) == "n/a"
    assert fmt.signed_money(0.5) == "+$0.50" and fmt.signed_money(-3) == "−$3.00"
    assert fmt.size(469_762_048) == "448.00 MiB" and fmt.size(1 << 30) == "1.00 GiB" and fmt.size(10) == "10 B"
    assert fmt.ms(0.0375809) == "37.6 ms"
    assert fmt.md_cell("a|b\nc") == "a\\|b<br>c"
    assert fmt.short_value({"b": 1, "a": "x\ny"}) == '{"a": "x\\ny", "b": 1}'
    assert fmt.short_value("x" * 200, limit=10) == "x" * 9 + "…"


# -- screen-sized Graphviz views: one per component, together the whole graph ------------------------------


def test_each_component_has_its_own_dot_view_and_together_they_are_the_graph(programs):
    import re as re_

    from llm_pd_eks_tools.plan.preview.graph import build_graph, component_dots, sections, to_dot

    run = programs("dev")
    graph = build_graph(run)
    views = component_dots(run)
    assert len(views) > 5 and sorted(views) == sorted(f"{r.name}.dot" for r in sections(run))
    whole = to_dot(run)
    node_lines = re_.compile(r"^\s+n\d+ \[label=", re_.MULTILINE)
    assert sum(len(node_lines.findall(v)) for v in views.values()) == len(node_lines.findall(whole)) == len(graph.nodes)
    arrows = sum(v.count(" -> ") for v in views.values())
    assert arrows == whole.count(" -> ") == len(graph.edges)  # every edge drawn once, in its target's view
    for name, view in views.items():
        assert view.startswith(f'digraph "dev: {name[:-4]}"')
        assert view.count(" [label=") < whole.count(" [label=")  # smaller than the whole
