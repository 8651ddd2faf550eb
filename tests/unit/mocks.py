"""Pulumi's public unit-test mocks (`pulumi.runtime.Mocks`, as in pulumi/examples' testing-unit-py).

Each resource gets an id and ARN of its own, derived from its type and name, so a test that wires the
wrong resource sees the wrong id. `registered` keeps every registration for assertions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pulumi


@dataclass
class Registered:
    type: str
    name: str
    id: str
    inputs: dict[str, Any]


class PublicMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.registered: list[Registered] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        digest = hashlib.sha256(f"{args.typ}/{args.name}".encode()).hexdigest()[:17]
        kind = args.typ.split(":")[-1].lower()
        resource_id = f"{kind[:8]}-{digest}"
        self.registered.append(Registered(args.typ, args.name, resource_id, dict(args.inputs)))
        return resource_id, {**args.inputs, "arn": f"arn:aws:mock:us-west-2:210987654321:{kind}/{resource_id}"}

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict, list]:
        return {}, []

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.registered if r.type == typ]

    def by_id(self, resource_id: str) -> Registered:
        (found,) = [r for r in self.registered if r.id == resource_id]
        return found


def install() -> PublicMocks:
    """Fresh mocks for one test (the integration tier's harness installs its own between runs)."""
    mocks = PublicMocks()
    pulumi.runtime.set_mocks(mocks, project="llm-pd-eks", stack="unit", preview=False)
    return mocks
