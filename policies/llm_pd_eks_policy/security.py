"""Exposure rules: no literal secrets in pod specs, no internet-facing serve endpoint, no EKS API
endpoint open to the whole internet.

A literal env value ends up in the Kubernetes object, in `kubectl get -o yaml` and in Pulumi
state diffs; secrets belong in a Kubernetes Secret referenced through `valueFrom.secretKeyRef`.
"""

from __future__ import annotations

import base64
import binascii
import functools
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
    K8S_CONFIG_MAP,
    K8S_INGRESS,
    K8S_SECRET,
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
from .ray_serving import ServeConfigError, ray_objects, serve_config, walk
from .workloads import RAY_CLUSTER_SPEC, container_command, embedded, unreadable_settings

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
# Keys (any case, camelCase too) that end in a password's own name, not in a reference to one
# (`passwordKey`, `existingSecret` name where a secret is, and are left alone). Tokens and keys in
# free-form values are judged by their shape (`secretValuePatterns`): a chart's `token: placeholder`
# is no secret.
_SECRET_KEY = re.compile(r"(password|passwd)$", re.IGNORECASE)


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


_FLAG = re.compile(r"^--?([A-Za-z0-9_.-]+)(?:=(.*))?$", re.DOTALL)


_VARIABLE_REFERENCE = re.compile(r"\$\([A-Za-z_][A-Za-z0-9_.-]*\)|\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Z_][A-Z0-9_]*")


def _base64_text(value: Any) -> Any:
    """ConfigMap `binaryData` values are base64 (Kubernetes API: `map[string][]byte`): the decoded
    text, or the value itself when it is not base64 (it is judged as it stands)."""
    if not isinstance(value, str) or is_unknown(value):
        return value
    try:
        return base64.b64decode(value, validate=True).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return value


