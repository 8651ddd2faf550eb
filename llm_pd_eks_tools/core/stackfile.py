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

Why PyYAML's loader with overrides and not ruamel.yaml (which `make size WRITE=1` uses to write):
ruamel.yaml 0.18.17 keeps none of these guarantees by itself, so it would need the same overrides,
and it would add a dependency to `make preview`'s set. Its YAML 1.2 resolver is not yaml.v3's
(`017` is 17, not 15; `08` the int 8, not the float 8.0; 2**64 an int, not a float); it expands
aliases with no option to refuse them; its safe loader lets a repeated key win inside a mapping
that has a `<<` merge, and its round-trip loader builds a tagged value for `!!python/...` where
the safe one refuses it.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Optional

import yaml
from yaml.nodes import MappingNode

from llm_pd_eks_tools.core.cli import Exit, ToolError, one_line

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


# --- plain scalars as gopkg.in/yaml.v3 resolves them ---------------------------------------------
# A transcription of yaml.v3's `resolve` (go-yaml/yaml, branch v3, resolve.go, commit 0d383ff9):
# YAML 1.2 core schema with yaml.v3's own extensions. What it means for a stack file:
# - booleans are only true/True/TRUE/false/False/FALSE (`yes`, `on`, `off`, `y` are strings);
# - null is ``, `~`, null/Null/NULL; `.inf`/`.nan` in three spellings are floats;
# - no base-60 numbers ("purposefully unsupported"): `1:0` is the string "1:0", not 60;
# - ints: underscores are dropped, then Go's strconv.ParseInt(s, 0, 64) - so 0x1f, 0o17, 0b101 and
#   the YAML 1.1 octal 017 (= 15) are ints, `1_000` is 1000; failing that ParseUint, then the
#   float pattern below; `-0b..`/`-0o..` too;
# - floats match `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$` (after dropping `_`), or
#   start with `.` and parse as a Go float; `08` is therefore the float 8.0;
# - timestamps (an unquoted YYYY-... in one of four Go layouts) are read as strings here: a stack
#   file has no use for them, and the engine hands the program text either way.
_V3_BOOL = {**dict.fromkeys(("true", "True", "TRUE"), True), **dict.fromkeys(("false", "False", "FALSE"), False)}
_V3_NULL = ("", "~", "null", "Null", "NULL")
_V3_SPECIAL_FLOAT = {
    **dict.fromkeys((".nan", ".NaN", ".NAN"), float("nan")),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), float("inf")),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), float("-inf")),
}
_V3_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
# The forms Go's strconv.ParseInt(s, 0, 64) accepts once `_` is gone: a sign, then 0x/0o/0b digits,
# a leading-0 octal, or decimal.
_GO_INT = re.compile(r"^[-+]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$")
# The decimal forms Go's strconv.ParseFloat accepts (a plain scalar starting with `.`).
_GO_FLOAT = re.compile(r"^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?|inf|infinity|nan)$", re.IGNORECASE)
INT64 = (-(2**63), 2**63 - 1)
UINT64_MAX = 2**64 - 1


def _go_parse_int(text: str, unsigned: bool = False) -> Optional[int]:
    """Go's strconv.ParseInt(text, 0, 64) (ParseUint when `unsigned`); None where Go returns an error."""
    if not _GO_INT.match(text) or (unsigned and text[0] in "+-"):
        return None
    sign, digits = (-1, text[1:]) if text[0] == "-" else (1, text.lstrip("+"))
    if digits[:2].lower() in ("0x", "0o", "0b"):
        value = int(digits[2:], {"x": 16, "o": 8, "b": 2}[digits[1].lower()])
    elif digits.startswith("0") and len(digits) > 1:
        value = int(digits[1:], 8)
    else:
        value = int(digits)
    value *= sign
    low, high = (0, UINT64_MAX) if unsigned else INT64
    return value if low <= value <= high else None


