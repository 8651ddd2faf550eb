"""Names every serving object shares: the namespace, the RayService, its roles, labels and port.

The RayService (llm_pd_eks/ray_service.py), its pods (llm_pd_eks/ray_head_pod.py,
llm_pd_eks/ray_worker_pod.py), its Serve application (llm_pd_eks/serve_app.py) and its endpoint
(llm_pd_eks/serve_endpoint.py) import them from here; so do the tools that talk to the running stack.
"""

from __future__ import annotations

from .versions import DLC_RAY_VERSION

# The Ray of the stacks' image (the AWS Ray LLM DLC, llm_pd_eks/versions.py); requirements-dev.txt
# pins the same for the schema tests (tests/stack/test_ray_service.py checks the two agree).
RAY_VERSION = DLC_RAY_VERSION
NAMESPACE = "llm-serving"
RAY_SERVICE_NAME = "llm-pd"
HF_SECRET_NAME = "hf-token"
HF_SECRET_KEY = "HF_TOKEN"
SERVE_PORT = 8000
ROLES = ("prefill", "decode")

ROLE_LABEL = "llm-pd-eks/role"  # prefill | decode, on worker pods (anti-affinity)
APP_LABEL = "llm-pd-eks/ray-service"  # every Ray pod of this RayService (PodDisruptionBudget selector)


def other_role(role: str) -> str:
    return ROLES[1 - ROLES.index(role)]


# The worker pods' Kubernetes service account when they read the weights from S3 (its IRSA role:
# llm_pd_eks/weights_access.py).
WORKER_SERVICE_ACCOUNT = "llm-pd-worker"
