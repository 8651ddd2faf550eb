"""What the real run ran on, as installed: every wheel unpack-wheels.sh installed into /tmp/site, with
its sha256, and the Python that ran it. The run record names these, not the serving image the
versions were pinned from (the GPU machine never pulls that image). Standard library only."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
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


def versions() -> dict[str, str]:
    """The release's packages as installed, the GPUs nvidia-smi lists (and how many), and the Python."""
    out = {}
    for name in ("ray", "vllm", "nixl", "nixl-cu13", "torch", "transformers", "tokenizers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    out["gpu"] = smi.stdout.strip()
    out["gpu_count"] = str(len(out["gpu"].splitlines()))  # one line a GPU: the record says how many ran
    out["python"] = sys.version.split()[0]
    return out
