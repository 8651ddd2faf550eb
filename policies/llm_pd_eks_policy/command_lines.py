"""Command lines as a POSIX shell, env(1) and vLLM's argument parser read them: what a container's
`command` + `args` (or a RayJob entrypoint) set, unset and run before the engine starts, and the
JSON settings (`--kv-transfer-config`) vLLM takes from them.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import yaml

from . import yaml_text
from .common import dig, is_unknown, known_list

# -- command lines ---------------------------------------------------------------------------------
SHELLS = re.compile(r"(^|/)(ba|z|da|k|a)?sh$")
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", ";;", "\n"}
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.DOTALL)
UNSET = object()  # a command line that removes a variable from the environment
# Programs that run the rest of their arguments as a command, with the options of theirs that take
# a value (tini(1) `-p SIG -e CODE`, dumb-init(1) `-r s:r`, timeout(1) DURATION, nice(1) `-n N`).
_WRAPPERS: dict[str, tuple[str, ...]] = {
    "exec": ("-a",),
    "tini": ("-p", "-e"),
    "tini-static": ("-p", "-e"),
    "dumb-init": ("-r", "--rewrite"),
    "nohup": (),
    "setsid": (),
    "nice": ("-n",),
    "stdbuf": ("-i", "-o", "-e"),
    "timeout": ("-s", "-k", "--signal", "--kill-after"),
    "command": (),
    "builtin": (),
    "time": (),
}
_WRAPPER_OPERAND = {"timeout": 1}  # positional operands before the command (timeout's DURATION)
# Variables that choose the KV-cache fabric (libfabric, NIXL, UCX): a command line that may set one
# where the reader cannot follow it is refused rather than passed.
FABRIC_VARIABLES = re.compile(r"\b(FI_|NIXL|UCX_)")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNREADABLE_BUILTINS = ("eval", "source", ".")  # run text the pack does not see as argv


@dataclass
class CommandLine:
    """What a container's command line does before the engine starts: variables it sets or unsets
    (in order; the last one wins), the argument tokens of every command it runs, and the text it
    could not read (unbalanced quotes, `eval`, a variable set by other means than an assignment)."""

    assignments: list[tuple[str, Any]] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)  # text the pack could not read as a command line
    commands: list[list[str]] = field(default_factory=list)  # argv of every command run, wrappers removed

    def last(self, name: str) -> Any:
        """The value `name` ends with (UNSET when removed); None when the command line leaves it alone."""
        value: Any = None
        for key, val in self.assignments:
            if key == name or (key == "*" and name != "*"):
                value = val
        return value


def _assigned(match: "re.Match[str]") -> tuple[str, str]:
    """(name, value) of `NAME=VALUE`; `NAME+=VALUE` appends, so its value is `${NAME}VALUE`."""
    name, plus, value = match.groups()
    return name, f"${{{name}}}{value}" if plus else value


def _statements(tokens: list[str]) -> Iterator[list[str]]:
    current: list[str] = []
    for token in tokens:
        if token in _SEPARATORS:
            if current:
                yield current
            current = []
        else:
            current.append(token)
    if current:
        yield current


def _shell_tokens(script: str) -> Optional[list[str]]:
    lexer = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes
        return None


def command_line(argv: Any) -> CommandLine:
    """`command` + `args` (or an entrypoint string) read the way a POSIX shell and env(1) run it:
    `export A=B`, `A=B cmd`, `env [-i] [-u A] A=B cmd`, `unset A`, wrappers that exec their arguments
    (`exec`, `tini --`, `dumb-init`, `nohup`, `timeout`, ...) and scripts given to a shell's `-c`
    (also combined, `bash -lc`, `sh -ec`)."""
    result = CommandLine()
    if isinstance(argv, str):
        tokens = _shell_tokens(argv)
        if tokens is None:
            result.opaque.append(argv)
            return result
        argv = tokens
    words = [w for w in known_list(argv) or [] if isinstance(w, str)]
    _read(words, result, 0)
    return result


def _env_options(statement: list[str], i: int, result: CommandLine) -> int:
    """env(1)'s options and assignments from `statement[i]` on; the index of its command."""
    while i < len(statement):
        arg = statement[i]
        if arg in ("-i", "--ignore-environment", "-"):
            result.assignments.append(("*", UNSET))
        elif arg in ("-u", "--unset") and i + 1 < len(statement):
            result.assignments.append((statement[i + 1], UNSET))
            i += 1
        elif arg.startswith("--unset="):
            result.assignments.append((arg.split("=", 1)[1], UNSET))
        elif (m := _ASSIGNMENT.match(arg)) is not None:
            result.assignments.append(_assigned(m))
        elif arg == "--":
            return i + 1
        elif not arg.startswith("-"):
            return i
        i += 1
    return i


