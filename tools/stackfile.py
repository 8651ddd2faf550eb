"""Read a `Pulumi.<stack>.yaml` strictly: one reader for mockrun, preview, preflight and promote-check.

PyYAML's `safe_load` lets a repeated key silently win (a second `gpuNodes:` block replaced the
first), expands aliases without bound (a "billion laughs" file runs for minutes) and returns
whatever the top level happens to be (a list gives "'list' object has no attribute 'get'" later).
The Pulumi CLI reads stack files with Go's gopkg.in/yaml.v3, which refuses duplicate mapping keys
("mapping key ... already defined at line N"), so refusing them here makes the offline tools agree
with `pulumi up`. A stack file never needs an alias, so aliases are refused outright (no expansion,
so no bomb), and the file's size is capped before parsing.

Every failure is a `StackFileError` (a `ToolError` with exit code USAGE): one line naming the file,
the line and what to do.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode

from tools.cli import Exit, ToolError, one_line

PROJECT = "llm-pd-eks"
# Largest stack file read (bytes). The checked-in ones are ~1 KB; a config that needs more is wrong.
MAX_BYTES = 256 * 1024
# Value the engine hands the program for a `{secure: ...}` entry (the tools cannot decrypt it).
SECRET_PLACEHOLDER = "[secret-placeholder]"
# How much of a user's value an error message repeats.
ECHO_LIMIT = 100


class StackFileError(ToolError):
    """A stack file that cannot be read: missing, too large, not YAML, or not a stack file's shape."""

    def __init__(self, message: str):
        super().__init__(Exit.USAGE, message)


