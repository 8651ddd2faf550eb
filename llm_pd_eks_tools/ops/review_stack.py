"""A pull request's review stack: a real, short-lived stack with the serving layer off.

    python -m llm_pd_eks_tools.ops.review_stack --from dev --pr 123 [--ttl-hours 24] [--github-output FILE]

Writes `Pulumi.pr-<N>.yaml` from the base stack's file: the same network, cluster and system nodes,
`servingLayer: false` (no GPU node group, device plugins, KubeRay, RayService or observability),
no `serving`, `protect: false` (the stack must be destroyable by its time-to-live). The new stack
is validated exactly as the program validates it, then run under the offline mocks to price it
(the preview's own cost figure: CPU nodes, NAT gateways, the EKS control plane, from
llm_pd_eks/data/prices.json). The review-stack workflow creates it with `pulumi up` and destroys it
when the PR closes or its time-to-live has passed.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Optional

import yaml

from llm_pd_eks.config import ConfigError
from llm_pd_eks_tools.core import stackfile
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, appendable_file, exit_with, one_line
from llm_pd_eks_tools.core.io_safety import append_text, atomic_write
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.figures import key_figures
from llm_pd_eks_tools.plan.preview.mockrun import run_program

PROJECT = stackfile.PROJECT
PREFIX = "pr-"  # review stacks are `pr-<number>`; the reaper destroys only these
DEFAULT_TTL_HOURS = 24
MAX_TTL_HOURS = 24 * 7  # a week: past that, a "review" stack is an unowned environment
TAG_EXPIRES = "review:expires-at"  # Pulumi stack tag the reaper reads (ISO 8601, UTC)


def review_stack_name(pr: int) -> str:
    return f"{PREFIX}{pr}"


def review_config(base: dict[str, Any]) -> dict[str, Any]:
    """The base stack's `config:` with the serving layer off (keys in the stack file's spelling)."""
    config = {k: v for k, v in base.items() if k not in (f"{PROJECT}:serving", "serving")}
    config[f"{PROJECT}:servingLayer"] = False
    config[f"{PROJECT}:protect"] = False
    return config


def write_review_stack(base_stack: str, pr: int, root: Path) -> Path:
    """Write Pulumi.pr-<N>.yaml under `root` from `base_stack`'s file; returns its path."""
    base_path = stackfile.stack_file(base_stack, root)
    stackfile.read(base_stack, root)  # the strict reader's checks, with its messages
    data = stackfile.parse(base_path.read_text(encoding="utf-8"), base_path.name) or {}
    data["config"] = review_config(data.get("config") or {})
    path = stackfile.stack_file(review_stack_name(pr), root)
    header = (
        f"# Review stack of pull request #{pr}: {base_stack}'s network, cluster and system nodes, the\n"
        "# serving layer off. Written by "
        f"`python -m llm_pd_eks_tools.ops.review_stack --from {base_stack} --pr {pr}`.\n"
    )
    atomic_write(path, header + yaml.safe_dump(data, sort_keys=False))
    return path


def review_cost(stack: str, root: Path) -> dict[str, Any]:
    """The review stack's hourly cost, from its offline plan (the preview's cost figure)."""
    config = stack_config(stack, root)
    cost = key_figures(run_program(stack, root=root), config, config.region).cost
    return {
        "hourly": round(cost.hourly, 4),
        "lines": [(line.item, line.quantity, line.hourly) for line in cost.lines],
        "missing": cost.missing,
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.ops.review_stack", description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="base", default="dev", help="the stack whose layout the review stack copies")
    parser.add_argument("--pr", type=int, required=True, help="the pull request's number")
    parser.add_argument(
        "--ttl-hours", type=int, default=DEFAULT_TTL_HOURS, help=f"time-to-live from now (1..{MAX_TTL_HOURS})"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument(
        "--github-output", type=appendable_file, help="append stack=, expires-at=, hourly= to this file (GITHUB_OUTPUT)"
    )
    args = parser.parse_args(argv)
    if args.pr <= 0:
        raise ToolError(Exit.USAGE, f"--pr {args.pr}: a pull request number is positive")
    if not 1 <= args.ttl_hours <= MAX_TTL_HOURS:
        raise ToolError(Exit.USAGE, f"--ttl-hours {args.ttl_hours}: must be 1..{MAX_TTL_HOURS} (a week at most)")

    stack = review_stack_name(args.pr)
    path = write_review_stack(args.base, args.pr, args.root)
    try:
        cost = review_cost(stack, args.root)
    except ConfigError as error:
        path.unlink()
        raise ToolError(Exit.USAGE, f"review stack from {args.base}: {one_line(str(error), 400)}") from None
    if cost["missing"]:
        path.unlink()
        raise ToolError(
            Exit.USAGE,
            f"review stack from {args.base}: no price for {', '.join(cost['missing'])} in llm_pd_eks/data/prices.json",
        )
    expires = (datetime.now(UTC) + timedelta(hours=args.ttl_hours)).strftime("%Y-%m-%dT%H:%M:%SZ")
    items = ", ".join(f"{item} ×{n} ${hourly:.3f}/h" for item, n, hourly in cost["lines"])
    print(f"{path.name}: serving layer off; ${cost['hourly']:.2f}/h on demand ({items}); expires {expires}")
    if args.github_output:
        try:
            append_text(
                args.github_output,
                f"stack={stack}\nexpires-at={expires}\nhourly={cost['hourly']:.2f}\n"
                f"cost-lines={json.dumps(cost['lines'])}\n",
            )
        except ToolError:
            path.unlink()  # the workflow never learns of the stack: nothing is left half-made
            raise
    return Exit.OK


if __name__ == "__main__":
    exit_with("review_stack", main)