def _wrapper_options(name: str, statement: list[str], i: int) -> int:
    """Skip a wrapper's options (and `--`, and its leading operands); the index of its command."""
    takes_value = _WRAPPERS[name]
    operands = _WRAPPER_OPERAND.get(name, 0)
    while i < len(statement):
        arg = statement[i]
        if arg == "--":
            i += 1
            break
        if arg.startswith("-") and len(arg) > 1:
            i += 2 if arg in takes_value else 1
            continue
        break
    return i + operands


def shell_script(rest: list[str]) -> Optional[str]:
    """The script a shell runs with `-c` (alone or combined, `-lc`, `-ec`), or None."""
    j, has_c = 1, False
    while j < len(rest) and rest[j].startswith(("-", "+")) and rest[j] not in ("-", "--"):
        flag = rest[j]
        if flag.startswith("-") and not flag.startswith("--") and "c" in flag[1:]:
            has_c = True
        j += 2 if flag in ("-o", "+o", "-O", "+O") else 1
    if j < len(rest) and rest[j] == "--":
        j += 1
    return rest[j] if has_c and j < len(rest) else None


def _read(words: list[str], result: CommandLine, depth: int) -> None:
    if depth > 8:
        result.opaque.append(" ".join(words)[:200])
        return
    for statement in _statements(words):
        i = 0
        while i < len(statement):
            word = statement[i]
            base = word.rsplit("/", 1)[-1]
            match = _ASSIGNMENT.match(word)
            if match:  # `A=B cmd` or a shell assignment
                result.assignments.append(_assigned(match))
                i += 1
            elif word in ("export", "declare", "typeset", "readonly", "local"):
                for arg in statement[i + 1 :]:
                    m = _ASSIGNMENT.match(arg)
                    if m:
                        result.assignments.append(_assigned(m))
                i = len(statement)
            elif word == "unset":
                result.assignments += [(arg, UNSET) for arg in statement[i + 1 :] if not arg.startswith("-")]
                i = len(statement)
            elif base == "env":
                i = _env_options(statement, i + 1, result)
            elif base in _WRAPPERS:
                i = _wrapper_options(base, statement, i + 1)
            else:
                break
        rest = statement[i:]
        result.tokens += rest
        if not rest:
            continue
        result.commands.append(rest)
        result.assignments += _assigned_by_builtins(rest)
        if rest[0] in _UNREADABLE_BUILTINS:
            result.opaque.append(" ".join(rest)[:400])
        elif SHELLS.search(rest[0]):
            script = shell_script(rest)
            if script is not None:
                tokens = _shell_tokens(script)
                if tokens is None:
                    result.opaque.append(script)
                else:
                    _read(tokens, result, depth + 1)


def _assigned_by_builtins(argv: list[str]) -> list[tuple[str, str]]:
    """Variables a shell builtin sets from a value the reader does not compute: `printf -v NAME`,
    `read NAME...`, `mapfile NAME` (their values count as a shell expansion)."""
    if argv[0] == "printf" and "-v" in argv[1:-1]:
        return [(argv[argv.index("-v") + 1], "$(printf)")]
    if argv[0] in ("read", "mapfile", "readarray"):
        return [(a, f"$({argv[0]})") for a in argv[1:] if _IDENTIFIER.fullmatch(a)]
    return []


