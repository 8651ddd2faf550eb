"""Put back the children a remote component registers, from the generated facts of its own code.

Under mocks a remote component (`eks:index:Cluster`) registers nothing below itself: in a real
`pulumi preview` the eks plugin's `construct` registers its service role, the inner
`aws:eks/cluster:Cluster`, the OIDC provider and a Kubernetes provider, and the engine sends each to
the policy pack. `llm_pd_eks_tools/maint/gen_eks_children.py` recorded them by running pulumi-eks's own
implementation (`eks_children.json`); this module inserts them after their component, under their
parent, with URNs formed as the mock monitor forms the rest of the plan's, their dependencies and
their resource options, so the plan the preview records and judges holds what the engine's would.
"""

from __future__ import annotations

import dataclasses
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from google.protobuf import json_format, struct_pb2

from llm_pd_eks.pulumi_sdk import rpc
from llm_pd_eks_tools.maint.gen_eks_children import inputs_digest
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration, duration_seconds

FACTS = Path(__file__).resolve().parent / "eks_children.json"
COMPONENT = "eks:index:Cluster"
RECORDED_BY = "pulumi-eks construct (llm_pd_eks_tools/plan/preview/eks_children.json)"


@lru_cache(maxsize=4)
def load_facts(path: Path = FACTS) -> dict[str, Any]:
    return json.loads(path.read_text())


def facts_of(root: Path) -> dict[str, Any]:
    """The facts a checkout recorded for its own program (`{}` where it has none, e.g. an older
    revision previewed by preview-diff): children are put back only from the checkout they fit."""
    path = root / FACTS.relative_to(FACTS.parents[3])  # the path inside a checkout
    return load_facts(path) if path.is_file() else {}


def _digest(reg: Registration) -> str:
    return inputs_digest(json_format.MessageToDict(reg.inputs_struct))


def _urn(parent_urn: str, type_: str, name: str) -> str:
    """A child's URN as the mock monitor forms every URN of the plan: its parent's type, `$`, its
    own (the engine's carries every ancestor's type; docs/preview.md lists the difference)."""
    stack, project, parent_types = parent_urn.split("::")[:3]
    return f"{stack}::{project}::{parent_types.split('$')[-1]}${type_}::{name}"


def children_of(component: Registration, recorded: dict[str, Any], mode: str) -> list[Registration]:
    """The recorded children of one component as this harness's registrations."""
    children = recorded["children"]
    urns: list[str] = []
    for child in children:
        parent = component.urn if child["parent"] == -1 else urns[child["parent"]]
        urns.append(_urn(parent, child["type"], child["name"]))

    def ref(value: Any) -> str:
        if isinstance(value, int):
            return component.urn if value == -1 else urns[value]
        return value

    ids = [child["id"] if mode == "known" else "" for child in children]

    def wire(value: Any) -> Any:
        """The recorded inputs with each resource reference naming its child's URN in this plan."""
        if isinstance(value, list):
            return [wire(v) for v in value]
        if isinstance(value, dict):
            if value.get(rpc._special_sig_key) == rpc._special_resource_sig:
                position = value["urn"]
                return {**value, "urn": ref(position), "id": ids[position] if isinstance(position, int) else ""}
            return {k: wire(v) for k, v in value.items()}
        return value

    def without_refs(value: Any) -> Any:
        """Resource references as their id (or URN while unknown): what `inputs` holds for a reference."""
        if isinstance(value, list):
            return [without_refs(v) for v in value]
        if isinstance(value, dict):
            if value.get(rpc._special_sig_key) == rpc._special_resource_sig:
                return value["id"] or value["urn"]
            return {k: without_refs(v) for k, v in value.items()}
        return value

    made: list[Registration] = []
    for child, urn, own_id in zip(children, urns, ids):
        struct = struct_pb2.Struct()
        struct.update(wire(child["inputs"]))
        plain = struct_pb2.Struct()
        plain.update(without_refs(wire(child["inputs"])))
        timeouts = child.get("customTimeouts") or {}
        made.append(
            Registration(
                urn=urn,
                type=child["type"],
                name=child["name"],
                parent=ref(child["parent"]),
                custom=child["custom"],
                protect=bool(child["protect"]),
                provider="",  # the default provider of `version`, as the engine picks it
                dependencies=[ref(u) for u in child["dependencies"]],
                property_dependencies={k: [ref(u) for u in v] for k, v in child["propertyDependencies"].items()},
                inputs=rpc.deserialize_properties(plain),
                inputs_struct=struct,
                id=own_id,
                ignore_changes=list(child["ignoreChanges"]),
                delete_before_replace=bool(child["deleteBeforeReplace"]),
                retain_on_delete=bool(child["retainOnDelete"]),
                delete_before_replace_defined=bool(child["deleteBeforeReplaceDefined"]),
                additional_secret_outputs=list(child["additionalSecretOutputs"]),
                custom_timeouts={k: duration_seconds(v) for k, v in timeouts.items() if v},
                aliases=list(child.get("aliases", [])),
                version=child["version"],
                recorded_by=RECORDED_BY,
            )
        )
    return made


def splice(
    run: ProgramRun, first_preview: bool = False, facts: dict[str, Any] | None = None
) -> tuple[ProgramRun, list[str]]:
    """`run` with the recorded children of every `eks:index:Cluster` after it (`run` itself is left
    as it was), and a line for each component whose children could not be put back as recorded
    (none recorded for the stack, or recorded for other inputs than the program now passes)."""
    if any(r.recorded_by for r in run.resources):
        return run, []  # put back already
    facts = facts if facts is not None else load_facts()
    mode = "first-preview" if first_preview else "known"
    warnings: list[str] = []
    resources: list[Registration] = []
    for reg in run.resources:
        resources.append(reg)
        if reg.type != COMPONENT or reg.custom:
            continue
        recorded = (facts.get("stacks", {}).get(run.stack) or {}).get(mode)
        if recorded is None or recorded["component"] != reg.name:
            warnings.append(
                f"{reg.type} {reg.name}: no children of pulumi-eks recorded for stack {run.stack!r}; the plan "
                f"lacks what its plugin registers ({facts.get('regenerate', 'make eks-children')})"
            )
            continue
        if recorded["inputs_sha256"] != _digest(reg):
            warnings.append(
                f"{reg.type} {reg.name}: pulumi-eks's children were recorded for other inputs than the program "
                f"now passes; they are shown as recorded ({facts.get('regenerate', 'make eks-children')})"
            )
        resources.extend(children_of(reg, recorded, mode))
    return dataclasses.replace(run, resources=resources), warnings
