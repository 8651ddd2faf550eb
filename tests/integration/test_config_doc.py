"""docs/configuration.md's table is generated from the model (llm_pd_eks_tools/maint/config_doc.py), and current."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT

from llm_pd_eks.config import StackConfig
from llm_pd_eks_tools.maint import config_doc


def test_config_page_table_is_current():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert config_doc.render() in page, (
        "docs/configuration.md is stale: run `python -m llm_pd_eks_tools.maint.config_doc`"
    )


def test_every_key_of_the_model_has_a_description_and_a_row():
    rows = {key.strip("`"): (type_, default, description) for key, type_, default, description in config_doc.rows()}
    assert all(description for _, _, description in rows.values()), [k for k, r in rows.items() if not r[2]]
    # every camelCase key of every section is in the table, under its dotted path
    schema = StackConfig.model_json_schema(by_alias=True)
    for section in schema["properties"]:
        assert (section if section != "region" else "aws:region") in rows
    assert rows["gpuNodes.maxSize"][0] == "integer (≥ 1, ≤ 450)"
    assert rows["network.natGateways"][:2] == ("`single` \\| `perAz`", "`single`")
    assert rows["cluster.publicAccessCidrs"][1] == "`[]`"  # a default_factory default, not in the schema
    assert rows["serving"][1] == "omitted" and rows["gpuNodes.instanceType"][1] == "required"
    assert "hfToken" in rows


def test_check_fails_on_a_stale_table_and_the_generator_fixes_it(tmp_path):
    page = tmp_path / "configuration.md"
    current = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    edited = current.replace("| Fewest system nodes. |", "| Fewest nodes (edited by hand). |")
    assert edited != current
    page.write_text(edited, encoding="utf-8")

    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "llm_pd_eks_tools.maint.config_doc", "--page", str(page), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    stale = tool("--check")
    assert (stale.returncode, stale.stderr.strip()) == (
        1,
        "config_doc: configuration.md: the config table is stale; run `python -m llm_pd_eks_tools.maint.config_doc` "
        "and commit docs/configuration.md",
    )
    assert tool().returncode == 0
    assert page.read_text(encoding="utf-8") == current
    assert tool("--check").returncode == 0


def test_missing_markers_are_a_usage_error(tmp_path):
    page = tmp_path / "configuration.md"
    page.write_text("# no table here\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.maint.config_doc", "--page", str(page), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("config_doc: configuration.md has no '<!-- config-table:begin")
