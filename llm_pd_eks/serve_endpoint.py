"""The OpenAI-compatible endpoint: the RayService's `spec.serveService` and the URL it is reached at."""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from .config.serving import ServingConfig
from .serving_names import NAMESPACE, SERVE_PORT


def endpoint_annotations(public: bool) -> dict[str, str]:
    if not public:
        return {}
    # EKS's built-in service controller makes an NLB; the scheme is spelled out for the AWS Load
    # Balancer Controller too, should the cluster get one.
    return {
        "service.beta.kubernetes.io/aws-load-balancer-type": "nlb",
        "service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing",
    }


def serve_service(serving: ServingConfig) -> dict[str, Any]:
    """`spec.serveService`: KubeRay creates this Service and pins its selector to the cluster that
    serves (`ray.io/cluster: <active>`, `ray.io/serve: "true"`), switching it only once a new cluster
    is ready; name, type and annotations are ours, the `serve` port is merged in by KubeRay."""
    public = serving.public_endpoint
    spec: dict[str, Any] = {
        "type": "LoadBalancer" if public else "ClusterIP",
        "ports": [{"name": "serve", "port": SERVE_PORT, "targetPort": SERVE_PORT, "protocol": "TCP"}],
    }
    if public:
        # The AWS cloud provider admits only these CIDRs to the NLB's targets; with none it admits
        # 0.0.0.0/0 (k8s.io/cloud-provider service/helpers.GetLoadBalancerSourceRanges, read by
        # cloud-provider-aws's EnsureLoadBalancer). The config requires them with publicEndpoint.
        spec["loadBalancerSourceRanges"] = list(serving.endpoint_source_ranges)
    return {
        "metadata": {
            "name": serving.endpoint_name,
            "annotations": {**endpoint_annotations(public), **serving.endpoint_annotations},
        },
        "spec": spec,
    }


def endpoint_url(
    name: str,
    serving: ServingConfig,
    namespace: pulumi.Output[str],
    ray_service: k8s.apiextensions.CustomResource,
    opts: pulumi.ResourceOptions,
) -> pulumi.Output[Optional[str]]:
    """The OpenAI base URL: the NLB's hostname when public, the in-cluster DNS name otherwise."""
    service_name = serving.endpoint_name
    if not serving.public_endpoint:
        return pulumi.Output.from_input(f"http://{service_name}.{NAMESPACE}.svc.cluster.local:{SERVE_PORT}/v1")

    # KubeRay creates the Service once a cluster is ready, i.e. by the time the RayService is
    # (its metadata flows into the id, so the read waits for it and is skipped while unknown).
    metadata: pulumi.Output[Any] = ray_service.metadata  # type: ignore[attr-defined]  # set dynamically
    service_id = pulumi.Output.all(namespace, metadata).apply(lambda parts: f"{parts[0]}/{service_name}")
    service = k8s.core.v1.Service.get(f"{name}-endpoint", service_id, opts=opts)

    def from_status(status: Any) -> Optional[str]:
        ingress = _field(_field(status, "load_balancer"), "ingress") or []
        host = (_field(ingress[0], "hostname") or _field(ingress[0], "ip")) if ingress else None
        return f"http://{host}:{SERVE_PORT}/v1" if host else None

    return service.status.apply(from_status)


def _field(obj: Any, key: str) -> Any:
    """A field of a typed output object or of a plain dict (mocks hand back either)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)
