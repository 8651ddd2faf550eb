"""The Ray head group of the RayService: GCS, dashboard and the Serve controller, on the system nodes.

The head runs with `num-cpus: "0"` and `num-gpus: "0"`: Ray schedules nothing there that asks for a
CPU, so it hosts only the GCS and the Serve controller (a zero-CPU actor Serve pins to the head).
Serve's HTTP proxies (zero-CPU, one per node: proxy_location EveryNode) run on every node; the OpenAI
ingress replicas (one CPU each, at least two: llm_pd_eks/serve_limits.py) land on GPU workers' spare
CPUs. The prefix router's tree actor asks for no CPU and for Ray's head resource, so it runs here
(llm_pd_eks/runtime/prefix_router.py).

The head selects the system nodes by their role label, never a system node group by name: a system
node change (another instance type, AMI, Kubernetes version) replaces the system group, and a head
pinned to the old group's name would change the RayService's cluster spec, so KubeRay would build a
second Ray cluster, with two more GPU nodes, for a CPU-only change. Unpinned, the head stays on its node
until Pulumi deletes the old system group at the end of `up`, then restarts on a new system node, and
GCS fault tolerance (`serving.gcsFaultTolerance`, llm_pd_eks/gcs_store.py) keeps the Ray cluster and
its Serve replicas through the restart (the preview's cut-over plan says so, or says DOWN without it).
"""

from __future__ import annotations

from typing import Any

from .serving_names import APP_LABEL, RAY_SERVICE_NAME, SERVE_PORT
from .system_nodes import SYSTEM_LABELS

# Sized as the AWS Ray LLM DLC's own KubeRay test sizes its head (aws/deep-learning-containers
# test/ray-llm/eks-multi-node/rayservice.yml at e0ecedea6a: requests cpu 2 / memory 8Gi, limits cpu 4 /
# memory 16Gi). The head does more than the GCS: the Serve controller's application build task
# (`build_serve_application`, num_cpus=0, ray-2.58.0 python/ray/serve/_private/application_state.py)
# imports `ray.serve.llm:build_pd_openai_app`, and vLLM with it, and Ray's default scheduling keeps
# that zero-CPU task on the controller's node, the head. The requests are what the scheduler places
# on a system node; the limits leave that import room to burst. The pod is therefore Burstable
# (Kubernetes docs, Pod Quality of Service Classes: requests below limits), whatever KubeRay's
# Guaranteed-sized autoscaler sidecar (v1.7.0 pod.go BuildAutoscalerContainer) adds to it.
HEAD_RESOURCES = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "16Gi"}}


def head_group(image: str) -> dict[str, Any]:
    return {
        # No CPUs for Ray: nothing that asks for a CPU (ingress, engines) is scheduled on the head.
        "rayStartParams": {"num-cpus": "0", "num-gpus": "0", "dashboard-host": "0.0.0.0"},
        "template": {
            "metadata": {"labels": {APP_LABEL: RAY_SERVICE_NAME}},
            "spec": {
                "nodeSelector": dict(SYSTEM_LABELS),  # the role, not a group's name (module docstring)
                "containers": [
                    {
                        "name": "ray-head",
                        "image": image,
                        "resources": HEAD_RESOURCES,
                        "ports": [
                            {"name": "gcs-server", "containerPort": 6379},
                            {"name": "dashboard", "containerPort": 8265},
                            {"name": "client", "containerPort": 10001},
                            {"name": "serve", "containerPort": SERVE_PORT},
                        ],
                    }
                ],
            },
        },
    }