@functools.lru_cache(maxsize=16)
def any_of(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex matching where any of `patterns` does: one scan of a long value instead of one a pattern."""
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else re.compile(r"(?!x)x")


def _literal_secrets(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Literal secrets anywhere a Kubernetes object carries them: env (by name or value), container
    args/command (`--hf-token=...`, `--api-key X`, token shapes), ConfigMap data, and every key of a
    Ray serve config (`engine_kwargs`, `runtime_env.env_vars`), plus token shapes in any string
    (Helm values included). The verdict names where, never the value."""
    if not args.resource_type.startswith("kubernetes:") or args.resource_type == K8S_SECRET:
        return  # a Secret is where secrets belong (the engine hands the pack its plaintext)
    cfg = config_with_defaults(args, SECRET_CONFIG)
    name_re = re.compile(cfg["secretNamePattern"], re.IGNORECASE)
    value_re = any_of(tuple(cfg["secretValuePatterns"]))
    allowed = set(cfg["allowedEnvNames"])

    def literal(value: Any) -> bool:
        # Only a whole-value variable reference is not a literal: `$(VAR)` (Kubernetes expands it in
        # env, command and args), `${VAR}` or an upper-case `$VAR` (a shell's). "$hf_..." (a token
        # with a dollar in front) or "$(X)hf_..." are literals.
        return (
            isinstance(value, str)
            and bool(value.strip())
            and not is_unknown(value)
            and not _VARIABLE_REFERENCE.fullmatch(value.strip())
        )

    def secret_like(name: str, value: Any) -> bool:
        if name in allowed or not literal(value):
            return False
        return bool(name_re.search(name.replace("-", "_"))) or bool(value_re.search(value))

    props = plain(args.props)
    found: dict[str, None] = {}
    for where, container in containers(props):
        for item in known_list(dig(container, "env")) or []:
            if isinstance(item, dict) and secret_like(str(item.get("name", "")), item.get("value")):
                found[f"{where}.env {item['name']}"] = None
        line = container_command(container)  # `export HF_TOKEN=...` in a script, `env HF_TOKEN=... cmd`
        for name, value in line.assignments:
            if isinstance(value, str) and secret_like(name, value):
                found[f"{where} command line sets {name}"] = None
        for text in unreadable_settings(line, name_re):
            found[f"{where} command line the pack cannot read sets a secret-named variable ({text[:30]!r})"] = None
        for part in ("args", "command"):
            items = known_list(dig(container, part)) or []
            for i, arg in enumerate(items):
                if not isinstance(arg, str):
                    continue
                flag = _FLAG.match(arg.strip())
                if flag and flag.group(2) is not None and secret_like(flag.group(1), flag.group(2)):
                    found[f"{where}.{part}[{i}] {flag.group(1)}"] = None
                elif (
                    flag
                    and flag.group(2) is None
                    and i + 1 < len(items)
                    and secret_like(flag.group(1), items[i + 1])
                    and bool(name_re.search(flag.group(1).replace("-", "_")))
                ):
                    found[f"{where}.{part}[{i + 1}] (after {flag.group(1)})"] = None
    if args.resource_type == K8S_CONFIG_MAP:
        for key, value in (dig(props, "data") or {}).items() if isinstance(dig(props, "data"), dict) else ():
            if secret_like(str(key), value):
                found[f"data {key}"] = None
        binary = dig(props, "binaryData")
        for key, value in binary.items() if isinstance(binary, dict) else ():
            if secret_like(str(key), _base64_text(value)):
                found[f"binaryData {key}"] = None
    for ray in ray_objects(args.resource_type, props):
        if ray.kind != "RayService":
            continue
        try:
            config = serve_config(dig(ray.obj, "spec"))
        except ServeConfigError:
            config = None  # nixl-libfabric-backend reports unparsable serve configs
        for path, node in walk(config) if isinstance(config, (dict, list)) else ():
            if isinstance(node, dict):
                for key, value in node.items():
                    if secret_like(str(key), value):
                        found[f"{ray.label} serveConfigV2 {path}.{key}"] = None
    for path, node in walk(props):  # token shapes anywhere, whatever the key
        if literal(node) and value_re.search(node):
            found[f"{path} (token-shaped value)"] = None
        # a key that names a password, anywhere (Helm values, KubeRay's
        # gcsFaultToleranceOptions.redisPassword.value): its literal value is one
        for key, value in node.items() if isinstance(node, dict) else ():
            given = value.get("value") if isinstance(value, dict) else value
            if _SECRET_KEY.search(str(key)) and str(key) not in allowed and literal(given):
                found[f"{path}.{key}" if path else str(key)] = None
    if found:
        report(
            f"{name_of(args)} carries literal secret-looking values: "
            f"{', '.join(found)}. Fix: put them in a Kubernetes Secret (from `pulumi config set --secret`) "
            f"and reference it with env valueFrom.secretKeyRef (or envFrom.secretRef)."
        )


no_literal_secrets = resource_policy(
    name="no-literal-secrets-in-pods",
    description="Kubernetes objects carry no literal secret-looking values (env, args, ConfigMaps, serve "
    "configs, Helm values); secrets come from Secrets.",
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
    why: list[str] = []
    if resource_type in (K8S_SERVICE, K8S_SERVICE_PATCH):  # a patch sets what the Service becomes
        why += [w for w in [_service_exposure(props)] if w]
    elif resource_type == K8S_INGRESS:
        if dig(props, "metadata", "annotations", _ALB_SCHEME) == "internet-facing":
            why.append(f"annotation {_ALB_SCHEME}: internet-facing")
    elif resource_type in (INGRESS_CLASS_PARAMS, LB_CONFIGURATION):
        if dig(props, "spec", "scheme") == "internet-facing":
            why.append("spec.scheme: internet-facing")
    elif resource_type in GATEWAYS:
        annotations = dig(props, "spec", "infrastructure", "annotations")
        if isinstance(annotations, dict) and annotations.get(_SCHEME) == "internet-facing":
            why.append(f"spec.infrastructure.annotations {_SCHEME}: internet-facing")
    if resource_type in HELM_TYPES:
        why += _chart_exposure(props)
    if resource_type not in (K8S_SERVICE, K8S_SERVICE_PATCH):  # Services in ConfigGroups, Helm values, manifests
        for path, service in embedded(props, _is_service):
            reason = _service_exposure(service)
            if reason:
                why.append(f"Service at {path or '(root)'} is {reason}")
    for ray in ray_objects(resource_type, props):
        # KubeRay makes the head Service from headGroupSpec.serviceType (headService overrides it):
        # it carries the dashboard and the job submission API (8265), which run any code sent to them.
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

POLICIES = [no_literal_secrets, not_internet_facing, eks_endpoint_restricted]
