"""The gates every workflow job that previews or creates resources passes, in two halves.

`runner` runs before any credential, on a hosted runner, from the checked-in stack file alone (so it
works on a stack whose secrets come from Pulumi ESC): it picks the runner and refuses one that
cannot reach the stack's API endpoint. Without this a hosted runner in front of an endpoint that
admits only listed addresses fails at the first Kubernetes object, ~20 min into `pulumi up`, with
the VPC, NAT gateways, EKS and the system nodes already built and billed. For a pull request's
preview it also refuses the deploy runner: a pull request's code never runs where deploys run.

`resolved` runs after `pulumi login` (the job's Pulumi token) and before anything is created: the
stack's config as the engine will see it (`pulumi config --json`, imported ESC environments
included), every placeholder in it, and the values ESC resolves for the keys it sets (not the
checked-in `set me` text of esc/*.yaml, which stays a placeholder in the repository by design).
Secret values are judged, never printed.

    python -m llm_pd_eks_tools.gates.deploy_gate runner --stack S [--runner L] [--preview]
        [--pull-request --deploy-runner D] [--github-output FILE]
    python -m llm_pd_eks_tools.gates.deploy_gate resolved --stack S --runner L

The keys the runner half reads, `llm-pd-eks:deploy` and `llm-pd-eks:cluster`, stay in the stack
file (an ESC environment that sets them is refused: the runner must be known before any login).

Exit: 0 pass, 1 refused (each reason on stderr), 2 bad input (the stack file, the arguments),
5 the CLI could not resolve the config (no login, no CLI).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from pydantic import ValidationError

from llm_pd_eks.config import PROJECT, ClusterConfig, ConfigError, DeployConfig
from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, appendable_file, exit_with, one_line
from llm_pd_eks_tools.core.esc_imports import CLI_TIMEOUT_S, environment_keys, imported_environments
from llm_pd_eks_tools.core.io_safety import append_text
from llm_pd_eks_tools.core.process_safety import run_process
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.core.stackfile import StackFileError, read, secure_values
from llm_pd_eks_tools.gates.placeholders import (
    DEFAULT_RUNNER,
    EXAMPLE_ACCOUNT,
    PLACEHOLDER_WORDS,
    Placeholder,
    api_unreachable,
    example_account,
    find_placeholders,
    own_placeholders,
    reaches_api,
    runner_problem,
    string_leaves,
)

# The sections the runner half reads from the stack file before any login.
RUNNER_SECTIONS = {"deploy": DeployConfig, "cluster": ClusterConfig}


def _section(raw: dict[str, Any], name: str) -> Any:
    return raw.get(f"{PROJECT}:{name}", raw.get(name)) or {}


def runner_facts(stack: str, root: Path) -> tuple[DeployConfig, ClusterConfig]:
    """`deploy` and `cluster` of the stack file, validated as the program validates them; refused when an
    imported ESC environment sets either (it could not be read before the login)."""
    raw = read(stack, root)
    envs = imported_environments(stack, root)
    from_esc = set(environment_keys(envs, root)) if envs else set()
    clash = sorted(f"{PROJECT}:{s}" for s in RUNNER_SECTIONS if f"{PROJECT}:{s}" in from_esc)
    if clash:
        raise ToolError(
            Exit.USAGE,
            f"{', '.join(clash)} come(s) from ESC {', '.join(envs)}: the runner is chosen before any login, "
            f"so keep these keys in Pulumi.{stack}.yaml",
        )
    try:
        deploy = DeployConfig.model_validate(_section(raw, "deploy"))
        cluster = ClusterConfig.model_validate(_section(raw, "cluster"))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ToolError(Exit.USAGE, f"Pulumi.{stack}.yaml: {where}: {one_line(first['msg'], 160)}") from None
    return deploy, cluster


def runner_refusals(
    deploy: DeployConfig,
    cluster: ClusterConfig,
    label: str,
    preview: bool = False,
    pull_request: bool = False,
    deploy_runner: str = "",
) -> list[str]:
    """Why `label` may not run this job (empty: it may). A preview on a runner that cannot reach the
    API is allowed (it runs without refresh); an `up` there is not."""
    problem = runner_problem(label, private_only=False)
    if problem:
        return [f"runner {label!r}: {problem}"]
    found = []
    if pull_request:
        deploy_labels = {x for x in (deploy_runner, deploy.runner_label) if x and x != DEFAULT_RUNNER}
        if label in deploy_labels:
            found.append(
                f"runner {label!r} is the stack's deploy runner: a pull request's code never runs there "
                "(set PREVIEW_RUNNER_<STACK> to a separate runner, or leave it empty for a hosted one)"
            )
    if not preview:
        why = api_unreachable(cluster.public_access_cidrs, label)
        if why:
            found.append(f"{why}: `pulumi up` would fail at the first Kubernetes object, after the VPC, NAT and EKS")
    return found


def cli_config(stack: str, root: Path) -> dict[str, Any]:
    """`pulumi config --json --show-secrets` of the logged-in stack (imported ESC values included)."""
    cli = shutil.which("pulumi")
    if cli is None:
        raise ToolError(Exit.UNVERIFIED, "no `pulumi` CLI on PATH: the resolved config cannot be read")
    command = [cli, "config", "--json", "--show-secrets", "--stack", stack, "--cwd", str(root)]
    try:
        done = run_process(command, CLI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ToolError(Exit.UNVERIFIED, f"`pulumi config --json` gave no answer in {CLI_TIMEOUT_S} s") from None
    if done.returncode != 0:
        reason = one_line(done.stderr.strip() or f"exit {done.returncode}", 160)
        raise ToolError(Exit.UNVERIFIED, f"`pulumi config --json` failed ({reason}); is the job logged in?")
    try:
        listed = json.loads(done.stdout)
    except ValueError:
        listed = None
    if not isinstance(listed, dict):
        raise ToolError(Exit.UNVERIFIED, "`pulumi config --json` printed no JSON object")
    return listed


def resolved_placeholders(listed: dict[str, Any], esc_keys: list[str]) -> list[Placeholder]:
    """Placeholders among the values ESC resolves (the CLI's `configValueJSON` entries: value,
    objectValue, secret); a secret is named, its value never shown."""
    found = []
    for key in esc_keys:
        entry = listed.get(key, listed.get(key.split(":", 1)[1]))
        if not isinstance(entry, dict):
            found.append(Placeholder(key, "(absent)", "ESC's definition sets it, the resolved config lacks it"))
            continue
        value = entry.get("objectValue") if entry.get("objectValue") is not None else entry.get("value", "")
        texts = [t for _, t in string_leaves(value, key)] if not isinstance(value, str) else [value]
        shown = "(secret)" if entry.get("secret") else one_line(str(value), 80)
        for text in texts:
            if PLACEHOLDER_WORDS.search(text):
                found.append(Placeholder(key, shown, "ESC resolves it to a placeholder: `esc env set` the real value"))
                break
            if example_account(text):
                found.append(Placeholder(key, shown, f"ESC resolves it to the example AWS account {EXAMPLE_ACCOUNT}"))
                break
    return found


def resolved_refusals(stack: str, root: Path, label: str) -> list[str]:
    """Every placeholder of the stack as the engine will see it, and whether `label` reaches its API."""
    try:
        config = stack_config(stack, root)
    except ConfigError as error:
        raise ToolError(Exit.USAGE, f"stack {stack}: {one_line(str(error))}") from None
    found = find_placeholders(config, label, secure_values(stack, root), stack) + own_placeholders(stack, root)
    envs = imported_environments(stack, root)
    if envs:
        found += resolved_placeholders(cli_config(stack, root), environment_keys(envs, root))
    lines = [f"placeholder: {p}" for p in found]
    why = reaches_api(config, label)
    if why:
        lines.append(f"{why}: `pulumi up` would fail at the first Kubernetes object, after the VPC, NAT and EKS")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.gates.deploy_gate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="half", required=True)
    before = sub.add_parser("runner", help="before any credential: the runner, from the stack file")
    before.add_argument("--stack", required=True)
    before.add_argument("--runner", default="", help="the runner label the workflow was given, if any")
    before.add_argument("--preview", action="store_true", help="a preview: without API reach it runs unrefreshed")
    before.add_argument("--pull-request", action="store_true", help="a pull request's code: never on a deploy runner")
    before.add_argument("--deploy-runner", default="", help="the stack's deploy runner (DEPLOY_RUNNER_<STACK>)")
    before.add_argument(
        "--github-output", type=appendable_file, help="append runner=, refresh= and note= to this file (GITHUB_OUTPUT)"
    )
    after = sub.add_parser("resolved", help="after `pulumi login`: the config the engine will see")
    after.add_argument("--stack", required=True)
    after.add_argument("--runner", required=True, help="the label of the runner this job runs on")
    args = parser.parse_args(argv)
    from llm_pd_eks_tools.core.cli import ROOT

    try:
        if args.half == "resolved":
            return _report(args.stack, resolved_refusals(args.stack, ROOT, args.runner), f"runs on {args.runner}")
        deploy, cluster = runner_facts(args.stack, ROOT)
    except (FileNotFoundError, StackFileError) as error:
        raise ToolError(Exit.USAGE, f"cannot read stack {args.stack!r}: {one_line(str(error))}") from None
    label = args.runner or deploy.runner_label or DEFAULT_RUNNER
    refusals = runner_refusals(deploy, cluster, label, args.preview, args.pull_request, args.deploy_runner)
    why = api_unreachable(cluster.public_access_cidrs, label) if args.preview else None
    note = f"{why}: the preview shows the plan against the last recorded state, not the live resources" if why else ""
    if args.github_output and not refusals:
        append_text(
            args.github_output, f"runner={label}\nrefresh={'false' if why else 'true'}\nnote={one_line(note, 400)}\n"
        )
    return _report(args.stack, refusals, f"runs on {label}" + (f", no refresh: {note}" if why else ""))


def _report(stack: str, refusals: list[str], ok: str) -> int:
    for line in refusals:
        print(line, file=sys.stderr)
    if refusals:
        print(f"stack {stack}: refused ({len(refusals)}); nothing was created", file=sys.stderr)
        return Exit.FAILED
    print(f"stack {stack}: {ok}")
    return Exit.OK


if __name__ == "__main__":
    exit_with("deploy_gate", main)