def v3_resolve(text: str) -> tuple[str, Any]:
    """(short tag, value) yaml.v3 gives an untagged plain scalar `text`."""
    if text in _V3_NULL:
        return "!!null", None
    if text in _V3_BOOL:
        return "!!bool", _V3_BOOL[text]
    if text in _V3_SPECIAL_FLOAT:
        return "!!float", _V3_SPECIAL_FLOAT[text]
    if text == "<<":
        return "!!merge", text
    hint = text[0]
    if hint == ".":
        if _GO_FLOAT.match(text):
            return "!!float", float(text)
    elif hint.isdigit() or hint in "+-":
        plain = text.replace("_", "")
        for unsigned in (False, True):
            number = _go_parse_int(plain, unsigned) if plain else None
            if number is not None:
                return "!!int", number
        if _V3_FLOAT.match(plain):
            return "!!float", float(plain)
        for prefix, base in (("0b", 2), ("-0b", 2), ("0o", 8), ("-0o", 8)):
            if plain.startswith(prefix) and len(plain) > len(prefix):
                try:
                    return "!!int", int(("-" if prefix[0] == "-" else "") + plain[len(prefix) :], base)
                except ValueError:
                    pass
    return "!!str", text


_LONG = "tag:yaml.org,2002:"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases and duplicate mapping keys and resolves plain scalars as yaml.v3 does.

    PyYAML implements YAML 1.1 (`yes`/`on` booleans, `1:0` = 60, `0o17` a string); the Pulumi CLI reads
    stack files with yaml.v3 (`v3_resolve` above), so a value must mean here what it means to `pulumi up`.
    """

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            return _LONG + v3_resolve(value)[0][2:]
        return super().resolve(kind, value, implicit)

    def construct_v3_scalar(self, node: Any) -> Any:
        tag, value = v3_resolve(str(self.construct_scalar(node)))
        if _LONG + tag[2:] != node.tag:  # an explicit tag yaml.v3 would refuse (`!!int "x"`)
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{one_line(repr(node.value), 40)} is not a valid {node.tag.removeprefix(_LONG)}",
                node.start_mark,
            )
        return value

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


for _tag in ("null", "bool", "int", "float"):
    _StrictLoader.add_constructor(_LONG + _tag, _StrictLoader.construct_v3_scalar)


def parse(text: str, name: str) -> Any:
    """YAML text -> Python data, with duplicate keys and aliases refused (`name` labels errors)."""
    return _parse(text, name)[0]


def _parse(text: str, name: str) -> tuple[Any, dict[str, str]]:
    """(data, raw): `raw` maps each `config:` key whose value is a scalar to its source text.

    The Pulumi CLI reads a top-level config value into a string first (pulumi/pulumi
    sdk/go/common/resource/config/value.go, `unmarshalValue`: "First, try to unmarshal as a string"),
    and yaml.v3 decodes a scalar into a Go string as its source text: `replicas: 0x10` reaches the
    program as "0x10", `flag: TRUE` as "TRUE"; a null as the empty string.
    """
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{name} line {mark.line + 1}" if mark is not None else name
        problem = error.problem or error.context or "not valid YAML"
        raise StackFileError(f"{where}: {one_line(str(problem), 300)}") from None
    except yaml.YAMLError as error:
        raise StackFileError(f"{name}: not valid YAML ({one_line(str(error), 200)})") from None
    except RecursionError:  # PyYAML composes recursively: `[[[[...` thousands deep exhausts the stack
        raise StackFileError(f"{name}: nested too deeply to be a stack file; is it the right file?") from None
    finally:
        loader.dispose()
    raw: dict[str, str] = {}
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if key_node.value == "config" and isinstance(value_node, MappingNode):
                for k, v in value_node.value:
                    if isinstance(v, yaml.ScalarNode) and isinstance(k, yaml.ScalarNode):
                        raw[k.value] = "" if v.tag == _LONG + "null" else v.value
    return data, raw


# The Pulumi CLI's stack-name rule (pkg/backend: stackNameAndProjectRegexp, `^[A-Za-z0-9_.-]{1,100}$`).
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")  # whole-string match (`fullmatch`): `$` would let "dev\n" through


def stack_file(stack: str, root: Path) -> Path:
    """`Pulumi.<stack>.yaml` under `root`; a name the Pulumi CLI would refuse (`../x`) is refused here."""
    if not STACK_NAME.fullmatch(stack) or stack in (".", ".."):
        raise StackFileError(
            f"{echo(stack, 60)} is not a Pulumi stack name (letters, digits, '-', '_' and '.', at most 100 characters)"
        )
    return root / f"Pulumi.{stack}.yaml"


def stacks(root: Path) -> list[str]:
    """The stacks a checkout defines, from its Pulumi.<stack>.yaml files."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def existing_stack_file(stack: str, root: Path) -> Path:
    """`stack_file`, refused unless that file exists (checked before a tool creates anything for the stack)."""
    path = stack_file(stack, root)
    if not path.is_file():
        known = ", ".join(stacks(root)) or "none"
        raise StackFileError(
            f"no stack file {path.name}; stacks here: {known} (or create it: `pulumi stack init {stack}`)"
        )
    return path