def unreadable_settings(line: CommandLine, names: re.Pattern) -> list[str]:
    """Where a command line may set a variable matching `names` in a way the reader cannot follow:
    text it could not read that mentions such a name, or `NAME=...` handed to a command as an
    argument (`echo FI_PROVIDER=tcp >> ~/.bashrc`, `printf`, `sed`) rather than assigned."""
    found = [text[:60] for text in line.opaque if any(names.search(w) for w in _IDENTIFIER.findall(text))]
    for argv in line.commands:
        for word in argv[1:]:
            m = _ASSIGNMENT.match(word)
            if m and names.search(m.group(1)):
                found.append(" ".join(argv)[:60])
                break
    return found


def container_command(container: Any) -> CommandLine:
    return command_line([*(known_list(dig(container, "command")) or []), *(known_list(dig(container, "args")) or [])])


# -- vLLM's --kv-transfer-config on a command line -------------------------------------------------
_KV_FLAG = "--kv-transfer-config"
_FLAG_NAME = re.compile(r"(?<=--)[^.]*")


def vllm_json_args(tokens: list[str]) -> dict[str, list[Any]]:
    """Every JSON argument a vLLM command line passes, by flag (`--kv-transfer-config`), as vLLM's
    parser reads it: the values in the order argparse sees them, so the last one is the one used.

    A transcription of vLLM 0.26.0 `FlexibleArgumentParser.parse_args`
    (vllm/utils/argparse_utils.py): `_` becomes `-` between `--` and the first `.`; a dotted flag
    `--flag.a.b VALUE` (or `=VALUE`) is merged into one dict per flag (lists extend, the rest
    replace), `--flag.a.b+ V1,V2` makes the list [V1, V2], a value is JSON when it parses as JSON,
    else the text; the merged dicts are appended after every other argument, so they win over a
    `--flag JSON` given anywhere on the line."""
    processed = []
    for arg in tokens:
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            key = _FLAG_NAME.sub(lambda m: m.group(0).replace("_", "-"), key, count=1)
            head, dot, tail = key.partition(".")
            if len(head) > len("--kv-t") - 1 and _KV_FLAG.startswith(head):
                key = _KV_FLAG + dot + tail  # argparse takes an unambiguous prefix (allow_abbrev)
            processed.append(f"{key}={value}" if eq else key)
        else:
            processed.append(arg)
    plain_values: dict[str, list[Any]] = {}
    dotted: dict[str, dict[str, Any]] = {}
    skip: set[int] = set()
    for i, arg in enumerate(processed):
        if i in skip:
            continue
        if arg.startswith("--") and "." not in arg:
            name, eq, value = arg.partition("=")
            if not eq:
                if i + 1 >= len(processed):
                    continue
                value = processed[i + 1]
            plain_values.setdefault(name, []).append(_json_or_text(value))
            continue
        if arg.startswith("-") and "." in arg:
            if "=" in arg:
                arg, value = arg.split("=", 1)
                if "." not in arg:  # the dot was in the value: a plain flag
                    plain_values.setdefault(arg, []).append(_json_or_text(value))
                    continue
            elif i + 1 < len(processed):
                value = processed[i + 1]
                skip.add(i + 1)
            else:
                continue
            if arg.endswith("+"):
                arg = arg[:-1]
                value = json.dumps(str(value).split(","))
            key, *keys = arg.split(".")
            nested: Any = _json_or_text(value)
            for part in reversed(keys):
                nested = {part: nested}
            _merge(dotted.setdefault(key, {}), nested)
    for flag, merged in dotted.items():
        plain_values.setdefault(flag, []).append(merged)
    return plain_values


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _merge(original: dict[str, Any], update: dict[str, Any]) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _merge(original[k], v)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] += v
        else:
            original[k] = v


def kv_flags(tokens: list[str]) -> list[tuple[str, Any]]:
    """(label, config) of the `--kv-transfer-config` vLLM uses from a command line (the last value
    its parser sees, `vllm_json_args`); a value that is not JSON is returned as text, for the rule to
    refuse."""
    values = vllm_json_args(tokens).get(_KV_FLAG)
    return [(_KV_FLAG, values[-1])] if values else []


def runtime_env_yaml(text: Any) -> Any:
    """A RayJob's `spec.runtimeEnvYAML` parsed (None when absent or unknown, the text when invalid)."""
    if not isinstance(text, str) or is_unknown(text):
        return None
    try:
        return yaml_text.load(text)
    except (yaml.YAMLError, yaml_text.YamlTooLarge):
        return text
