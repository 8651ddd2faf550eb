"""The runtime set (requirements.txt) is what `make preview` and `pulumi up` need, and no more.

`make preview` installs only requirements.txt, so everything the preview imports must come from it
(or from what its pins depend on); the test and tooling set (requirements-dev.txt) must not leak in.
Checked against the real import list of a preview run and the installed packages' own metadata.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys
from pathlib import Path

from helpers import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Run the preview as `make preview` does (in a process of its own), then list what it imported.
_LIST_IMPORTS = """
import json, sys
from llm_pd_eks_tools.preview.__main__ import main
code = main(["--stack", "dev", "--quiet", "--out", sys.argv[1]])
print(json.dumps({"code": int(code), "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def pinned(path: Path) -> list[str]:
    """Canonical names of the packages a requirements file pins itself (not through `-r`)."""
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.append(canonicalize_name(Requirement(line).name))
    return names


def closure(names: list[str]) -> set[str]:
    """The installed distributions `names` pull in (their unconditional requirements, recursively)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in md.requires(name) or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            todo.append(canonicalize_name(req.name))
    return seen


def test_requirements_dev_builds_on_the_runtime_set_without_repeating_it():
    dev = (ROOT / "requirements-dev.txt").read_text()
    assert re.search(r"(?m)^-r requirements\.txt$", dev)
    assert not set(pinned(ROOT / "requirements.txt")) & set(pinned(ROOT / "requirements-dev.txt"))


def test_preview_imports_nothing_from_the_test_and_tooling_set(tmp_path):
    """No module the preview loads comes from a package only requirements-dev.txt pins.

    (That requirements.txt alone is *enough* is shown by a fresh clone's `make preview`, which
    installs only it: see the README's fresh-clone timings. Here the shared virtualenv also holds the
    dev set, whose optional extras, e.g. jsonschema's format checkers, a preview may pick up.)
    """
    done = subprocess.run(
        [sys.executable, "-c", _LIST_IMPORTS, str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0
    modules = set(result["modules"])
    runtime = closure(pinned(ROOT / "requirements.txt"))
    dev_only = set(pinned(ROOT / "requirements-dev.txt")) - runtime
    # The heavy test/tooling packages are exactly what a fresh `make preview` no longer installs.
    assert {"ray", "pyarrow", "moto", "boto3", "mypy", "pytest"} <= dev_only
    dev_modules = {
        module
        for module, dists in md.packages_distributions().items()
        if {canonicalize_name(d) for d in dists} & dev_only and not {canonicalize_name(d) for d in dists} & runtime
    }
    assert {"ray", "pyarrow", "moto", "boto3", "mypy", "pytest"} <= dev_modules
    assert not modules & dev_modules, f"the preview imports dev-only packages: {sorted(modules & dev_modules)}"
    assert {"pulumi", "pulumi_aws", "pydantic", "yaml"} <= modules  # and it did run the program
