"""Private Pulumi SDK internals are reached through one module, which refuses an untested SDK."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata

import pytest
from helpers import ROOT

# `pulumi.runtime`'s public surface (what pulumi/examples' testing-unit-py uses): everything else
# under pulumi.runtime is an internal and goes through llm_pd_eks/pulumi_sdk.py.
PUBLIC = {"Mocks", "MockResourceArgs", "MockCallArgs", "set_mocks", "test"}
SHIM = "pulumi_sdk.py"


def _internal_imports(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pulumi.runtime"):
            if node.module != "pulumi.runtime" or any(a.name not in PUBLIC for a in node.names):
                yield f"{path.relative_to(ROOT)}:{node.lineno} from {node.module} import ..."
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pulumi.runtime."):
                    yield f"{path.relative_to(ROOT)}:{node.lineno} import {alias.name}"


def test_no_module_outside_the_shim_imports_sdk_internals():
    # The policy pack is left out: it is self-contained (policies/requirements.txt pins its own SDK).
    sources = [
        p for p in ROOT.rglob("*.py") if not {".venv", "venv", "build", "policies"} & set(p.relative_to(ROOT).parts)
    ]
    offenders = [hit for p in sources if p.name != SHIM for hit in _internal_imports(p)]
    assert sources and not offenders, offenders


def test_the_shim_refuses_an_sdk_outside_the_tested_minor(monkeypatch):
    import llm_pd_eks.pulumi_sdk as shim

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "3.999.0" if name == "pulumi" else real(name))
    with pytest.raises(ImportError, match=r"pulumi 3\.999\.0 is installed .* read from pulumi 3\.272\.x"):
        importlib.reload(shim)
    monkeypatch.undo()
    importlib.reload(shim)
    assert shim.VERSION.startswith(shim.TESTED_MINOR + ".")
