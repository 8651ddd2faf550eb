"""`ConfigError` and how a pydantic validation error becomes one line naming its key
(`llm-pd-eks:gpuNodes.maxSize: ...`)."""

from __future__ import annotations

import difflib
import re
from typing import Any, Mapping

from .base import PROJECT, shown
from .stack import StackConfig


class ConfigError(Exception):
    """Every problem of a stack's config, each naming its key."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in the stack config:\n" + "\n".join(f"  - {p}" for p in problems))


def _known_keys() -> list[str]:
    return [field.alias or name for name, field in StackConfig.model_fields.items() if name != "region"]


def _location(error: Mapping[str, Any]) -> str:
    parts = [
        shown(p, 60) if not isinstance(p, (str, int)) else str(p)[:60]
        for p in error["loc"]
        if not str(p).startswith("function-after")
    ]
    if not parts:
        return PROJECT
    if parts == ["region"]:  # the model's `region` is the AWS provider's key
        return "aws:region"
    return f"{PROJECT}:{parts[0]}" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts[1:])


def _describe(error: Mapping[str, Any]) -> str:
    where = _location(error)
    if error["type"] == "extra_forbidden":
        key = str(error["loc"][-1])
        siblings = _known_keys() if len(error["loc"]) == 1 else []
        hint = difflib.get_close_matches(key[:64], siblings, n=1)
        suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
        return f"{where}: unknown key{suffix}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] not in ("value_error", "missing", "assertion_error") and "input" in error:
        message += f" (got {shown(error['input'], 60)})"  # e.g. `maxSize: true` -> a valid integer (got True)
    # A model-level check reports several problems, one a line; at the top level each names its key.
    return "\n".join(_at(where, part) for part in message.split("\n"))


def _at(where: str, part: str) -> str:
    """One problem of a model-level check at `where`; a leading `key: ` names a field below it."""
    if where == PROJECT:
        return f"{PROJECT}:{part}"
    field = re.match(r"([a-z][A-Za-z]*): ", part)
    return f"{where}.{field[1]}: {part[field.end() :]}" if field else f"{where}: {part}"
