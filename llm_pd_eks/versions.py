"""Every version the stacks deploy and the tests judge by, in one place.

The serving image is AWS's Ray LLM Deep Learning Container as RELEASED, read at the release's own
record in aws/deep-learning-containers:

- docs/ray-llm/changelog/index.md (commit 4645ac8f5974e07a0a156018c03315c6c5b2f036), "Ray LLM v1.0 —
  2026-08-31": tags `serve-llm-cuda` · `serve-llm-cuda-v1` · `serve-llm-cuda-v1.0` ·
  `serve-llm-cuda-v1.0.0`; "Ray 2.58.0 and vLLM 0.26.0 on PyTorch 2.11.0, CUDA 13.0.2, Python 3.13";
  EFA support for multi-node networking. The stacks pin the exact patch tag `serve-llm-cuda-v1.0.0`:
  the floating `-v1`/`-v1.0` tags move with every patch. No record of a later patch (v1.0.1, v1.0.2)
  could be read: the changelog has only v1.0, and no image config or release note names another.
- docs/ray-llm/index.md (commit e868478a543192148f8f24a15b61e9a55467355e), "What's Included": Ray 2.58.0
  with the default, serve and llm extras, vLLM 0.26.0, PyTorch 2.11.0, CUDA 13.0.2, Python 3.13 in
  /opt/venv, EFA with the AWS NCCL OFI plugin, `FI_PROVIDER=efa` set in the image.
- docker/ray_llm/Dockerfile.cuda (commit 140b5392c6d04fd030bf41df59078a4bb8215464, the build whose ARGs
  are FRAMEWORK_VERSION=2.58.0 / VLLM_VERSION=0.26.0): `EFA_VERSION=1.49.0`, the EFA installer
  (libfabric with the `efa` provider) its install_efa step runs.
- NIXL 1.3.1 (nixl and nixl-cu13): the ray-2.58.0 wheel's METADATA pins them for the `llm` extra
  the image installs (`Requires-Dist: nixl==1.3.1; extra == "llm"`, `nixl-cu13==1.3.1`, and
  `vllm[audio]==0.26.0`); docker/ray_llm/pyproject.toml overrides nixl-cu12 out. The real run on an
  H200 (llm_pd_eks_sizing/realrun/data/2026-12-02T1552Z/run.json) ran nixl 1.3.1 with Ray 2.58.0 / vLLM 0.26.0.
- test/ray-llm/eks-multi-node/rayservice.yml: the DLC's own KubeRay test (settings mirrored in
  llm_pd_eks/ray_worker_pod.py: FI_EFA_FORK_SAFE, VLLM_HOST_IP, no privileged securityContext).

The image lives on ECR Public, `public.ecr.aws/deep-learning-containers/ray:<tag>`. Its digest is not
written in any record that can be read offline: `make resolve-image STACK=<stack>`
(llm_pd_eks_tools/ops/resolve_image.py) reads it from the registry and pins the stack file to
`<repo>:<tag>@sha256:<digest>`; set `DLC_DIGEST` below to the same value so every copy agrees
(tests/stack/test_versions_agree.py). docs/serving-image.md says how to bump all of this.

Charts, each at its release (the values or CRDs vendored under tests/data/, each with a SOURCE):
- kuberay-operator 1.7.0 (ray-project/kuberay tag v1.7.0; operator image v1.7.0, the chart's
  appVersion): tests/data/kuberay/SOURCE;
- cluster-autoscaler 9.59.0 (kubernetes/autoscaler tag cluster-autoscaler-chart-9.59.0):
  tests/data/cluster-autoscaler/SOURCE;
- aws-efa-k8s-device-plugin v0.5.30 (aws/eks-charts, Chart.yaml version v0.5.30, appVersion v0.5.20):
  tests/data/eks-charts/SOURCE;
- nvidia-device-plugin 0.20.0 (https://nvidia.github.io/k8s-device-plugin index);
- kube-prometheus-stack 88.5.3 (prometheus-community/helm-charts tag kube-prometheus-stack-88.5.3):
  tests/data/kube-prometheus-stack/SOURCE;
- dcgm-exporter 4.8.2 (https://nvidia.github.io/dcgm-exporter/helm-charts index).
"""

from __future__ import annotations

import re
from typing import Optional

DLC_REGISTRY = "public.ecr.aws/deep-learning-containers/ray"
DLC_TAG = "serve-llm-cuda-v1.0.0"
# sha256:<64 hex> of the tag's manifest (list) once resolved (`make resolve-image`); None until then.
DLC_DIGEST: Optional[str] = None

DLC_RAY_VERSION = "2.58.0"
DLC_VLLM_VERSION = "0.26.0"
DLC_TORCH_VERSION = "2.11.0"
DLC_NIXL_VERSION = "1.3.1"
DLC_EFA_INSTALLER_VERSION = "1.49.0"
DLC_CUDA_VERSION = "13.0.2"
DLC_PYTHON_VERSION = "3.13"

KUBERAY_VERSION = "1.7.0"
KUBERAY_CHART_VERSION = KUBERAY_VERSION  # the chart is released with the operator, same tag
CLUSTER_AUTOSCALER_CHART_VERSION = "9.59.0"
NVIDIA_DEVICE_PLUGIN_CHART_VERSION = "0.20.0"
EFA_DEVICE_PLUGIN_CHART_VERSION = "v0.5.30"
KUBE_PROMETHEUS_STACK_CHART_VERSION = "88.5.3"
DCGM_EXPORTER_CHART_VERSION = "4.8.2"

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def image_reference(repository: str, tag: Optional[str], digest: Optional[str]) -> str:
    """`repository[:tag][@digest]`, the reference form a container runtime pulls."""
    return repository + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


