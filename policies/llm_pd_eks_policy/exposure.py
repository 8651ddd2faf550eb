"""Exposure rules: no internet-facing serve endpoint, no EKS API endpoint open to the whole internet.

The serve endpoint and the Ray head's job API have no authentication in front of them, so a load
balancer that faces the internet runs whatever anyone sends; an EKS API endpoint open to 0.0.0.0/0
leaves the cluster's credentials as the only barrier.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from pulumi_policy import (
    ReportViolation,
    ResourceValidationArgs,
)

from .common import (
    EKS_CLUSTER,
    EKS_COMPONENT_CLUSTER,
    K8S_INGRESS,
    K8S_SERVICE,
    K8S_SERVICE_PATCH,
    config_with_defaults,
    dig,
    is_unknown,
    known_list,
    name_of,
    plain,
    resource_policy,
    truthy,
)
from .ray_serving import ray_objects
from .workloads import RAY_CLUSTER_SPEC, Workload, embedded

# -- internet-facing serve endpoint ------------------------------------------------------------
EXPOSURE_CONFIG: dict[str, dict[str, Any]] = {
    "allowInternetFacing": {
        "type": "boolean",
        "description": "allow LoadBalancer Services / Ingresses that are internet-facing",
        "default": False,
    },
}
_SCHEME = "service.beta.kubernetes.io/aws-load-balancer-scheme"
_LEGACY_INTERNAL = "service.beta.kubernetes.io/aws-load-balancer-internal"
_ALB_SCHEME = "alb.ingress.kubernetes.io/scheme"
# Services of this class belong to the AWS Load Balancer Controller, whose NLBs default to the
# `internal` scheme (its docs, "Network Load Balancer": scheme annotation default internal).
_LBC_CLASS_PREFIX = "service.k8s.aws/"


def _service_exposure(service: Any) -> Any:
    """Why a Service object is internet-facing; None if it is not or cannot be told yet."""
    if dig(service, "spec", "type") != "LoadBalancer":  # not one, or not known yet
        return None
    annotations = dig(service, "metadata", "annotations")
    if is_unknown(annotations):
        return None
    annotations = annotations or {}
    scheme = annotations.get(_SCHEME)
    if is_unknown(scheme) or is_unknown(annotations.get(_LEGACY_INTERNAL)):
        return None
    if scheme == "internal" or (scheme is None and truthy(annotations.get(_LEGACY_INTERNAL))):
        return None
    if scheme == "internet-facing":
        return f"annotation {_SCHEME}: internet-facing"
    lb_class = dig(service, "spec", "loadBalancerClass")
    if is_unknown(lb_class) or (isinstance(lb_class, str) and lb_class.startswith(_LBC_CLASS_PREFIX)):
        return None  # the AWS Load Balancer Controller's NLB: internal unless the scheme says otherwise
    return f"type LoadBalancer without {_SCHEME}: internal"


INGRESS_CLASS_PARAMS = "kubernetes:elbv2.k8s.aws/v1beta1:IngressClassParams"
LB_CONFIGURATION = "kubernetes:gateway.k8s.aws/v1beta1:LoadBalancerConfiguration"
GATEWAYS = ("kubernetes:gateway.networking.k8s.io/v1:Gateway", "kubernetes:gateway.networking.k8s.io/v1beta1:Gateway")


HELM_TYPES = ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v3:Chart", "kubernetes:helm.sh/v4:Chart")
# Charts whose values make a Service: where its values live, and the chart's default type
# (ingress-nginx charts/ingress-nginx/values.yaml `controller.service` {enabled: true, type:
# LoadBalancer, annotations: {}, external.enabled: true}; traefik-helm-chart traefik/values.yaml
# `service` {enabled: true, type: LoadBalancer, annotations: {}}; kuberay v1.7.0
# helm-chart/kuberay-operator/values.yaml `service.type: ClusterIP`, used as-is by templates/service.yaml).
CHART_SERVICES: dict[str, tuple[tuple[str, ...], str]] = {
    "ingress-nginx": (("controller", "service"), "LoadBalancer"),
    "traefik": (("service",), "LoadBalancer"),
    "kuberay-operator": (("service",), "ClusterIP"),
}
# aws-load-balancer-controller values.yaml: `ingressClassParams.spec` becomes the IngressClassParams
# of its `alb` class, whose `scheme` overrides every Ingress of the class.
LBC_CHART = "aws-load-balancer-controller"


def chart_name(props: Any) -> str:
    """A Helm chart's name from `chart` ("repo/name", "oci://host/path/name", "./charts/name", "name-1.2.3.tgz")."""
    chart = dig(props, "chart")
    if not isinstance(chart, str) or is_unknown(chart):
        return ""
    name = chart.rstrip("/").split("/")[-1]
    name = re.sub(r"\.tgz$", "", name)
    return re.sub(r"-v?\d+\.\d+\.\d+.*$", "", name)


