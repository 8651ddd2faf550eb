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