def minor(version: str) -> str:
    """'1.7.0' -> '1.7'."""
    return ".".join(version.split(".")[:2])


DLC_IMAGE_TAG = image_reference(DLC_REGISTRY, DLC_TAG, None)
DLC_IMAGE = image_reference(DLC_REGISTRY, DLC_TAG, DLC_DIGEST)
KUBERAY_MINOR = minor(KUBERAY_VERSION)

# --- nodes: the EKS-optimized AMI release every managed node group names ------------------------
#
# Node groups name their Kubernetes version and AMI release (`version`, `release_version`) instead of
# taking whatever EKS considers latest when a group is created, so the nodes change only when this
# table does, and then as a previewed cut-over (llm_pd_eks/node_common.py `keyed_node_group_name`).
# One release for every minor: awslabs/amazon-eks-ami CHANGELOG.md, entry "AMI Release v20260714"
# (read at tag v20260724, whose CHANGELOG opens with it), "Release version" column, the same for all
# five AL2023 AMI types of a minor (AL2023_x86_64_NVIDIA for the GPU group, AL2023_x86_64_STANDARD for
# the system group). Its AL2023_x86_64_NVIDIA package table lists `kmod-nvidia-latest-dkms`
# 580.159.03-1.amzn2023 for every minor 1.30-1.36: the R580 branch, the first with CUDA 13.0 support
# (the serving image's CUDA, DLC_CUDA_VERSION above); tests/data/eks-ami holds the excerpt.
NODE_AMI_RELEASE = "v20260714"
NODE_AMI_RELEASE_VERSIONS = {
    "1.30": "1.30.14-20260714",
    "1.31": "1.31.14-20260714",
    "1.32": "1.32.13-20260714",
    "1.33": "1.33.13-20260714",
    "1.34": "1.34.9-20260714",
    "1.35": "1.35.6-20260714",
    "1.36": "1.36.2-20260714",
}
NODE_NVIDIA_DRIVER = "580.159.03"
CUDA_13_MIN_DRIVER_BRANCH = 580  # NVIDIA's CUDA 13.0 release notes: driver >= 580 on Linux


def node_ami_release_version(kubernetes_version: str) -> str:
    """The pinned AMI release (`<kubernetes patch>-<date>`) of a Kubernetes minor's node groups."""
    return NODE_AMI_RELEASE_VERSIONS[kubernetes_version]


# --- EKS add-ons: one version per add-on and Kubernetes minor -------------------------------------
#
# Every `aws.eks.Addon` names its version: without one EKS keeps the version it installed at creation,
# and a control-plane upgrade leaves vpc-cni, kube-proxy, coredns and the EBS CSI driver behind it. The
# table moves with the AMI table above; a minor the table lacks is refused by the config, and preflight
# asks EKS (DescribeAddonVersions) whether each pin is offered for the stack's minor before `up`.
# What each pin was checked against (read, not run against an account):
# - kube-proxy: the EKS User Guide's "kube-proxy versions" table (managing-kube-proxy.md at
#   docs.amazonaws.cn/zh_cn/eks/latest/userguide/, "latest version of the Amazon EKS add-on type"):
#   1.35 v1.35.3-eksbuild.2, 1.34 v1.34.6-eksbuild.2.
# - coredns: the EKS User Guide's "CoreDNS versions" table (managing-coredns.md at
#   docs.amazonaws.cn/en_us/eks/latest/userguide/): 1.35 v1.14.2-eksbuild.4, 1.34 v1.13.2-eksbuild.7.
# - vpc-cni and aws-ebs-csi-driver: no User Guide table could be read for 1.35; the versions are those a
#   public Terraform configuration generated with `aws eks describe-addon-versions` for 1.35 and 1.34
#   (`hack/versions <minor>` output: vpc-cni v1.21.1-eksbuild.3 and aws-ebs-csi-driver v1.56.0-eksbuild.1
#   for 1.35; vpc-cni v1.20.5-eksbuild.1 and aws-ebs-csi-driver v1.53.0-eksbuild.1 for 1.34). Preflight's
#   `addon-versions` item confirms them against the account's EKS before an `up`.
# - eks-node-monitoring-agent: the version a public Terraform configuration pins (v1.4.0-eksbuild.2); the
#   agent reports the GPU conditions (NVIDIA XID and NVLink errors, `AcceleratedHardwareReady`) node auto
#   repair acts on (EKS User Guide, "Enable node auto repair and investigate node health issues",
#   awsdocs/amazon-eks-user-guide latest/ug/nodes/node-health.adoc at 4d52b4d0); preflight confirms it.
EKS_ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "1.34": {
        "vpc-cni": "v1.20.5-eksbuild.1",
        "kube-proxy": "v1.34.6-eksbuild.2",
        "coredns": "v1.13.2-eksbuild.7",
        "aws-ebs-csi-driver": "v1.53.0-eksbuild.1",
        "eks-node-monitoring-agent": "v1.4.0-eksbuild.2",
    },
    "1.35": {
        "vpc-cni": "v1.21.1-eksbuild.3",
        "kube-proxy": "v1.35.3-eksbuild.2",
        "coredns": "v1.14.2-eksbuild.4",
        "aws-ebs-csi-driver": "v1.56.0-eksbuild.1",
        "eks-node-monitoring-agent": "v1.4.0-eksbuild.2",
    },
}


def eks_addon_version(kubernetes_version: str, addon: str) -> str:
    """The pinned version of an EKS add-on on a Kubernetes minor (the config refuses a minor without pins)."""
    return EKS_ADDON_VERSIONS[kubernetes_version][addon]


def ami_release_date(release_version: str) -> str:
    """`1.35.6-20260714` (or `v20260714`) -> `20260714`: the AMI build date releases are ordered by."""
    return release_version.rsplit("-", 1)[-1].lstrip("v")
