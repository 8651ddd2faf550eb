"""Pinned Helm releases from official chart repositories (device plugins, the KubeRay operator).

Every chart here is installed as a `helm.v3.Release` named after its chart: one custom resource whose
chart, version, repository and values a preview, the mock harness and CrossGuard can all read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s


@dataclass(frozen=True)
class HelmChart:
    """A chart and the official repository it comes from."""

    name: str
    repo: str


def pinned_release(
    resource_name: str,
    chart: HelmChart,
    version: str,
    namespace: str,
    values: dict[str, Any],
    opts: pulumi.ResourceOptions,
    create_namespace: Optional[bool] = None,
    skip_crds: Optional[bool] = None,
) -> k8s.helm.v3.Release:
    """A release of `chart` at exactly `version`, named after the chart."""
    return k8s.helm.v3.Release(
        resource_name,
        name=chart.name,
        chart=chart.name,
        version=version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
        namespace=namespace,
        create_namespace=create_namespace,
        skip_crds=skip_crds,
        values=values,
        opts=opts,
    )
