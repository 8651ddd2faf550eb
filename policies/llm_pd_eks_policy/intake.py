"""Text the rules cannot read within bounds is a verdict, not a hang: `resource-decodable`.

The rules read YAML and JSON text among the properties (serve configs, manifests, Helm values);
text whose aliases expand past `yaml_text.MAX_NODES` (or refer to themselves) is unreadable, and
this policy gives it one verdict naming where it is, instead of every rule skipping it silently.

What the pack cannot answer at all: properties the policy host itself fails to decode before any
rule runs (a NaN or Infinity number, nesting deeper than protobuf's JSON conversion recurses). The
host then answers the request with an error and the engine fails the preview: the resource is
refused (fail closed), with the host's error rather than a verdict. docs/policies.md says so.
"""

from __future__ import annotations

from typing import Any

import yaml
from pulumi_policy import ReportViolation, ResourceValidationArgs

from . import yaml_text
from .common import plain, resource_policy

POLICY_NAME = "resource-decodable"


def _bounded_text(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """YAML text among the properties whose aliases expand past `yaml_text.MAX_NODES` (the other
    rules treat such text as unreadable, so it gets its verdict here, once)."""
    stack: list[tuple[str, Any]] = [("", plain(args.props))]
    found: list[str] = []
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
        elif isinstance(node, str) and "&" in node and "*" in node:  # anchors and aliases
            try:
                yaml_text.load_all(node)
            except yaml_text.YamlTooLarge as error:
                found.append(f"{path or '(root)'} ({error})")
            except (yaml.YAMLError, ValueError):
                pass  # not YAML: the rules that read it say so
    if found:
        report(
            f"could not judge resource '{args.name}': YAML text at {', '.join(sorted(found)[:3])}; no rule of the "
            f"pack read it. Fix: write the text without aliases (yaml.safe_dump of the data does), or lower "
            f"'{POLICY_NAME}' in the policy config once the resource is checked elsewhere."
        )


resource_decodable = resource_policy(
    name=POLICY_NAME,
    description="Every YAML text among a resource's properties can be read within bounds (its aliases do not "
    "expand past the pack's node limit); text that cannot gets this verdict instead of passing unread.",
    validate=_bounded_text,
)

POLICIES = [resource_decodable]