def _chart_exposure(props: Any) -> list[str]:
    """Why a Helm release's values expose a load balancer to the internet (empty: they do not, or unknown)."""
    name = chart_name(props)
    values = dig(props, "values")
    if is_unknown(values):
        return []
    values = values if isinstance(values, dict) else {}
    why: list[str] = []
    if name in CHART_SERVICES or name == LBC_CHART:
        files = dig(props, "valueYamlFiles")
        if files and not is_unknown(files):
            why.append(
                f"chart {name!r} takes values from valueYamlFiles, which the pack cannot read (pass them in `values`)"
            )
    if name in CHART_SERVICES:
        path, default_type = CHART_SERVICES[name]
        service = dig(values, *path)
        service = service if isinstance(service, dict) else {}
        enabled = [truthy(service.get("enabled")), truthy(dig(service, "external", "enabled"))]
        if name == "kuberay-operator" or all(e is not False for e in enabled):
            stype = service.get("type", default_type)
            shown = {"spec": {"type": stype}, "metadata": {"annotations": service.get("annotations") or {}}}
            reason = _service_exposure(shown)
            if reason:
                why.append(
                    f"chart {name!r} values {'.'.join(path)}: {reason}"
                    + (" (the chart's default type)" if "type" not in service else "")
                )
    if name == LBC_CHART and dig(values, "ingressClassParams", "spec", "scheme") == "internet-facing":
        why.append(f"chart {name!r} values ingressClassParams.spec.scheme: internet-facing")
    return why


def _is_service(node: dict) -> bool:
    return node.get("kind") == "Service" and node.get("apiVersion") == "v1"


def _exposure(resource_type: str, props: Any) -> list[str]:
    """Why a Kubernetes object opens the endpoint to the internet (empty: it does not, or unknown yet).

    AWS Load Balancer Controller: Ingress and LoadBalancerConfiguration default to `internal`
    (annotation / spec.scheme); IngressClassParams `spec.scheme` overrides every Ingress of its
    class. A LoadBalancer Service without the scheme annotation is internet-facing under the legacy
    in-tree controller, so it counts as exposed."""
    why = _own_exposure(resource_type, props)
    if resource_type in HELM_TYPES:
        why += _chart_exposure(props)
    if resource_type not in (K8S_SERVICE, K8S_SERVICE_PATCH):  # Services in ConfigGroups, Helm values, manifests
        why += _embedded_service_exposure(props)
    for ray in ray_objects(resource_type, props):
        why += _ray_exposure(ray)
    return why


def _own_exposure(resource_type: str, props: Any) -> list[str]:
    """What the object itself says about its load balancer's scheme."""
    if resource_type in (K8S_SERVICE, K8S_SERVICE_PATCH):  # a patch sets what the Service becomes
        return [w for w in [_service_exposure(props)] if w]
    if resource_type == K8S_INGRESS:
        if dig(props, "metadata", "annotations", _ALB_SCHEME) == "internet-facing":
            return [f"annotation {_ALB_SCHEME}: internet-facing"]
    elif resource_type in (INGRESS_CLASS_PARAMS, LB_CONFIGURATION):
        if dig(props, "spec", "scheme") == "internet-facing":
            return ["spec.scheme: internet-facing"]
    elif resource_type in GATEWAYS:
        annotations = dig(props, "spec", "infrastructure", "annotations")
        if isinstance(annotations, dict) and annotations.get(_SCHEME) == "internet-facing":
            return [f"spec.infrastructure.annotations {_SCHEME}: internet-facing"]
    return []


def _embedded_service_exposure(props: Any) -> list[str]:
    """Services carried inside another object (a ConfigGroup, Helm values, a manifest)."""
    why = []
    for path, service in embedded(props, _is_service):
        reason = _service_exposure(service)
        if reason:
            why.append(f"Service at {path or '(root)'} is {reason}")
    return why


def _ray_exposure(ray: Workload) -> list[str]:
    """The Services KubeRay makes for a Ray object. The head Service comes from
    headGroupSpec.serviceType (headService overrides it): it carries the dashboard and the job
    submission API (8265), which run any code sent to them."""
    why = []
    head = dig(ray.obj, *RAY_CLUSTER_SPEC[ray.kind], "headGroupSpec")
    head_type = dig(head, "headService", "spec", "type")
    head_service = {
        "spec": {"type": head_type if head_type is not None else dig(head, "serviceType")},
        "metadata": {"annotations": dig(head, "headService", "metadata", "annotations") or {}},
    }
    reason = _service_exposure(head_service)
    if reason:
        why.append(f"{ray.label} head service (dashboard and job API, port 8265) is {reason}")
    if ray.kind == "RayService":
        serve_service = dig(ray.obj, "spec", "serveService")
        reason = _service_exposure(serve_service) if isinstance(serve_service, dict) else None
        if reason:
            why.append(f"{ray.label} spec.serveService is {reason}")
    return why