def read(stack: str, root: Path) -> dict[str, Any]:
    """The `config:` mapping of `Pulumi.<stack>.yaml` under `root` (empty when the file has none)."""
    path = existing_stack_file(stack, root)
    name = path.name
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise StackFileError(
            f"{name}: {size} bytes is larger than a stack file can be ({MAX_BYTES}); is it the right file?"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise StackFileError(f"{name}: cannot be read as UTF-8 text ({one_line(str(error), 120)})") from None
    data, raw = _parse(text, name)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise StackFileError(
            f"{name}: the file is a YAML {_kind(data)}, but a stack file is a mapping "
            "with a `config:` key (`config:` then `namespace:key: value` lines)"
        )
    config = data.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise StackFileError(
            f"{name}: `config:` is a YAML {_kind(config)}; it must be a mapping of `namespace:key: value` lines"
        )
    for key in config:
        if not isinstance(key, str):
            raise StackFileError(
                f"{name}: config key {echo(key, 60)} is not a string; keys look like `{PROJECT}:gpuNodes`"
            )
    for key, value in config.items():
        _check_value(name, key, value)
    # A top-level scalar is what the engine hands the program: its source text (see `_parse`).
    return {
        key: raw[key] if key in raw and not isinstance(value, (dict, list)) else value for key, value in config.items()
    }


def _check_value(name: str, key: str, value: Any) -> None:
    """Refuse what `pulumi up` could not hand the program: an empty `secure:` ciphertext, and a NaN or
    infinity inside an object (the CLI passes objects as JSON, which has no such numbers: Go's
    encoding/json returns "unsupported value: NaN")."""
    if isinstance(value, dict) and "secure" in value and set(value) == {"secure"}:
        if not isinstance(value["secure"], str) or not value["secure"].strip():
            raise StackFileError(
                f"{name}: {key}: `secure:` holds no ciphertext; set it with `pulumi config set --secret {key} ...`"
            )
        return
    stack_ = [(key, value)]
    while stack_:
        where, item = stack_.pop()
        if isinstance(item, float) and not math.isfinite(item) and where != key:
            raise StackFileError(
                f"{name}: {where} is {item}; a config object cannot carry NaN or infinity (JSON has neither)"
            )
        if isinstance(item, dict):
            stack_.extend((f"{where}.{k}", v) for k, v in item.items())
        elif isinstance(item, list):
            stack_.extend((f"{where}[{i}]", v) for i, v in enumerate(item))


def _kind(value: Any) -> str:
    names = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}
    return names.get(type(value), type(value).__name__)


def is_secure(value: Any) -> bool:
    """A stack file's encrypted value: `{secure: <ciphertext>}`."""
    return isinstance(value, dict) and set(value) == {"secure"}


def secure_values(stack: str, root: Path) -> dict[str, str]:
    """`ns:key` -> ciphertext of each `{secure: ...}` value in `Pulumi.<stack>.yaml` (the text, never decrypted)."""
    return {
        (key if ":" in key else f"{PROJECT}:{key}"): str(value["secure"])
        for key, value in read(stack, root).items()
        if is_secure(value)
    }


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
