"""The component package's schema, typed from the config model, and the wire's numbers made whole.

The provider host (`pulumi.provider.experimental`) infers a schema from `LlmPdEksArgs`, where each
config section is a map the component validates with the strict model (`llm_pd_eks/config/`): another
language's program would see `map<Any>`. `typed_schema` replaces each section by a named object type
built from the model's own JSON schema (`StackConfig.model_json_schema(by_alias=True)`), so a
TypeScript, Go or YAML program gets every key with its type, requiredness and description, and the
schema cannot drift from what the component accepts. Pulumi package schema: object types live under
`types` and are referenced as `#/types/<token>`; a union is a `oneOf` of type specs
(pulumi.com/docs/iac/extending-pulumi/schema, "Type Reference").

The wire carries every number as a double (google.protobuf.Struct has only `number_value`), so a
whole number written in YAML or TypeScript reaches the component as `2.0`, which the strict model
refuses where it wants an int. `whole_numbers` turns exactly those into ints, guided by the same JSON
schema: `2.5`, `true` and `"2"` still reach the model and are refused there with its message.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from llm_pd_eks.config import StackConfig

_PRIMITIVES = ("string", "integer", "number", "boolean")


def _model_schema() -> dict[str, Any]:
    return StackConfig.model_json_schema(by_alias=True)


def _type_token(package: str, name: str) -> str:
    return f"{package}:index:{name}"


def _spec(prop: dict[str, Any], package: str) -> dict[str, Any]:
    """One JSON-schema property as a Pulumi type spec (`type`/`items`/`additionalProperties`/`$ref`/`oneOf`)."""
    if "$ref" in prop:
        return {"$ref": f"#/types/{_type_token(package, prop['$ref'].rsplit('/', 1)[-1])}"}
    options = [o for o in prop.get("anyOf", prop.get("oneOf", [])) if o.get("type") != "null"]
    if options:
        specs = [_spec(o, package) for o in options]
        unique = [s for i, s in enumerate(specs) if s not in specs[:i]]
        return unique[0] if len(unique) == 1 else {"oneOf": unique}
    kind = prop.get("type")
    if kind in _PRIMITIVES:
        return {"type": kind}
    if "const" in prop:
        return {"type": "string" if isinstance(prop["const"], str) else "number"}
    if kind == "array":
        return {"type": "array", "items": _spec(prop.get("items", {}), package)}
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return {"type": "object", "additionalProperties": _spec(prop["additionalProperties"], package)}
    return {"$ref": "pulumi.json#/Any"}


def _object_type(model: dict[str, Any], package: str) -> dict[str, Any]:
    properties = {}
    for key, prop in model.get("properties", {}).items():
        spec = _spec(prop, package)
        spec["description"] = prop.get("description") or model.get("description", key)
        properties[key] = spec
    typed: dict[str, Any] = {"type": "object", "properties": properties}
    if model.get("description"):
        typed["description"] = model["description"]
    if model.get("required"):
        typed["required"] = sorted(model["required"])
    return typed


def section_types(package: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(every config model as a named object type by token, section input -> its type spec)."""
    schema = _model_schema()
    types = {_type_token(package, name): _object_type(model, package) for name, model in schema["$defs"].items()}
    sections = {key: _spec(prop, package) for key, prop in schema["properties"].items() if "$ref" in prop}
    return types, sections


def typed_schema(served: dict[str, Any], resource_type: str) -> dict[str, Any]:
    """`served` (the host's inferred package schema) with every config section typed from the model."""
    package = served["name"]
    types, sections = section_types(package)
    inputs = served["resources"][resource_type]["inputProperties"]
    for key, spec in sections.items():
        if key not in inputs:
            raise ValueError(f"config section {key!r} is not an input of {resource_type}")
        inputs[key] = {**spec, "description": inputs[key].get("description", ""), "plain": True}
    served.setdefault("types", {}).update(types)
    return served


def whole_numbers(values: dict[str, Any]) -> dict[str, Any]:
    """`values` (config sections by schema key) with whole-number floats as ints where the model wants an int."""
    schema = _model_schema()
    defs = schema["$defs"]

    def wants_int(prop: dict[str, Any]) -> bool:
        kinds = {o.get("type") for o in [prop, *prop.get("anyOf", []), *prop.get("oneOf", [])]}
        return "integer" in kinds and "number" not in kinds

    def resolve(prop: dict[str, Any]) -> list[dict[str, Any]]:
        """The object models `prop` may be (its `$ref`s, also inside a union)."""
        refs = [o["$ref"] for o in [prop, *prop.get("anyOf", []), *prop.get("oneOf", [])] if "$ref" in o]
        return [defs[ref.rsplit("/", 1)[-1]] for ref in refs]

    def fix(value: Any, prop: dict[str, Any]) -> Any:
        if isinstance(value, float) and value.is_integer() and wants_int(prop):
            return int(value)
        if isinstance(value, list):
            items = prop.get("items") or next(
                (o.get("items") for o in prop.get("anyOf", []) if o.get("type") == "array"), None
            )
            return [fix(v, items) for v in value] if items else value
        if isinstance(value, dict):
            models = resolve(prop)
            # a union of objects: the model whose keys the value uses (the model reports any mismatch)
            model: Optional[dict[str, Any]] = next(
                (m for m in models if set(value) <= set(m.get("properties", {}))), models[0] if models else None
            )
            if model is not None:
                fields = model.get("properties", {})
                return {k: fix(v, fields[k]) if k in fields else v for k, v in value.items()}
            extra = prop.get("additionalProperties")
            if isinstance(extra, dict):
                return {k: fix(v, extra) for k, v in value.items()}
        return value

    top = schema["properties"]
    return {k: fix(v, top[k]) if k in top else v for k, v in values.items()}


def schema_json(served: str, resource_type: str) -> str:
    """`typed_schema` on the host's JSON text."""
    return json.dumps(typed_schema(json.loads(served), resource_type))
