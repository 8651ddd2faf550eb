"""The packages depend one way: tools and sizing -> library; the library and the pack import none of the others."""

from __future__ import annotations

import ast

import pytest
from helpers import ROOT

LIBRARY, TOOLS, SIZING, PACK = "llm_pd_eks", "llm_pd_eks_tools", "llm_pd_eks_sizing", "llm_pd_eks_policy"
PACKAGE_DIRS = {LIBRARY: ROOT / LIBRARY, TOOLS: ROOT / TOOLS, SIZING: ROOT / SIZING, PACK: ROOT / "policies" / PACK}
FORBIDDEN = {LIBRARY: {TOOLS, SIZING, PACK}, PACK: {LIBRARY, TOOLS, SIZING}, TOOLS: {PACK}, SIZING: {PACK}}


def _imports(package: str) -> dict[str, set[str]]:
    """module path -> the top-level packages it imports (absolute imports, including lazy ones)."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE_DIRS[package].rglob("*.py"):
        tops = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                tops |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = tops
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package):
    modules = _imports(package)
    assert modules, f"{package} has no modules"
    wrong = {path: sorted(tops & FORBIDDEN[package]) for path, tops in modules.items() if tops & FORBIDDEN[package]}
    assert not wrong, wrong


def test_the_pack_imports_only_its_own_runtime():
    # policies/requirements.txt: pulumi-policy, the pulumi SDK and protobuf (`google`) it pins, PyYAML.
    allowed = {"pulumi_policy", "pulumi", "google", "yaml", "__future__"}
    stdlib = __import__("sys").stdlib_module_names
    for path, tops in _imports(PACK).items():
        extra = {t for t in tops if t not in stdlib} - allowed
        assert not extra, (path, extra)


def test_the_tools_use_the_library():
    assert any(LIBRARY in tops for tops in _imports(TOOLS).values())


def _module_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """module -> the modules of `packages` it imports, at its top or inside a function alike."""
    modules = {}
    for package in packages:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    module = ".".join(
                        base.split(".")[: len(base.split(".")) - node.level + 1] + [module] * bool(module)
                    )
                targets |= {f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def test_no_two_modules_of_the_tools_or_the_sizing_package_import_each_other():
    graph = _module_graph((TOOLS, SIZING))
    assert len(graph) > 50
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def walk(module: str, path: list[str]) -> list[str]:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target] if target in path else [module, target]
            if target not in state and (loop := walk(target, [*path, target])):
                return loop
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state:
            loop = walk(module, [module])
            assert not loop, " -> ".join(loop)
