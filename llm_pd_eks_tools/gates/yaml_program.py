"""Check a Pulumi YAML program's use of a component package against the package's schema.

What `pulumi up` of the program would refuse or silently get wrong, found offline: a resource
type the package does not define, a property it does not take, a required input left out, a value
of the wrong type, an output read that the component does not have, a `packages:` entry that does
not point at the package's folder. The schema is the one the provider serves (GetSchema), so
the program is judged by the package itself, never by a copy of its inputs.

Pulumi YAML's syntax (pulumi.com/docs/iac/languages-sdks/yaml/yaml-language-reference): a
resource is `name: {type: <token>, properties: {...}}`; `${name.property}` reads an output,
`${key}` a `config:` key or variable; `fn::<name>:` is a function call. An interpolation or a
function is a value known only at run time: it is type-checked when it names a typed `config:` key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

SCHEMA_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "boolean": bool,
    "integer": int,
    "number": (int, float),
    "array": list,
    "object": dict,
}
# YAML config types (the YAML reference's `config:` `type`) and the schema type each satisfies.
CONFIG_TYPES = {
    "string": "string",
    "integer": "integer",
    "boolean": "boolean",
    "number": "number",
    "List<String>": "array",
    "List<Integer>": "array",
}
_WHOLE_REF = re.compile(r"^\$\{([A-Za-z_][\w-]*)((?:\.[A-Za-z_]\w*|\[\d+\])*)\}$")
_REFS = re.compile(r"\$\{([A-Za-z_][\w-]*)((?:\.[A-Za-z_]\w*|\[\d+\])*)\}")


def _is_expression(value: Any) -> bool:
    if isinstance(value, str) and "${" in value:
        return True
    return isinstance(value, dict) and len(value) == 1 and str(next(iter(value))).startswith("fn::")


def _value_problems(
    value: Any, spec: dict[str, Any], where: str, config_types: dict[str, str], types: dict[str, Any]
) -> list[str]:
    """`value` against one schema property `spec` (its `type`, `items`, `additionalProperties`, a
    `#/types/` object type's properties, or any one of its `oneOf`)."""
    if _is_expression(value):
        whole = _WHOLE_REF.match(value) if isinstance(value, str) else None
        if whole and not whole[2] and whole[1] in config_types and "type" in spec:
            have = config_types[whole[1]]
            want = spec["type"]
            if have != want and not (want == "number" and have == "integer"):
                return [f"{where}: config key {whole[1]!r} is a {have}, the schema wants a {want}"]
        return []
    if spec.get("$ref") == "pulumi.json#/Any":
        return []
    if "oneOf" in spec:
        found = [_value_problems(value, option, where, config_types, types) for option in spec["oneOf"]]
        return [] if any(not problems for problems in found) else min(found, key=len)
    if str(spec.get("$ref", "")).startswith("#/types/"):
        return _object_problems(value, spec["$ref"].removeprefix("#/types/"), where, config_types, types)
    want = spec.get("type")
    if want is None:
        return []
    python = SCHEMA_TYPES[want]
    if isinstance(value, bool) and want in ("integer", "number"):  # bool is an int in Python, not in YAML
        return [f"{where}: {value!r} is a boolean, the schema wants a {want}"]
    if not _is_a(value, python):
        return [f"{where}: {value!r:.60} is not a {want}"]
    problems: list[str] = []
    if want == "array" and "items" in spec:
        for i, item in enumerate(value):
            problems += _value_problems(item, spec["items"], f"{where}[{i}]", config_types, types)
    if want == "object" and "additionalProperties" in spec:
        for key, item in value.items():
            problems += _value_problems(item, spec["additionalProperties"], f"{where}.{key}", config_types, types)
    return problems


def _object_problems(
    value: Any, token: str, where: str, config_types: dict[str, str], types: dict[str, Any]
) -> list[str]:
    """`value` against the package's object type `token`: known keys, each typed, the required ones present."""
    if _is_expression(value):
        return []
    typed = types.get(token)
    if typed is None:
        return [f"{where}: the schema names type {token!r} but does not define it"]
    if not isinstance(value, dict):
        return [f"{where}: {value!r:.60} is not an object ({token.rsplit(':', 1)[-1]})"]
    properties = typed.get("properties", {})
    problems: list[str] = []
    for key, item in value.items():
        if key not in properties:
            problems.append(f"{where}.{key}: not a property of {token.rsplit(':', 1)[-1]}")
        else:
            problems += _value_problems(item, properties[key], f"{where}.{key}", config_types, types)
    problems += [
        f"{where}: the required property {key!r} is missing" for key in typed.get("required", []) if key not in value
    ]
    return problems


def _is_a(value: Any, python: type | tuple[type, ...]) -> bool:
    return isinstance(value, python)


def check(program: dict[str, Any], schema: dict[str, Any], program_dir: Path, package_dir: Path) -> list[str]:
    """Every problem of `program` (a parsed Pulumi.yaml) against `schema` (GetSchema's JSON), one a line."""
    package = schema["name"]
    problems: list[str] = []
    if program.get("runtime") != "yaml" and (program.get("runtime") or {}).get("name") != "yaml":
        problems.append("runtime: not `yaml`; this checker reads Pulumi YAML programs")
    source = (program.get("packages") or {}).get(package)
    if source is None:
        problems.append(f"packages: no entry for {package!r} (`pulumi package add <path>` writes one)")
    elif (program_dir / str(source)).resolve() != package_dir.resolve():
        problems.append(f"packages.{package}: {source!r} is not the package's folder ({package_dir.name}/)")
    config_types = {
        str(k): CONFIG_TYPES.get((v or {}).get("type", "string"), "string")
        for k, v in (program.get("config") or {}).items()
        if isinstance(v, dict)
    }
    ours: dict[str, dict[str, Any]] = {}
    for name, resource in (program.get("resources") or {}).items():
        token = str((resource or {}).get("type", ""))
        if not token.startswith(f"{package}:"):
            continue
        spec = schema["resources"].get(token)
        if spec is None:
            known = ", ".join(sorted(schema["resources"]))
            problems.append(f"resources.{name}.type: {token!r} is not in the package (it has {known})")
            continue
        ours[str(name)] = spec
        inputs = spec.get("inputProperties", {})
        properties = resource.get("properties") or {}
        for key, value in properties.items():
            if key not in inputs:
                problems.append(f"resources.{name}.properties.{key}: not an input of {token}")
                continue
            problems += _value_problems(
                value, inputs[key], f"resources.{name}.properties.{key}", config_types, schema.get("types", {})
            )
        for key in spec.get("requiredInputs", []):
            if key not in properties:
                problems.append(f"resources.{name}.properties: the required input {key!r} is missing")
    problems += _output_reads(program, ours)
    return problems


def _output_reads(program: dict[str, Any], ours: dict[str, dict[str, Any]]) -> list[str]:
    """`${name.property}` anywhere in the program, where `name` is one of the package's resources."""
    problems: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")
        elif isinstance(value, str):
            for ref in _REFS.finditer(value):
                if ref[1] in ours and ref[2]:
                    prop = ref[2][1:].split(".")[0].split("[")[0]
                    if prop not in ours[ref[1]].get("properties", {}) and prop not in ("urn",):
                        problems.append(f"{where}: {ref[1]} has no output {prop!r}")

    for section in ("outputs", "variables", "resources"):
        walk(program.get(section) or {}, section)
    return problems
