"""The KubeRay operator: reconciles RayService/RayCluster objects into Ray head and worker pods.

Installed as a `pulumi_kubernetes.helm.v3.Release` rather than the Helm v4 `Chart` component:
a Release is one custom resource whose chart, version, repository and values a preview (and
the mock harness, and CrossGuard) can read, and `pulumi up` waits for its workloads to be ready
before anything that depends on it, the RayService above all, whose CRD this chart installs.
The v4 `Chart` is a remote component that registers no children under mocks, so none of that
would be checkable offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s

from .config.serving import KubeRayConfig
from .helm import HelmChart, pinned_release
from .system_nodes import SYSTEM_LABELS

KUBERAY_CHART = HelmChart("kuberay-operator", "https://ray-project.github.io/kuberay-helm/")
NAMESPACE = "kuberay-system"
# CRDs: Helm installs a chart's `crds/` only on first install and never upgrades them, so a chart bump
# would run the new operator on old schemas. The chart's CRD files (git tag v<chart version>,
# helm-chart/kuberay-operator/crds/, the four files of v1.7.0) are applied here instead, server-side,
# each a `yaml/v2` ConfigFile whose URL names the version (a bump replaces them, visibly in the
# preview), and the Release (skipCrds) waits for them.
KUBERAY_CRDS = ("rayclusters", "raycronjobs", "rayjobs", "rayservices")
KUBERAY_CRD_URL = "https://raw.githubusercontent.com/ray-project/kuberay/v{version}/helm-chart/kuberay-operator/crds/ray.io_{crd}.yaml"


def crd_urls(chart_version: str) -> dict[str, str]:
    """The chart's CRD files at the git tag of `chart_version`."""
    return {crd: KUBERAY_CRD_URL.format(version=chart_version, crd=crd) for crd in KUBERAY_CRDS}


def operator_values() -> dict:
    """The operator runs on the system nodes, never on (tainted, expensive) GPU nodes."""
    return {"nodeSelector": dict(SYSTEM_LABELS)}


@dataclass(frozen=True)
class KubeRayOperatorArgs:
    config: KubeRayConfig
    provider: k8s.Provider
    # The system node group (the operator's pods land there) and the add-ons pods need (CNI, DNS).
    depends_on: Sequence[pulumi.Resource] = ()


class KubeRayOperator(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    crds: dict[str, k8s.yaml.v2.ConfigFile]

    def __init__(self, name: str, args: KubeRayOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-pd-eks:index:KubeRayOperator", name, None, opts)
        self.crds = {
            crd: k8s.yaml.v2.ConfigFile(
                f"{name}-crd-{crd}",
                file=url,
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on)),
            )
            for crd, url in crd_urls(args.config.chart_version).items()
        }
        self.release = pinned_release(
            f"{name}-operator",
            KUBERAY_CHART,
            args.config.chart_version,
            NAMESPACE,
            operator_values(),
            pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[*args.depends_on, *self.crds.values()]
            ),
            create_namespace=True,
            skip_crds=True,
        )
        self.register_outputs({"status": self.release.status})
