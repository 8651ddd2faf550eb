"""The Pulumi ESC environments a stack file imports: which, what keys their checked-in definitions
set, and their values through the Pulumi CLI (or a one-line refusal naming the keys it cannot see)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from llm_pd_eks_tools.core import secrets
from llm_pd_eks_tools.core.cli import Exit, ToolError
from llm_pd_eks_tools.core.process_safety import run_process, time_left
from llm_pd_eks_tools.core.stackfile import PROJECT, SECRET_PLACEHOLDER, StackFileError, echo, parse, stack_file

# -- ESC environments a stack imports ------------------------------------------------------------
# A stack file's `environment:` lists the Pulumi ESC environments it imports, merged in order, later
# ones winning ("Use Pulumi ESC with Pulumi IaC", pulumi.com/docs/esc/guides/pulumi-iac); their
# `values.pulumiConfig` keys reach the program as config. Only the CLI, logged in to Pulumi Cloud,
# can open them, so an offline tool either asks it (`pulumi config --json`, which includes the
# environments' values) or refuses, naming the keys it cannot see. It never goes on without them.
ESC_DIR = "esc"  # checked-in definitions: esc/<project>/<environment>.yaml
CLI_TIMEOUT_S = 120


class EnvironmentImportError(ToolError):
    """A stack imports an ESC environment the tools cannot open (no CLI, no login): UNVERIFIED."""

    def __init__(self, message: str):
        super().__init__(Exit.UNVERIFIED, message)


# An ESC environment's name: `[<project>/]<environment>`, each part of letters, digits, `-`, `_` and `.`
# ("Pulumi ESC: environments", pulumi.com/docs/esc/environments): never a path.
ENVIRONMENT_NAME = re.compile(r"(?:[A-Za-z0-9_.-]+/)?[A-Za-z0-9_.-]+")


def imported_environments(stack: str, root: Path) -> list[str]:
    """The ESC environments `Pulumi.<stack>.yaml` imports (its `environment:` list), in order."""
    path = stack_file(stack, root)
    data = parse(path.read_text(encoding="utf-8"), path.name) if path.is_file() else None
    envs = data.get("environment") if isinstance(data, dict) else None
    if envs is None:
        return []
    if not isinstance(envs, list) or not all(isinstance(e, str) and e for e in envs):
        raise StackFileError(
            f"{path.name}: `environment:` must be a list of ESC environment names "
            f"(`- {PROJECT}/{stack}`), got {echo(envs, 60)}"
        )
    for env in envs:
        if not ENVIRONMENT_NAME.fullmatch(env) or any(part in (".", "..") for part in env.split("/")):
            raise StackFileError(
                f"{path.name}: `environment:` entry {echo(env, 60)} is not an ESC environment name "
                f"(`{PROJECT}/{stack}`: letters, digits, '-', '_', '.'), so never a path"
            )
    return list(envs)


def environment_keys(envs: list[str], root: Path) -> list[str]:
    """The config keys the checked-in definitions of `envs` set (their `values.pulumiConfig`)."""
    keys: set[str] = set()
    for env in envs:
        definition = root / ESC_DIR / f"{env}.yaml"
        if definition.is_file():
            name = str(definition.relative_to(root))
            data = parse(definition.read_text(encoding="utf-8"), name) or {}
            values = data.get("values") or {} if isinstance(data, dict) else None
            config = values.get("pulumiConfig") or {} if isinstance(values, dict) else None
            if not isinstance(config, dict):
                raise StackFileError(f"{name}: not an ESC definition with a `values.pulumiConfig` mapping")
            keys.update(str(k) for k in config)
    return sorted(k if ":" in k else f"{PROJECT}:{k}" for k in keys)


def resolve_environments(
    stack: str, root: Path, values: dict[str, str], secret_keys: list[str]
) -> tuple[dict[str, str], list[str]]:
    """`values` (the stack file's own config) with the imported environments' values, from the CLI.

    No import: `values` unchanged. Otherwise `pulumi config --json` (no --show-secrets: a secret's
    value stays out, as a placeholder) gives the stack's whole config as the engine will see it;
    without a CLI, or when it fails (not logged in), EnvironmentImportError names what is missing.
    """
    envs = imported_environments(stack, root)
    if not envs:
        return values, secret_keys
    keys = environment_keys(envs, root)
    unseen = ", ".join(keys) if keys else f"unknown: no definition under {ESC_DIR}/"
    what = f"Pulumi.{stack}.yaml imports ESC environment(s) {', '.join(envs)}"
    cli = shutil.which("pulumi")
    if cli is None:
        raise EnvironmentImportError(
            f"{what}, whose keys ({unseen}) only the Pulumi CLI can open; install it "
            "and `pulumi login`, or copy the keys into `config:`"
        )
    timeout = time_left(CLI_TIMEOUT_S)
    try:
        done = run_process([cli, "config", "--json", "--stack", stack, "--cwd", str(root)], timeout)
    except subprocess.TimeoutExpired:
        raise EnvironmentImportError(
            f"{what}; `pulumi config --json` gave no answer in {timeout:.1f} s, so its keys ({unseen}) are unseen"
        ) from None
    except OSError as error:
        raise EnvironmentImportError(f"{what}; `pulumi config --json` could not run ({error.strerror})") from None
    if done.returncode != 0:  # its stdout may hold config values: never shown
        reason = secrets.child_failure("it", done.returncode, done.stderr)
        raise EnvironmentImportError(
            f"{what}; `pulumi config --json` failed ({reason}), so its keys ({unseen}) "
            "are unseen; `pulumi login` and retry"
        )
    try:
        listed = json.loads(done.stdout)
    except ValueError:
        listed = None
    if not isinstance(listed, dict):
        raise EnvironmentImportError(
            f"{what}; `pulumi config --json` printed no JSON object, so its keys ({unseen}) are unseen"
        )
    resolved, secret_keys = _cli_config(listed)
    missing = [k for k in keys if k not in resolved]
    if missing:
        raise EnvironmentImportError(
            f"{what}, but the CLI's config lacks {', '.join(missing)}, which "
            f"{ESC_DIR}/ says it sets; is the environment up to date (`esc env get`)?"
        )
    return resolved, secret_keys


def _cli_config(listed: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """`pulumi config --json` output in the engine's form.

    Its shape is the CLI's `configValueJSON` (pulumi/pulumi pkg/cmd/pulumi/config/config.go):
    key -> {"value": text (absent for a secret without --show-secrets), "objectValue": the parsed
    object when the value is one, "secret": bool}.
    """
    values: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, entry in listed.items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        entry = entry if isinstance(entry, dict) else {}
        if entry.get("secret"):
            secrets.register(entry.get("value"))  # present with --show-secrets or from ESC
            secrets.register(entry.get("objectValue"))
            values[full] = SECRET_PLACEHOLDER
            secret_keys.append(full)
        elif entry.get("objectValue") is not None:
            values[full] = json.dumps(entry["objectValue"])
        else:
            values[full] = str(entry.get("value", ""))
    return values, secret_keys
