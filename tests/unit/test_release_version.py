"""One release version: the program (pyproject.toml), the component package (`PACKAGE_VERSION`, which
`provider/` serves) and the policy pack (PulumiPolicy.yaml) carry the same one, and CHANGELOG.md's
newest heading names it."""

from __future__ import annotations

import re
import tomllib

import yaml
from helpers import ROOT

from llm_pd_eks.deployment import PACKAGE_VERSION


def program_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_program_the_component_and_the_pack_share_one_version():
    pack = yaml.safe_load((ROOT / "policies" / "PulumiPolicy.yaml").read_text())["version"]
    assert {program_version(), PACKAGE_VERSION, str(pack)} == {program_version()}, (
        program_version(),
        PACKAGE_VERSION,
        pack,
    )


def test_the_changelog_leads_with_that_version():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings and headings[0] == program_version(), headings[:2]
    assert re.fullmatch(r"\d+\.\d+\.\d+", program_version())
