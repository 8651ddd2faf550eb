"""The `admissionPolicy` section: the in-cluster ValidatingAdmissionPolicy that judges every pod asking
for GPUs (llm_pd_eks/admission_policy.py)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from .base import Strict, shown

# A namespace name (RFC 1123 label, as the API server validates `metadata.name` of a Namespace).
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

AdmissionMode = Literal["audit", "warn", "deny"]


class AdmissionPolicyConfig(Strict):
    """How the cluster's GPU-pod admission policy acts on a pod that breaks a rule."""

    mode: AdmissionMode = Field(
        default="deny",
        description="audit: the API server admits the pod and records the failure in its audit log; warn: it "
        "also answers the client with a warning; deny: it refuses the pod (and still records it). A cluster whose "
        "workloads predate the policy runs audit first, fixes what `make verify`'s admission-policy check names, "
        "then moves to deny (docs/policies.md).",
    )
    exempt_namespaces: list[str] = Field(
        default_factory=lambda: ["kube-system"],
        description="Namespaces whose pods the policy never judges (EKS add-ons and the device plugins run in "
        "kube-system); every other namespace's GPU pods are judged.",
    )

    @field_validator("exempt_namespaces")
    @classmethod
    def _namespaces(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _NAMESPACE.fullmatch(value):
                raise ValueError(f"{shown(value)} is not a namespace name (lower-case letters, digits and '-')")
        if len(set(values)) != len(values):
            raise ValueError("a namespace is listed twice")
        return values
