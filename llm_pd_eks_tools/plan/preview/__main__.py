"""Offline preview of a stack: the plan, policy verdicts, figures and artifacts, without credentials.

`python -m llm_pd_eks_tools.plan.preview --stack dev` (what `make preview` runs) prints the component tree, the
verdicts and key figures, and writes `build/preview/<stack>/`: resources.json, report.json,
manifests/, graph.dot, summary.md (see llm_pd_eks_tools/plan/preview/harness.py for the steps).

Exit status (llm_pd_eks_tools/core/cli.py `Exit`): 0 OK, 1 a mandatory policy violation, 2 a bad stack or policy
config, 3 the program failed, 4 the policy pack failed to run, 70 a bug in the preview.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NoReturn, Optional

from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, finish, one_line, run, seconds
from llm_pd_eks_tools.core.io_safety import read_regular_file
from llm_pd_eks_tools.core.process_safety import guard_streams

PROG = "preview"


def main(argv: Optional[list[str]] = None) -> int:
    from llm_pd_eks_tools.plan.preview.analyzer import POLICY_ANSWER_TIMEOUT_S

    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.plan.preview", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to preview (default: this one)")
    parser.add_argument("--out", type=Path, help="artifact directory (default: <root>/build/preview/<stack>)")
    parser.add_argument(
        "--policy-config", type=Path, help="JSON policy config, as `pulumi preview --policy-pack-config`"
    )
    parser.add_argument(
        "--policy-timeout",
        type=seconds,
        default=None,
        help=f"seconds for all of the policy pack's answers (default {POLICY_ANSWER_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--first-preview",
        action="store_true",
        help="as the first `pulumi preview` of a new stack: ids and computed outputs unknown",
    )
    parser.add_argument("--mermaid", action="store_true", help="print only the component diagram (README)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)

    from llm_pd_eks_tools.plan.preview import harness

    progress = (lambda _m: None) if args.quiet else harness.stderr_progress
    # Every name and path is checked before anything is cleared or written (a stack name is never a path).
    root, out = harness.checked_paths(args.stack, args.root, args.out)
    policy_config = read_policy_config(args.policy_config) if args.policy_config else None
    if args.mermaid:
        from llm_pd_eks_tools.plan.preview.graph import component_mermaid
        from llm_pd_eks_tools.plan.preview.mockrun import run_program

        harness.use_root(root)
        engine_config, secret_keys, _ = harness.read_config(args.stack, root)
        print(component_mermaid(run_program(args.stack, engine_config, secret_keys, root=root)), end="")
        return Exit.OK
    from llm_pd_eks_tools.plan.preview.render import render_text, write_failure_summary

    try:
        result = harness.preview(
            args.stack,
            root,
            out,
            policy_config,
            progress=progress,
            policy_timeout=args.policy_timeout,
            first_preview=args.first_preview,
        )
    except ToolError as error:  # the PR comment posts summary.md: it must say this run failed
        if harness.holds_only_artifacts(out):  # never into a directory the preview refused to clear
            write_failure_summary(out, args.stack, error)
        raise

    print(render_text(result), end="")
    progress("done in " + ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items()))
    return result.exit_code


MAX_POLICY_CONFIG_BYTES = 1 * 2**20  # a policy config names a few dozen policies: a few KB


def read_policy_config(path: Path) -> dict:
    """A `--policy-pack-config` file: a JSON object of policy name -> settings (the CLI's shape)."""
    data = read_regular_file(path, MAX_POLICY_CONFIG_BYTES, "policy config")
    try:
        config = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ToolError(Exit.USAGE, f"policy config {path}: cannot be read as UTF-8 text") from None
    except RecursionError:  # `[[[[...` thousands deep: json's decoder recurses
        raise ToolError(Exit.USAGE, f"policy config {path}: nested too deeply to be a policy config") from None
    except ValueError as error:
        raise ToolError(Exit.USAGE, f"policy config {path}: not JSON ({one_line(str(error), 120)})") from None
    if not isinstance(config, dict):
        raise ToolError(
            Exit.USAGE,
            f"policy config {path}: a JSON {type(config).__name__} where an object of "
            '`"policy-name": {...}` entries belongs',
        )
    if _depth(config) > MAX_POLICY_CONFIG_DEPTH:
        raise ToolError(
            Exit.USAGE,
            f"policy config {path}: nested deeper than {MAX_POLICY_CONFIG_DEPTH} levels; no policy needs that",
        )
    for name, entry in config.items():
        if not isinstance(entry, (str, dict)) or (
            isinstance(entry, dict) and not isinstance(entry.get("enforcementLevel", ""), str)
        ):
            raise ToolError(
                Exit.USAGE,
                f"policy config {path}: {name!r} must be an enforcement level or an object "
                '(`{"enforcementLevel": "mandatory", ...}`)',
            )
    return config


# The analyzer protocol carries a policy's properties as a protobuf Struct, whose nesting protobuf
# limits (100 by default): refused here, where it is a usage error, not inside the pack.
MAX_POLICY_CONFIG_DEPTH = 32


def _depth(value: object) -> int:
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            todo.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            todo.extend((v, level + 1) for v in item)
    return deepest


def run_and_exit(argv: Optional[list[str]] = None) -> NoReturn:
    """`main` as a process of its own: `python -m llm_pd_eks_tools.plan.preview`, and each side of
    `llm_pd_eks_tools.plan.preview.diff`."""
    import gc

    # The preview allocates hundreds of thousands of objects importing the provider SDKs and never
    # frees much; the cyclic collector only costs time here (~20% of a run), so it is switched off.
    gc.disable()
    guard_streams()
    code = finish(PROG, run(PROG, main, argv))
    # Skip interpreter teardown (tens of thousands of SDK objects, and asyncio loop finalisers that
    # complain once gc is off): everything is written and the policy process is already closed.
    os._exit(code)


if __name__ == "__main__":
    run_and_exit()
