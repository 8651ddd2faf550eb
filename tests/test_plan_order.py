"""Ordering over the whole plan: what `pulumi up` creates first and `pulumi destroy` deletes last.

The engine creates a resource only after everything it depends on (dependsOn, property
dependencies, a provider it uses) and deletes in the reverse order, so each rule below is a
question about the transitive dependencies recorded by the mock run.
"""

from __future__ import annotations

import copy

import pytest
from helpers import STACKS

from tools.preview.mockrun import PROJECT, ProgramRun, load_stack_config, run_program

NAMESPACE = "kubernetes:core/v1:Namespace"
RELEASE = "kubernetes:helm.sh/v3:Release"
# Namespaces every cluster has before the first object is applied (created by the API server).
# https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/#initial-namespaces
SYSTEM_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}


def ancestors(run: ProgramRun, urn: str) -> set[str]:
    """Every resource the engine must finish before `urn` (dependencies of a component mean its
    children, as the engine expands them), transitively."""
    children: dict[str, list[str]] = {}
    for r in run.resources:
        children.setdefault(r.parent, []).append(r.urn)
    by_urn = {r.urn: r for r in run.resources}
    seen: set[str] = set()
    todo = [urn]
    while todo:
        reg = by_urn.get(todo.pop())
        if reg is None:
            continue
        direct = set(reg.dependencies) | {u for deps in reg.property_dependencies.values() for u in deps}
        if reg.provider:
            direct.add(reg.provider.rsplit("::", 1)[0])  # a provider reference is `<urn>::<id>`
        for dep in direct:
            expanded = [dep, *children.get(dep, [])]
            for d in expanded:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
    return seen


def namespace_of(reg) -> str | None:
    if reg.type == RELEASE:
        return reg.inputs.get("namespace")
    if not reg.type.startswith("kubernetes:") or reg.type == NAMESPACE:
        return None
    return (reg.inputs.get("metadata") or {}).get("namespace")


def namespace_creators(run: ProgramRun) -> dict[str, list[str]]:
    """namespace -> the resources that create it (a Namespace, or a Helm release with createNamespace)."""
    out: dict[str, list[str]] = {}
    for r in run.resources:
        if r.type == NAMESPACE:
            out.setdefault(r.inputs["metadata"]["name"], []).append(r.urn)
        elif r.type == RELEASE and r.inputs.get("createNamespace"):
            out.setdefault(r.inputs["namespace"], []).append(r.urn)
    return out


def unordered_namespaced(run: ProgramRun) -> list[str]:
    """Namespaced objects whose namespace is neither a system one nor created before them."""
    creators = namespace_creators(run)
    bad = []
    for r in run.resources:
        ns = namespace_of(r)
        if ns is None or ns in SYSTEM_NAMESPACES:
            continue
        if r.urn in creators.get(ns, []):
            continue
        if not set(creators.get(ns, [])) & ancestors(run, r.urn):
            bad.append(f"{r.type} {r.name} in {ns}")
    return bad


def with_grafana_password(stack: str) -> ProgramRun:
    config, secret_keys = load_stack_config(stack)
    config[f"{PROJECT}:grafanaAdminPassword"] = "correct-horse-battery-staple"
    return run_program(stack, config, [*secret_keys, f"{PROJECT}:grafanaAdminPassword"])


@pytest.mark.parametrize("stack", STACKS)
def test_every_namespaced_object_waits_for_its_namespace(programs, stack):
    assert unordered_namespaced(programs(stack)) == []


def test_the_grafana_admin_secret_waits_for_the_monitoring_namespace():
    run = with_grafana_password("dev")
    secret = run.one("kubernetes:core/v1:Secret", "grafana-admin")
    assert secret.inputs["metadata"]["namespace"] == "monitoring"
    assert unordered_namespaced(run) == []


def test_the_rule_catches_an_object_created_before_its_namespace(programs):
    """The check itself: drop the namespace from a namespaced object's dependencies and it is reported."""
    run = copy.deepcopy(programs("dev"))
    pdb = run.one("kubernetes:policy/v1:PodDisruptionBudget", "prefill")
    creators = set(namespace_creators(run)[pdb.inputs["metadata"]["namespace"]])
    assert creators & ancestors(run, pdb.urn)
    pdb.dependencies = [d for d in pdb.dependencies if d not in creators]
    pdb.property_dependencies = {k: [u for u in v if u not in creators] for k, v in pdb.property_dependencies.items()}
    assert unordered_namespaced(run) == [f"{pdb.type} {pdb.name} in llm-serving"]
