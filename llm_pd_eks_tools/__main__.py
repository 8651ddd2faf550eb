"""`llm-pd-eks <command> [args]`: one entry point for every offline tool.

Each command is the module `python -m <module>` runs, started the same way (its
own argument parser, exit codes from `llm_pd_eks_tools.core.cli.Exit`), so the console script and the
make targets behave identically.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
from typing import Optional

from llm_pd_eks_tools.core.cli import Exit, ToolError, exit_with

COMMANDS = {
    "preview": ("llm_pd_eks_tools.plan.preview", "offline preview of a stack: plan, policy verdicts, figures"),
    "preview-diff": ("llm_pd_eks_tools.plan.preview.diff", "another revision's preview against this working tree"),
    "preflight": ("llm_pd_eks_tools.ops.preflight", "can the stack deploy in its AWS account and region?"),
    "verify": ("llm_pd_eks_tools.ops.verify", "after `pulumi up`: does the stack serve over EFA?"),
    "size": ("llm_pd_eks_sizing.size", "workload -> replicas, nodes, P:D and $/Mtok"),
    "calibrate": ("llm_pd_eks_sizing.calibrate", "measure the deployed stack and fit the sizing constants"),
    "cost-audit": ("llm_pd_eks_sizing.cost_audit", "spend and use against what was sized"),
    "promote-check": ("llm_pd_eks_tools.gates.promote_check", "may the commit move on to the next stack?"),
    "placeholders": ("llm_pd_eks_tools.gates.placeholders", "example values a stack still carries"),
    "resolve-image": ("llm_pd_eks_tools.ops.resolve_image", "pin the stack's serving image by its registry digest"),
    "config-doc": ("llm_pd_eks_tools.maint.config_doc", "docs/configuration.md's reference from the config model"),
}


def available() -> dict[str, tuple[str, str]]:
    """The commands whose module exists in this checkout."""
    return {name: spec for name, spec in COMMANDS.items() if importlib.util.find_spec(spec[0]) is not None}


def usage() -> str:
    commands = available()
    width = max(map(len, commands))
    lines = [f"  {name:<{width}}  {about}" for name, (_, about) in commands.items()]
    return "usage: llm-pd-eks <command> [args]   (llm-pd-eks <command> --help for its arguments)\n" + "\n".join(lines)


def _usage_or_refusal(args: list[str]) -> int:
    """`llm-pd-eks`, `llm-pd-eks --help` or an unknown command: the usage, or one line and exit 2."""
    if args and args[0] not in ("-h", "--help"):
        raise ToolError(Exit.USAGE, f"unknown command {args[0]!r}: one of {', '.join(available())}")
    print(usage())
    return Exit.OK if args else Exit.USAGE


def main(argv: Optional[list[str]] = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    commands = available()
    if not args or args[0] not in commands:
        exit_with("llm-pd-eks", lambda _argv: _usage_or_refusal(args))
    module = commands[args[0]][0]
    sys.argv = [f"llm-pd-eks {args[0]}", *args[1:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
