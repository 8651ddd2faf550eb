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
    """`Pulumi.<stack>.yaml` under `root` in the engine's form (raises StackFileError)."""
    return engine_config(read(stack, root))
