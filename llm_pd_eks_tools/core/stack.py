"""The one reader of a stack for every tool: its file, its ESC imports, its validated config.

`Pulumi.<stack>.yaml` is read strictly (`stackfile`), the values of the ESC environments it imports
are resolved by the Pulumi CLI (`esc_imports`), and the result is in the engine's form: what the
program receives under `pulumi up` (`project:key` -> string, secure values a placeholder listed as
secret). `stack_config` validates that once, with the program's own model, as the program does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from llm_pd_eks_tools.core import stackfile
from llm_pd_eks_tools.core.cli import ROOT
from llm_pd_eks_tools.core.esc_imports import resolve_environments

if TYPE_CHECKING:
    from llm_pd_eks.config import StackConfig


def stack_file(stack: str, root: Path = ROOT) -> Path:
    """`Pulumi.<stack>.yaml` under `root` (whether or not it exists)."""
    return stackfile.stack_file(stack, root)


def stacks(root: Path = ROOT) -> list[str]:
    """The stacks this checkout defines, from its Pulumi.<stack>.yaml files."""
    return stackfile.stacks(root)


def load_stack_config(stack: str, root: Path = ROOT) -> tuple[dict[str, str], list[str]]:
    """The stack's config in the engine's form: (`project:key` -> string, secret keys).

    Read strictly (duplicate keys, aliases and a wrong shape are a `StackFileError`, exit code
    USAGE, naming the file and line), with the values of any ESC environment it imports resolved.
    """
    return resolve_environments(stack, root, *stackfile.engine_config(stackfile.read(stack, root)))


def stack_config(stack: str, root: Path = ROOT) -> "StackConfig":
    """The stack's validated config, read from its stack file exactly as the program reads it.

    The config model is imported here, when a stack is read, not with this module: `preview-diff`
    runs these tools against another checkout's library (`plan/preview/harness.py` `use_root`), so
    no tool module may import the library before the checkout is chosen.
    """
    from llm_pd_eks.config import validate_engine_config

    return validate_engine_config(*load_stack_config(stack, root), stack=stack)
