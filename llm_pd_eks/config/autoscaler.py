"""The `nodeAutoscaler` section: Cluster Autoscaler for both node groups (llm_pd_eks/autoscaler.py)."""

from __future__ import annotations

import re
from typing import Optional

from pydantic import (
    Field,
    field_validator,
)

from .. import versions
from .base import Strict, exact_chart_version


class NodeAutoscalerConfig(Strict):
    """Cluster Autoscaler (https://kubernetes.github.io/autoscaler), pinned chart, image per Kubernetes minor."""

    enabled: bool = Field(
        default=True, description="install Cluster Autoscaler so node groups scale between min and max"
    )
    chart_version: str = Field(
        default=versions.CLUSTER_AUTOSCALER_CHART_VERSION, description="`cluster-autoscaler` chart, exact version"
    )
    image_tag: Optional[str] = Field(
        default=None,
        description="cluster-autoscaler image tag; default: the catalog's tag for `cluster.kubernetesVersion` "
        "(its minor must equal the cluster's)",
    )

    @field_validator("chart_version")
    @classmethod
    def _exact(cls, value: str) -> str:
        return exact_chart_version(value, "9.59.0")

    @field_validator("image_tag")
    @classmethod
    def _tag(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not re.fullmatch(r"v1\.\d+\.\d+", value):
            raise ValueError(f"{value!r} is not a cluster-autoscaler image tag such as 'v1.35.2'")
        return value
