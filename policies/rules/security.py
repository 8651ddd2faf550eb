"""Exposure rules: no literal secrets in pod specs, no internet-facing serve endpoint, no EKS API
endpoint open to the whole internet.

A literal env value ends up in the Kubernetes object, in `kubectl get -o yaml` and in Pulumi
state diffs; secrets belong in a Kubernetes Secret referenced through `valueFrom.secretKeyRef`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Iterator

from pulumi_policy import (
    ReportViolation,
    ResourceValidationArgs,
)

from .common import (
    EKS_CLUSTER,
    EKS_COMPONENT_CLUSTER,
    K8S_INGRESS,
    K8S_SERVICE,
    RAY_SERVICE,
    config_with_defaults,
    dig,
    is_unknown,
    known_list,
    name_of,
    plain,
    resource_policy,
    truthy,
)
from .ray_serving import ServeConfigError, serve_config, walk

# -- literal secrets ---------------------------------------------------------------------------
SECRET_CONFIG: dict[str, dict[str, Any]] = {
    "secretNamePattern": {
        "type": "string",
        "description": "regex (case-insensitive) for env names whose literal values count as secrets",
        "default": r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)($|_)",
    },
    "secretValuePatterns": {
        "type": "array",
        "items": {"type": "string"},
        "description": "regexes for values that are secrets whatever the env name (token formats)",
        "default": [
            r"\bhf_[A-Za-z0-9]{30,}",  # Hugging Face token
            r"\b(AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key id
            r"\bgh[pousr]_[A-Za-z0-9]{30,}",  # GitHub token
            r"\bsk-[A-Za-z0-9_-]{20,}",  # OpenAI-style API key
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
        ],
    },
    "allowedEnvNames": {
        "type": "array",
        "items": {"type": "string"},
        "description": "env names never treated as secrets",
        "default": [],
    },
}

_CONTAINER_KEYS = ("containers", "initContainers", "ephemeralContainers")


def containers(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every container spec anywhere in a Kubernetes object (pods, templates, Ray groups)."""
    if isinstance(node, dict):
        for key, value in node.items():
            label = f"{path}.{key}" if path else key
            if key in _CONTAINER_KEYS and isinstance(value, list):
                for i, c in enumerate(value):
                    if isinstance(c, dict):
                        yield f"{label}[{c.get('name', i)}]", c
            else:
                yield from containers(value, label)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from containers(value, f"{path}[{i}]")


def _literal_secrets(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not args.resource_type.startswith("kubernetes:"):
        return
    cfg = config_with_defaults(args, SECRET_CONFIG)
    name_re = re.compile(cfg["secretNamePattern"], re.IGNORECASE)
    value_res = [re.compile(p) for p in cfg["secretValuePatterns"]]
    allowed = set(cfg["allowedEnvNames"])

    def secret_like(name: str, value: Any) -> bool:
        if name in allowed or not isinstance(value, str) or not value or is_unknown(value):
            return False
        return bool(name_re.search(name)) or any(r.search(value) for r in value_res)

    props = plain(args.props)
    found: list[str] = []
    for where, container in containers(props):
        for item in known_list(dig(container, "env")) or []:
            if isinstance(item, dict) and secret_like(str(item.get("name", "")), item.get("value")):
                found.append(f"{where}.env {item['name']}")
    if args.resource_type == RAY_SERVICE:  # runtime_env.env_vars inside the serve config
        try:
            config = serve_config(dig(props, "spec"))
        except ServeConfigError:
            config = None  # nixl-libfabric-backend reports unparsable serve configs
        for path, node in walk(config) if isinstance(config, (dict, list)) else ():
            if path.endswith("env_vars") and isinstance(node, dict):
                found += [f"serveConfigV2 {path} {k}" for k, v in node.items() if secret_like(str(k), v)]
    if found:
        report(
            f"{name_of(args)} carries literal secret-looking values: "
            f"{', '.join(found)}. Fix: put them in a Kubernetes Secret (from `pulumi config set --secret`) "
            f"and reference it with env valueFrom.secretKeyRef."
        )


no_literal_secrets = resource_policy(
    name="no-literal-secrets-in-pods",
    description="Pod specs carry no literal secret-looking env values; secrets come from secretKeyRef.",
    validate=_literal_secrets,
    config=SECRET_CONFIG,
)

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
    return f"type LoadBalancer without {_SCHEME}: internal"


def _internet_facing(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in (K8S_SERVICE, K8S_INGRESS, RAY_SERVICE):
        return
    if config_with_defaults(args, EXPOSURE_CONFIG)["allowInternetFacing"]:
        return
    props = plain(args.props)
    why = None
    if args.resource_type == K8S_SERVICE:
        why = _service_exposure(props)
    elif args.resource_type == RAY_SERVICE:
        serve_service = dig(props, "spec", "serveService")
        why = _service_exposure(serve_service) if isinstance(serve_service, dict) else None
        why = why and f"spec.serveService is {why}"
    else:
        scheme = dig(props, "metadata", "annotations", _ALB_SCHEME)
        why = f"annotation {_ALB_SCHEME}: internet-facing" if scheme == "internet-facing" else None
    if why:
        report(
            f"{name_of(args)} is internet-facing ({why}). The serve "
            f"endpoint has no authentication in front of it. Fix: annotate "
            f"{_SCHEME}: internal (or {_ALB_SCHEME}: internal), or set allowInternetFacing in the "
            f"policy config if exposure is intended."
        )


not_internet_facing = resource_policy(
    name="serve-endpoint-not-internet-facing",
    description="Load balancers in front of the serve endpoint are internal unless the policy config allows it.",
    validate=_internet_facing,
    config=EXPOSURE_CONFIG,
)

# -- EKS public endpoint -----------------------------------------------------------------------
ENDPOINT_CONFIG: dict[str, dict[str, Any]] = {
    "allowedPublicAccessCidrs": {
        "type": "array",
        "items": {"type": "string"},
        "description": (
            "CIDRs the public API endpoint may be opened to. Empty: any range except the whole "
            "internet (/0). Listing 0.0.0.0/0 here allows an open endpoint."
        ),
        "default": [],
    },
}


def cidrs_not_allowed(cidrs: list[str], allowed: list[str]) -> list[str]:
    """The entries of `cidrs` the config does not allow (unparsable ones included)."""
    allowed_nets: list[Any] = []
    for a in allowed:
        try:
            allowed_nets.append(ipaddress.ip_network(a, strict=False))
        except ValueError:
            continue
    bad = []
    for cidr in cidrs:
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            bad.append(cidr)
            continue
        if allowed_nets:
            ok = any(net.version == a.version and net.subnet_of(a) for a in allowed_nets)
        else:
            ok = net.prefixlen > 0
        if not ok:
            bad.append(cidr)
    return bad


def _public_endpoint(args: ResourceValidationArgs, report: ReportViolation) -> None:
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
    allowed = list(config_with_defaults(args, ENDPOINT_CONFIG)["allowedPublicAccessCidrs"])
    bad = cidrs_not_allowed(effective, allowed)
    if bad:
        shown = f"{where}publicAccessCidrs {cidrs}" if cidrs else f"no {where}publicAccessCidrs (AWS default 0.0.0.0/0)"
        rule = f"inside {allowed}" if allowed else "narrower than the whole internet"
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

POLICIES = [no_literal_secrets, not_internet_facing, eks_endpoint_restricted]
