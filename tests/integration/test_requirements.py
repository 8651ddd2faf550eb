"""The locks say what pyproject.toml says, and each install set holds what its users need, no more.

pyproject.toml is the one place dependencies are declared; `make lock` compiles three hash-pinned
locks from it: requirements.txt (the runtime set `pulumi up` installs through Pulumi.yaml's pip
toolchain), requirements-preview.txt (+ the policy pack's host, `make preview`) and
requirements-dev.txt (+ tools, tests, lint). Checked against the real import list of a preview run.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from helpers import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = canonicalize_name(PYPROJECT["project"]["name"])

_LIST_IMPORTS = """
import json, sys
from llm_pd_eks_tools.plan.preview.__main__ import main
code = main(["--stack", "dev", "--quiet", "--out", sys.argv[1]])
print(json.dumps({"code": int(code), "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def lock(path: Path) -> dict[str, str]:
    """name -> version of every package a compiled lock pins (each with its hashes)."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^ ;\\]+)", line)
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    assert pins, f"{path.name} pins nothing"
    return pins


def declared(*sections: str) -> dict[str, str]:
    """name -> exact version of pyproject's direct dependencies (`dependencies`, extras, groups)."""
    reqs: list[str] = []
    for section in sections:
        if section == "dependencies":
            reqs += PYPROJECT["project"]["dependencies"]
        elif section in PYPROJECT["project"].get("optional-dependencies", {}):
            reqs += PYPROJECT["project"]["optional-dependencies"][section]
        else:
            reqs += PYPROJECT["dependency-groups"][section]
    out = {}
    for text in reqs:
        req = Requirement(text)
        if canonicalize_name(req.name) == PROJECT:
            continue  # the project's own extra, e.g. tools = [llm-pd-eks[preview], ...]
        (spec,) = req.specifier
        out[canonicalize_name(req.name)] = spec.version if spec.operator == "==" else str(spec)
    return out


def _agrees(pins: dict[str, str], wanted: dict[str, str]) -> list[str]:
    wrong = []
    for name, version in wanted.items():
        if version.startswith("~="):
            ok = name in pins and pins[name].startswith(version[2:].rsplit(".", 1)[0] + ".")
        else:
            ok = pins.get(name) == version
        if not ok:
            wrong.append(f"{name}: pyproject {version}, lock {pins.get(name)}")
    return wrong


def test_the_runtime_lock_pins_what_pyproject_declares():
    assert not _agrees(lock(ROOT / "requirements.txt"), declared("dependencies"))


def test_the_preview_lock_adds_the_policy_host():
    assert not _agrees(lock(ROOT / "requirements-preview.txt"), declared("dependencies", "preview"))


def test_the_dev_lock_pins_every_extra_and_group():
    wanted = declared("dependencies", "preview", "tools", "test", "lint")
    assert not _agrees(lock(ROOT / "requirements-dev.txt"), wanted)


def test_the_sets_nest_with_the_same_versions():
    names = ("requirements.txt", "requirements-preview.txt", "requirements-dev.txt")
    runtime, preview, dev = (lock(ROOT / name) for name in names)
    assert runtime.items() <= preview.items() and preview.items() <= dev.items()


def test_pulumi_up_installs_no_policy_test_or_lint_package():
    runtime = lock(ROOT / "requirements.txt")
    for name in ("pulumi-policy", "jsonschema", "pytest", "ray", "moto", "boto3", "mypy", "ruff"):
        assert name not in runtime, name
    program = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["runtime"]["options"]
    assert program["toolchain"] == "pip"  # pip installs requirements.txt, the runtime lock


def test_the_pack_pins_what_the_project_locks():
    lines = [line.split("#")[0].strip() for line in (ROOT / "policies" / "requirements.txt").read_text().splitlines()]
    pack = {canonicalize_name(Requirement(text).name): text for text in lines if text}
    preview = lock(ROOT / "requirements-preview.txt")
    for name, text in pack.items():
        assert Requirement(text).specifier.contains(preview[name]), (name, text, preview[name])


def test_preview_imports_nothing_outside_the_preview_set(tmp_path):
    """No module the preview loads comes from a package only requirements-dev.txt pins.

    (That requirements-preview.txt alone is *enough* is shown by a fresh clone's `make preview`.)
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
    preview = set(lock(ROOT / "requirements-preview.txt"))
    dev_only = set(lock(ROOT / "requirements-dev.txt")) - preview
    assert {"ray", "pyarrow", "moto", "boto3", "mypy", "pytest"} <= dev_only
    dev_modules = {
        module
        for module, dists in md.packages_distributions().items()
        if {canonicalize_name(d) for d in dists} & dev_only and not {canonicalize_name(d) for d in dists} & preview
    }
    assert {"ray", "pyarrow", "moto", "boto3", "mypy", "pytest"} <= dev_modules
    # Imported only when present (try/except ImportError upstream): grpc looks for grpcio-reflection,
    # jsonschema's format checkers for jsonpointer and rfc3339-validator (which brings six).
    optional = {"grpc_reflection", "jsonpointer", "rfc3339_validator", "six"}
    modules -= optional
    assert not modules & dev_modules, f"the preview imports dev-only packages: {sorted(modules & dev_modules)}"
    assert {"pulumi", "pulumi_aws", "pydantic", "yaml"} <= modules  # and it did run the program
