"""Code, comments and docs say what things are and why, not which task or round brought them."""

from __future__ import annotations

import re
import subprocess

from helpers import ROOT

# "issue 12", "issues 10-15", "round 3"; upstream references ("PR #7764", ".../issues/3324") are fine.
PROCESS = re.compile(r"(?<![/\w#-])(?:issues? ?\d+|round \d+)\b", re.I)
TEXT = (".py", ".md", ".yml", ".yaml", ".toml", ".sh", ".txt")


def test_no_file_names_its_task():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for name in files:
        if name.startswith("tests/data/") or not (name.endswith(TEXT) or name in ("Makefile", ".ci/run")):
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if PROCESS.search(line) and "test_no_process_words" not in name:
                hits.append(f"{name}:{number}: {line.strip()[:100]}")
    assert files and not hits, "\n".join(hits)
