"""What the real run ran on, as installed: every wheel unpack-wheels.sh installed into /tmp/site, with
its sha256, and the Python that ran it. The run record names these, not the serving image the
versions were pinned from (the GPU machine never pulls that image). Standard library only."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

WHEELS = Path("/tmp/w/wheels")  # where unpack-wheels.sh joined the chunks before installing them


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def installed(folder: Path = WHEELS) -> dict:
    """{"from": "wheels", "python": ..., "wheels": [[file, sha256], ...]} (no wheels: an empty list)."""
    files = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    return {
        "from": "wheels",
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "wheels": [[f.name, sha256(f)] for f in files],
    }