def _internet_facing(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not args.resource_type.startswith("kubernetes:"):
        return
    if config_with_defaults(args, EXPOSURE_CONFIG)["allowInternetFacing"]:
        return
    why = _exposure(args.resource_type, plain(args.props))
    if why:
        report(
            f"{name_of(args)} is internet-facing ({'; '.join(why)}). The serve "
            f"endpoint has no authentication in front of it. Fix: annotate "
            f"{_SCHEME}: internal (or {_ALB_SCHEME}: internal, spec.scheme: internal), or set "
            f"allowInternetFacing in the policy config if exposure is intended."
        )


not_internet_facing = resource_policy(
    name="serve-endpoint-not-internet-facing",
    description="Services, Ingresses, IngressClassParams, Gateways and LoadBalancerConfigurations are "
    "internal unless the policy config allows internet-facing.",
    validate=_internet_facing,
    config=EXPOSURE_CONFIG,
)

# -- EKS public endpoint -----------------------------------------------------------------------
ENDPOINT_CONFIG: dict[str, dict[str, Any]] = {
    "allowedPublicAccessCidrs": {
        "type": "array",
        "items": {"type": "string"},
        "description": (
            "CIDRs the public API endpoint may be opened to. Empty: any ranges whose union has no "
            "block wider than minPrefixLength. Listing 0.0.0.0/0 here allows an open endpoint."
        ),
        "default": [],
    },
    "minPrefixLength": {
        "type": "integer",
        "minimum": 0,
        "maximum": 32,
        "description": "without an allow-list: the widest IPv4 block the union of public CIDRs may contain",
        "default": 8,
    },
    "minPrefixLengthIpv6": {
        "type": "integer",
        "minimum": 0,
        "maximum": 128,
        "description": "the same for IPv6",
        "default": 32,
    },
}


def cidrs_not_allowed(cidrs: list[str], allowed: list[str], min_prefix: int = 8, min_prefix_v6: int = 32) -> list[str]:
    """The entries of `cidrs` the config does not allow (unparsable ones included).

    Without an allow-list the ranges are judged together: `0.0.0.0/1` + `128.0.0.0/1` is the whole
    internet, so the union (collapsed) must not contain a range wider than /min_prefix."""
    allowed_nets: list[Any] = []
    for a in allowed:
        try:
            allowed_nets.append(ipaddress.ip_network(a, strict=False))
        except ValueError:
            continue
    bad: list[str] = []
    nets: list[Any] = []
    for cidr in cidrs:
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except (ValueError, TypeError):
            bad.append(str(cidr))
            continue
        if allowed_nets:
            if not any(net.version == a.version and net.subnet_of(a) for a in allowed_nets):
                bad.append(cidr)
        else:
            nets.append(net)
    for version, limit in ((4, min_prefix), (6, min_prefix_v6)):
        merged = list(ipaddress.collapse_addresses([n for n in nets if n.version == version]))
        wide = [m for m in merged if m.prefixlen < limit]
        for m in wide:
            parts = [str(n) for n in nets if n.version == version and n.subnet_of(m)]
            bad.append(str(m) if parts == [str(m)] else f"{' + '.join(parts)} = {m}")
    return bad


def _public_endpoint(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in (EKS_CLUSTER, EKS_COMPONENT_CLUSTER):
        return
    props = plain(args.props)
    if args.resource_type == EKS_COMPONENT_CLUSTER:
        public, cidrs, where = dig(props, "endpointPublicAccess"), dig(props, "publicAccessCidrs"), ""
    elif args.resource_type == EKS_CLUSTER:
        public = dig(props, "vpcConfig", "endpointPublicAccess")
        cidrs, where = dig(props, "vpcConfig", "publicAccessCidrs"), "vpcConfig."
    else:
        return
    if is_unknown(public) or is_unknown(cidrs):
        return
    if public is not None and truthy(public) is False:
        return  # private endpoint only
    cidrs = known_list(cidrs) or []
    if any(is_unknown(c) for c in cidrs):
        return
    effective = cidrs or ["0.0.0.0/0"]  # AWS opens a public endpoint to everyone when none are given
    cfg = config_with_defaults(args, ENDPOINT_CONFIG)
    allowed = list(cfg["allowedPublicAccessCidrs"])
    bad = cidrs_not_allowed(effective, allowed, int(cfg["minPrefixLength"]), int(cfg["minPrefixLengthIpv6"]))
    if bad:
        shown = f"{where}publicAccessCidrs {cidrs}" if cidrs else f"no {where}publicAccessCidrs (AWS default 0.0.0.0/0)"
        rule = f"inside {allowed}" if allowed else f"together no block wider than /{cfg['minPrefixLength']}"
        report(
            f"EKS cluster '{args.name}' has a public API endpoint with {shown}; {bad} not allowed (must be "
            f"{rule}). Fix: list only your office/VPN ranges in cluster.publicAccessCidrs, or set "
            f"endpointPublicAccess false; to allow it deliberately add the range to the policy config "
            f"allowedPublicAccessCidrs."
        )


eks_endpoint_restricted = resource_policy(
    name="eks-public-endpoint-restricted",
    description="The EKS public API endpoint is not open to 0.0.0.0/0 unless the policy config allows it.",
    validate=_public_endpoint,
    config=ENDPOINT_CONFIG,
)

POLICIES = [not_internet_facing, eks_endpoint_restricted]
