"""The NVIDIA and AWS EFA device plugins: without them a pod cannot ask for `nvidia.com/gpu` or
`vpc.amazonaws.com/efa`, and the kubelet advertises neither.

Both are pinned Helm releases from their official repositories, run only on the GPU nodes
(`GPU_LABELS`) and tolerate the GPU taint those nodes carry. The NVIDIA chart's default node
affinity waits for Node Feature Discovery labels that EKS's NVIDIA AMI does not set; it is
replaced by an affinity on our own GPU node labels, or the plugin would never schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s

from .config.serving import DevicePluginsConfig
from .efa_gpu_nodes import GPU_LABELS, GPU_TOLERATION
from .helm import HelmChart, pinned_release

NVIDIA_CHART = HelmChart("nvidia-device-plugin", "https://nvidia.github.io/k8s-device-plugin")
EFA_CHART = HelmChart("aws-efa-k8s-device-plugin", "https://aws.github.io/eks-charts")
NAMESPACE = "kube-system"


def gpu_node_affinity() -> dict:
    """Required node affinity on every GPU label (a list value replaces a chart's default list)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": key, "operator": "In", "values": [value]} for key, value in GPU_LABELS.items()
                        ]
                    }
                ]
            }
        }
    }


def nvidia_values() -> dict:
    return {
        "nodeSelector": dict(GPU_LABELS),
        "affinity": gpu_node_affinity(),
        "tolerations": [GPU_TOLERATION],
    }


def efa_values() -> dict:
    return {
        "nodeSelector": dict(GPU_LABELS),
        "tolerations": [GPU_TOLERATION],
    }


@dataclass(frozen=True)
class DevicePluginsArgs:
    config: DevicePluginsConfig
    provider: k8s.Provider
    # The GPU node group: the plugins exist for those nodes, and the RayService that waits for
    # the plugins must thereby also wait for the nodes.
    gpu_node_group: pulumi.Resource
    depends_on: Sequence[pulumi.Resource] = ()  # e.g. the CNI add-on their pods need


class DevicePlugins(pulumi.ComponentResource):
    """`helm.v3.Release`s: custom resources whose chart, version and values a preview shows, and
    which wait until their DaemonSets are ready."""

    nvidia: k8s.helm.v3.Release
    efa: k8s.helm.v3.Release

    def __init__(self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llm-pd-eks:index:DevicePlugins", name, None, opts)
        child = pulumi.ResourceOptions(
            parent=self, provider=args.provider, depends_on=[args.gpu_node_group, *args.depends_on]
        )
        config = args.config
        self.nvidia = pinned_release(
            f"{name}-nvidia", NVIDIA_CHART, config.nvidia_chart_version, NAMESPACE, nvidia_values(), child
        )
        self.efa = pinned_release(f"{name}-efa", EFA_CHART, config.efa_chart_version, NAMESPACE, efa_values(), child)
        self.register_outputs({"nvidia": self.nvidia.status, "efa": self.efa.status})
