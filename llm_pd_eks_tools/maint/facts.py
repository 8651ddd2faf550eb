"""What the `make facts` generators share: write a generated text to its copies, or report the stale ones."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from llm_pd_eks_tools.core.cli import Exit
from llm_pd_eks_tools.core.io_safety import atomic_write


def sync(text: str, outputs: Iterable[Path], root: Path, check: bool) -> int:
    """Write `text` to each output that differs (Exit.OK); with `check`, only name them (Exit.FAILED if any)."""
    stale = [p for p in outputs if not p.exists() or p.read_text() != text]
    if check:
        for path in stale:
            print(f"{path.relative_to(root)} is stale: run `make facts`", file=sys.stderr)
        return Exit.FAILED if stale else Exit.OK
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
        print(f"wrote {path.relative_to(root)}")
    return Exit.OK
