"""The serving image: AWS's Ray LLM Deep Learning Container, and what it carries (one place).

Read from aws/deep-learning-containers at commit e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0
(2026-08-21, "ray-serve-llm: add ray-llm image variant"):
- .github/config/image/ray-llm/ec2-gpu.yml: `prod_image: "ray:serve-llm-cuda"`, framework_version
  2.57.0, python 3.13.12, cuda_version 13.0.2, vllm_version 0.25.1, dlc_major/minor_version 1/0,
  `release.public_registry: true`;
- docker/ray_llm/Dockerfile.cuda: `EFA_VERSION=1.47.0` (the EFA installer, libfabric with the `efa`
  provider), `ENV FI_PROVIDER=efa`, an entrypoint that lets KubeRay's `ray start` run unmodified;
- docker/ray_llm/pyproject.toml and uv.lock: ray[default,serve,llm]==2.57.0, vllm==0.25.1,
  nixl 1.3.0 (nixl-cu13 1.3.0; nixl-cu12 overridden out), huggingface-hub 1.27.0, hf-xet 1.6.0.
- test/ray-llm/eks-multi-node/rayservice.yml: the DLC's own KubeRay test (settings mirrored in
  llm_pd_eks/ray_service.py: FI_EFA_FORK_SAFE, VLLM_HOST_IP, no privileged securityContext).
The image lives on public ECR as `public.ecr.aws/deep-learning-containers/ray:<tag>`. The tag is
not written in the repository: .github/actions/generate-release-spec/generate_release_spec.sh hands
the release system `prod_image` (the floating `serve-llm-cuda`) and the metadata, and the versioned tag
is applied outside the repository. Every AL2023 DLC release the repository records is tagged
`<prefix>-v<dlc_major>.<dlc_minor>` (docs/ray/changelog/index.md: `serve-ml-cuda-v1.4` for the Ray
Serve DLC with dlc_major/minor 1/4 in .github/config/image/ray/ec2-gpu.yml; README.md release
highlights: `server-cuda-v2.3`, `omni-cuda-v1.5`), so this image's 1/0 is `serve-llm-cuda-v1.0`:
inferred from that convention, not read from a release record. At the commit read, ec2-gpu.yml still
has `release: false`, and the published page https://aws.github.io/deep-learning-containers/ray-llm/
(newer than that commit) lists only the floating `serve-llm-cuda` and says it carries Ray 2.58.0 and
vLLM 0.26.0: which versioned tag carries the Ray 2.57.0 / vLLM 0.25.1 build, and its digest, could not
be checked offline.
"""

from __future__ import annotations

DLC_REGISTRY = "public.ecr.aws/deep-learning-containers/ray"
DLC_TAG = "serve-llm-cuda-v1.0"
DLC_IMAGE = f"{DLC_REGISTRY}:{DLC_TAG}"

DLC_RAY_VERSION = "2.57.0"
DLC_VLLM_VERSION = "0.25.1"
DLC_NIXL_VERSION = "1.3.0"
DLC_EFA_INSTALLER_VERSION = "1.47.0"
DLC_CUDA_VERSION = "13.0.2"
DLC_PYTHON_VERSION = "3.13"


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
