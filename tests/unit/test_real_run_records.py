"""Every saved real run names what ran: the pinned wheels (each with its sha256) and the Python that
installed them, never only the image tag its versions were pinned from (no run pulled that image)."""

from __future__ import annotations

import hashlib
import json

import pytest
from helpers import ROOT

from llm_pd_eks_sizing.realrun import evidence

WHEELS_TXT = ROOT / "scripts" / "real-run" / "wheels.txt"
RECORDS = [p / "run.json" for p in evidence.runs()]


def pinned() -> dict[str, str]:
    """wheels.txt: file name -> sha256."""
    rows = [line.split() for line in WHEELS_TXT.read_text().splitlines() if line and not line.startswith("#")]
    return {name: digest.removeprefix("sha256:") for name, digest in rows}


def entries_sha256() -> str:
    lines = WHEELS_TXT.read_text().splitlines(keepends=True)
    return hashlib.sha256("".join(line for line in lines if not line.startswith("#")).encode()).hexdigest()


def test_there_are_records_to_check():
    assert len(RECORDS) >= 5


@pytest.mark.parametrize("path", RECORDS, ids=[p.parent.name for p in RECORDS])
def test_each_record_names_the_wheels_and_python_that_ran(path):
    record = json.loads(path.read_text())
    installed = record["installed"]
    assert installed["from"] == "wheels"
    assert installed["python"] == record["versions"]["python"]
    if "wheels" in installed:  # written by the run itself (gpu_installed.py): each file hashed on the machine
        want = pinned()
        assert installed["wheels"] and all(want.get(name) == digest for name, digest in installed["wheels"])
    else:  # an earlier run, its record completed from its commands: the list it installed, by content
        assert installed["entries_sha256"] == entries_sha256()
        assert "never pulled" in installed["note"]
    if "image_release" in record:  # kept as written, and said not to have run
        assert "image_release" in installed.get("note", "") or "image_release_ran" in record


def test_pinned_versions_agree_with_what_the_records_name():
    names = {name.split("-")[0]: name.split("-")[1] for name in pinned()}
    for path in RECORDS:
        versions = json.loads(path.read_text())["versions"]
        assert names["ray"] == versions["ray"] and names["vllm"] == versions["vllm"], path
