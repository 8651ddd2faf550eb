"""The OpenAI-compatible endpoint: the RayService's `spec.serveService`, the in-place patch of the fields
KubeRay never changes on a live Service, and the URL it is reached at.

KubeRay 1.7 creates the endpoint Service from `spec.serveService` once and afterwards copies only its
`spec`, and only when its selector switches to a new cluster (llm_pd_eks/rollout_rule.py). A change of
the fields a user sets here (`serving.endpointAnnotations`, `endpointSourceRanges`, `publicEndpoint`)
is therefore also applied to the live Service by a server-side apply patch (pulumi-kubernetes
`ServicePatch`, field manager of its own, forced on conflicts: the program is the authority for these
fields): narrowing the source ranges is an update of the same Service and NLB, no new Ray cluster, no
new hostname. The RayService keeps the same values in `spec.serveService`, so a later cluster switch
copies what the patch set. The cloud provider carries new source ranges to the NLB's security group in
place; an annotation it reads only when it creates a load balancer (the scheme, for one) needs a new
one, as it would anywhere.
"""

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


# pulumi-kubernetes: take the fields over from the manager that last wrote them (KubeRay's create).
PATCH_FORCE_ANNOTATION = {"pulumi.com/patchForce": "true"}


def endpoint_patch_fields(serving: ServingConfig) -> dict[str, Any]:
    """What the patch sets on the live Service: the annotations, the type and the source ranges of
    `spec.serveService` (rollout_rule.py ENDPOINT_PATCHED_PATHS names the same three)."""
    service = serve_service(serving)
    spec = {"type": service["spec"]["type"]}
    if "loadBalancerSourceRanges" in service["spec"]:
        spec["loadBalancerSourceRanges"] = list(service["spec"]["loadBalancerSourceRanges"])
    return {"annotations": dict(service["metadata"]["annotations"]), "spec": spec}


def endpoint_patch(
    name: str,
    serving: ServingConfig,
    namespace: pulumi.Output[str],
    ray_service: pulumi.Resource,
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.ServicePatch:
    """The server-side apply patch of the Service KubeRay made (after the RayService is Ready, when it exists)."""
    fields = endpoint_patch_fields(serving)
    return k8s.core.v1.ServicePatch(
        f"{name}-endpoint-fields",
        metadata=k8s.meta.v1.ObjectMetaPatchArgs(
            name=serving.endpoint_name,
            namespace=namespace,
            annotations={**fields["annotations"], **PATCH_FORCE_ANNOTATION},
        ),
        spec=k8s.core.v1.ServiceSpecPatchArgs(
            type=fields["spec"]["type"],
            load_balancer_source_ranges=fields["spec"].get("loadBalancerSourceRanges"),
        ),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[ray_service])),
    )


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