def echo(value: Any, limit: int = ECHO_LIMIT) -> str:
    """`value` as an error message repeats it: repr'd, on one line, at most `limit` characters."""
    return one_line(repr(value), limit)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and duplicate mapping keys, and reads booleans as YAML 1.2.

    PyYAML implements YAML 1.1, where `yes`, `no`, `on` and `off` are booleans; the Pulumi CLI's
    yaml.v3 reads them as strings, so `protect: yes` must not pass here and fail in `up`. Only
    true/false (any case yaml.v3 accepts) resolve to booleans.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.MarkedYAMLError(
                problem=f"YAML alias *{one_line(str(event.anchor), 40)} is not allowed in a stack file; "
                "write the value out in full",
                problem_mark=event.start_mark,
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: {...}`: flattened by the base class
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key (a list or map as a key): the base class reports it
                continue
            if first is not None:
                raise yaml.MarkedYAMLError(
                    problem=f"key {echo(key, 60)} is defined twice (first at line {first}); keep one "
                    "(the Pulumi CLI refuses duplicate keys too)",
                    problem_mark=key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def parse(text: str, name: str) -> Any:
    """YAML text -> Python data, with duplicate keys and aliases refused (`name` labels errors)."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{name} line {mark.line + 1}" if mark is not None else name
        problem = error.problem or error.context or "not valid YAML"
        raise StackFileError(f"{where}: {one_line(str(problem), 300)}") from None
    except yaml.YAMLError as error:
        raise StackFileError(f"{name}: not valid YAML ({one_line(str(error), 200)})") from None
    except RecursionError:  # PyYAML composes recursively: `[[[[...` thousands deep exhausts the stack
        raise StackFileError(f"{name}: nested too deeply to be a stack file; is it the right file?") from None


# The Pulumi CLI's stack-name rule (pkg/backend: stackNameAndProjectRegexp, `^[A-Za-z0-9_.-]{1,100}$`).
STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def stack_file(stack: str, root: Path) -> Path:
    """`Pulumi.<stack>.yaml` under `root`; a name the Pulumi CLI would refuse (`../x`) is refused here."""
    if not STACK_NAME.match(stack) or stack in (".", ".."):
        raise StackFileError(f"{echo(stack, 60)} is not a Pulumi stack name (letters, digits, '-', '_' and '.', "
                             "at most 100 characters)")
    return root / f"Pulumi.{stack}.yaml"


def stacks(root: Path) -> list[str]:
    """The stacks a checkout defines, from its Pulumi.<stack>.yaml files."""
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def read(stack: str, root: Path) -> dict[str, Any]:
    """The `config:` mapping of `Pulumi.<stack>.yaml` under `root` (empty when the file has none)."""
    path = stack_file(stack, root)
    name = path.name
    if not path.is_file():
        known = ", ".join(stacks(root)) or "none"
        raise StackFileError(f"no stack file {name}; stacks here: {known} (or create it: `pulumi stack init {stack}`)")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise StackFileError(f"{name}: {size} bytes is larger than a stack file can be ({MAX_BYTES}); "
                             "is it the right file?")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise StackFileError(f"{name}: cannot be read as UTF-8 text ({one_line(str(error), 120)})") from None
    data = parse(text, name)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise StackFileError(f"{name}: the file is a YAML {_kind(data)}, but a stack file is a mapping "
                             "with a `config:` key (`config:` then `namespace:key: value` lines)")
    config = data.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise StackFileError(f"{name}: `config:` is a YAML {_kind(config)}; it must be a mapping of "
                             "`namespace:key: value` lines")
    for key in config:
        if not isinstance(key, str):
            raise StackFileError(f"{name}: config key {echo(key, 60)} is not a string; keys look like "
                                 f"`{PROJECT}:gpuNodes`")
    return config


def _kind(value: Any) -> str:
    names = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}
    return names.get(type(value), type(value).__name__)


def is_secure(value: Any) -> bool:
    """A stack file's encrypted value: `{secure: <ciphertext>}`."""
    return isinstance(value, dict) and set(value) == {"secure"}


def engine_config(config: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """A stack file's `config:` mapping in the engine's form: (`ns:key` -> string, secret keys).

    A key without a namespace belongs to the project (as the Pulumi CLI reads it); objects and lists
    become JSON text, booleans `true`/`false`, secure values a placeholder listed as secret.
    """
    values: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in config.items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if is_secure(value):
            values[full] = SECRET_PLACEHOLDER
            secret_keys.append(full)
        elif isinstance(value, (dict, list)):
            values[full] = json.dumps(value, default=str)  # default=str: YAML dates and the like
        elif isinstance(value, bool):
            values[full] = "true" if value else "false"
        elif value is None:
            values[full] = ""
        else:
            values[full] = str(value)
    return values, secret_keys


def load(stack: str, root: Path) -> tuple[dict[str, str], list[str]]:
    """`Pulumi.<stack>.yaml` under `root` in the engine's form (raises StackFileError), with the
    values of any ESC environment it imports resolved by the Pulumi CLI (`resolve_environments`)."""
    return resolve_environments(stack, root, *engine_config(read(stack, root)))


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


def imported_environments(stack: str, root: Path) -> list[str]:
    """The ESC environments `Pulumi.<stack>.yaml` imports (its `environment:` list), in order."""
    path = stack_file(stack, root)
    data = parse(path.read_text(encoding="utf-8"), path.name) if path.is_file() else None
    envs = data.get("environment") if isinstance(data, dict) else None
    if envs is None:
        return []
    if not isinstance(envs, list) or not all(isinstance(e, str) and e for e in envs):
        raise StackFileError(f"{path.name}: `environment:` must be a list of ESC environment names "
                             f"(`- {PROJECT}/{stack}`), got {echo(envs, 60)}")
    return list(envs)


def environment_keys(envs: list[str], root: Path) -> list[str]:
    """The config keys the checked-in definitions of `envs` set (their `values.pulumiConfig`)."""
    keys: set[str] = set()
    for env in envs:
        definition = root / ESC_DIR / f"{env}.yaml"
        if definition.is_file():
            values = (parse(definition.read_text(encoding="utf-8"), str(definition.relative_to(root))) or {})
            keys.update(str(k) for k in ((values.get("values") or {}).get("pulumiConfig") or {}))
    return sorted(k if ":" in k else f"{PROJECT}:{k}" for k in keys)


def resolve_environments(
    stack: str, root: Path, values: dict[str, str], secret_keys: list[str]
) -> tuple[dict[str, str], list[str]]:
    """`values` (the stack file's own config) with the imported environments' values, from the CLI.

    No import: `values` unchanged. Otherwise `pulumi config --json` (no --show-secrets: a secret's
    value stays out, as a placeholder) gives the stack's whole config as the engine will see it;
    without a CLI, or when it fails (not logged in), EnvironmentImportError names what is missing.
    """
    import shutil
    import subprocess

    envs = imported_environments(stack, root)
    if not envs:
        return values, secret_keys
    keys = environment_keys(envs, root)
    unseen = ", ".join(keys) if keys else f"unknown: no definition under {ESC_DIR}/"
    what = f"Pulumi.{stack}.yaml imports ESC environment(s) {', '.join(envs)}"
    cli = shutil.which("pulumi")
    if cli is None:
        raise EnvironmentImportError(f"{what}, whose keys ({unseen}) only the Pulumi CLI can open; install it "
                                     "and `pulumi login`, or copy the keys into `config:`")
    try:
        done = subprocess.run([cli, "config", "--json", "--stack", stack, "--cwd", str(root)],
                              capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EnvironmentImportError(f"{what}; `pulumi config --json` gave no answer in {CLI_TIMEOUT_S} s, "
                                     f"so its keys ({unseen}) are unseen") from None
    if done.returncode != 0:
        reason = one_line(done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}", 160)
        raise EnvironmentImportError(f"{what}; `pulumi config --json` failed ({reason}), so its keys ({unseen}) "
                                     "are unseen; `pulumi login` and retry")
    try:
        listed = json.loads(done.stdout)
    except ValueError:
        listed = None
    if not isinstance(listed, dict):
        raise EnvironmentImportError(f"{what}; `pulumi config --json` printed no JSON object, so its keys "
                                     f"({unseen}) are unseen")
    resolved, secrets = _cli_config(listed)
    missing = [k for k in keys if k not in resolved]
    if missing:
        raise EnvironmentImportError(f"{what}, but the CLI's config lacks {', '.join(missing)}, which "
                                     f"{ESC_DIR}/ says it sets; is the environment up to date (`esc env get`)?")
    return resolved, secrets


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
            values[full] = SECRET_PLACEHOLDER
            secret_keys.append(full)
        elif entry.get("objectValue") is not None:
            values[full] = json.dumps(entry["objectValue"])
        else:
            values[full] = str(entry.get("value", ""))
    return values, secret_keys
