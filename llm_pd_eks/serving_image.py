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
The image lives on public ECR as `public.ecr.aws/deep-learning-containers/ray:<tag>`; the Ray Serve
DLC family tags each release `<variant>-v<major>.<minor>` (docs/ray/changelog: `serve-ml-cuda-v1.4`),
so this image's first release is `serve-llm-cuda-v1.0`. At the commit read, ec2-gpu.yml still has
`release: false`: that the tag is published, and its digest, could not be checked offline.
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
