"""The pack's policies, importable without starting the analyzer server (see ../__main__.py)."""

from __future__ import annotations

from . import (
    capacity,
    efa_security,
    exposure,
    gpu_nodes,
    imds,
    intake,
    pod_efa,
    ray_resources,
    ray_serving,
    references,
    secrets,
    universe,
    visibility,
)

PACK_NAME = "llm-pd-eks-policies"

POLICIES = [
    *gpu_nodes.POLICIES,
    *imds.POLICIES,
    *efa_security.POLICIES,
    *references.POLICIES,
    *ray_serving.POLICIES,
    *pod_efa.POLICIES,
    *secrets.POLICIES,
    *exposure.POLICIES,
    *capacity.POLICIES,
    *ray_resources.POLICIES,
    *intake.POLICIES,
    *visibility.POLICIES,
    *universe.POLICIES,
]
