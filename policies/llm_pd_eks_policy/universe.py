"""A closed universe: every resource is judged by a rule, known inert, or refused as unjudgeable.

Deny lists never close: a CloudFormation stack, a Batch compute environment, an aws-native launch
template or security-group ingress, an operator's CRD running vLLM each pass every rule that does not
know its type. So the pack states what it knows instead:

- judged: the types its rules read (`JUDGED`, each with the rules that judge it), the components of
  the program being judged (their children are registered and judged one by one), and any Kubernetes
  object that carries a pod template (judged as a workload by the serving rules, whatever its kind);
- inert: `policies/data/inert_types.txt`, one type and its reason a line, generated from the installed
  providers' schemas by `llm_pd_eks_tools/gen_resource_types.py` (`make facts`); a line may name
  inputs that make the type no longer inert (an EIP attached to an instance);
- everything else, a new provider release's new types included, is refused by `unjudgeable-type`
  unless the policy config names the type (`allowTypes`, fnmatch patterns) or the resource by type
  and name (`allowResources`, `<type>::<name>`: a name alone would also pass another type's resource
  of that name) once it is checked elsewhere.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any, Optional

from pulumi_policy import ReportViolation, ResourceValidationArgs

from . import common as c
from .capacity import CAPACITY_RESERVATION
from .imds import EC2_NODE_CLASSES
from .karpenter import KARPENTER_NODE_POOLS
from .pod_env import DRA_CLAIM_KINDS
from .references import UNMODELLED_LAUNCHERS
from .security import GATEWAYS, HELM_TYPES, INGRESS_CLASS_PARAMS, LB_CONFIGURATION
from .stack import DEFAULT_ROUTE_TABLE, MAIN_ROUTE_TABLE_ASSOCIATION, NETWORK_INTERFACE, VPC
from .workloads import pod_specs, workload_kind

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "inert_types.txt"
POLICY_NAME = "unjudgeable-type"

_GPU = "the GPU capacity rules (gpu-*, efa-*, capacity-reservation-in-gpu-az)"
_NET = "the GPU network rules (gpu-node-group-single-az, gpu-nodes-private, efa-security-group)"
_EXPOSURE = "serve-endpoint-not-internet-facing"
_SERVING = "the serving rules (nixl-libfabric-backend, ray-gpu-pods-efa, no-literal-secrets-in-pods)"
JUDGED: dict[str, str] = {
    **dict.fromkeys((c.NODE_GROUP, c.MANAGED_NODE_GROUP, c.EKS_NODE_GROUP, c.EKS_NODE_GROUP_V2), _GPU),
    **dict.fromkeys((c.LAUNCH_TEMPLATE, c.PLACEMENT_GROUP, c.EC2_INSTANCE, c.LAUNCH_CONFIGURATION), _GPU),
    **dict.fromkeys((c.AUTOSCALING_GROUP, CAPACITY_RESERVATION, *UNMODELLED_LAUNCHERS), _GPU),
    **dict.fromkeys((c.SUBNET, VPC, NETWORK_INTERFACE, c.ROUTE, c.ROUTE_TABLE, c.ROUTE_TABLE_ASSOCIATION), _NET),
    **dict.fromkeys((MAIN_ROUTE_TABLE_ASSOCIATION, DEFAULT_ROUTE_TABLE, c.INTERNET_GATEWAY), _NET),
    **dict.fromkeys((c.SECURITY_GROUP, c.SECURITY_GROUP_RULE, c.SG_INGRESS_RULE, c.SG_EGRESS_RULE), _NET),
    c.EKS_CLUSTER: "eks-public-endpoint-restricted",
    c.EKS_COMPONENT_CLUSTER: "eks-public-endpoint-restricted",
    **dict.fromkeys((c.K8S_SERVICE, c.K8S_INGRESS, INGRESS_CLASS_PARAMS, LB_CONFIGURATION, *GATEWAYS), _EXPOSURE),
    **dict.fromkeys((c.K8S_CONFIG_MAP, c.K8S_CONFIG_MAP_PATCH, c.K8S_SECRET, c.K8S_SECRET_PATCH), _SERVING),
    **dict.fromkeys(HELM_TYPES, f"{_SERVING}, serving-workloads-visible, {_EXPOSURE}"),
    **{
        f"kubernetes:{t}": f"{_SERVING} (the objects they carry)"
        for t in ("yaml:ConfigFile", "yaml:ConfigGroup", "yaml/v2:ConfigFile", "yaml/v2:ConfigGroup")
    },
    **{
        f"kubernetes:{t}": f"{_SERVING} (the objects they carry)"
        for t in ("kustomize:Directory", "kustomize/v2:Directory", "apiextensions.k8s.io:CustomResource")
    },
    **dict.fromkeys(KARPENTER_NODE_POOLS, "gpu-references-in-stack (the EFA GPU types it may launch)"),
    **dict.fromkeys(EC2_NODE_CLASSES, "launch-template-imdsv2 (the IMDS settings of the nodes it launches)"),
}
LIMIT_RANGES = ("kubernetes:core/v1:LimitRange", "kubernetes:core/v1:LimitRangePatch")
# Extended resources a LimitRange must not hand out by default: a pod given them this way asks for
# no GPU in its spec, so no serving rule judges it as a GPU pod.
_DEVICE_RESOURCE = ("gpu", "efa", "neuron")
DRA_GROUP = "kubernetes:resource.k8s.io/"


def _read(path: Path) -> dict[str, tuple[tuple[str, ...], str]]:
    table: dict[str, tuple[tuple[str, ...], str]] = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        token, *rest = line.split("\t")
        unless: tuple[str, ...] = ()
        if rest and rest[0].startswith("unless="):
            unless = tuple(rest.pop(0)[len("unless=") :].split(","))
        table[token] = (unless, rest[0] if rest else "")
    return table


INERT = _read(DATA_FILE)

UNIVERSE_CONFIG: dict[str, dict[str, Any]] = {
    "allowTypes": {
        "type": "array",
        "items": {"type": "string"},
        "description": "resource type tokens (fnmatch patterns, e.g. 'aws:sagemaker/*') the pack may leave "
        "unjudged because they are checked elsewhere",
        "default": [],
    },
    "allowResources": {
        "type": "array",
        "items": {"type": "string"},
        "description": "resources the pack may leave unjudged, each as '<type token>::<Pulumi name>' (or its URN)",
        "default": [],
    },
}


def judged_by(resource_type: str, urn: str, props: Any) -> Optional[str]:
    """Which rules judge a resource of this type (None: no rule does)."""
    if resource_type in JUDGED:
        return JUDGED[resource_type]
    if _is_component_of_program(resource_type, urn):
        return "its children, each on its own (a component of the program)"
    if resource_type.startswith("kubernetes:"):
        kind = resource_type.split(":")[-1]
        if workload_kind(resource_type) is not None:
            return _SERVING
        if resource_type.startswith(DRA_GROUP) and kind.removesuffix("Patch") in (*DRA_CLAIM_KINDS, "DeviceClass"):
            return "ray-gpu-pods-efa (the GPUs a claim allocates, the devices a class selects)"
        if isinstance(props, dict) and pod_specs(props):
            return f"{_SERVING} (a kind that carries a pod template is a workload)"
    return None


def _is_component_of_program(resource_type: str, urn: str) -> bool:
    """A type of the program's own package (`<project>:index:Name`) is one of its component
    resources: it registers no cloud object itself."""
    parts = urn.split("::")
    return len(parts) > 1 and resource_type.split(":")[0] == parts[1]


def _device_defaults(props: Any) -> list[str]:
    """Where a LimitRange gives containers a GPU/EFA/Neuron device they did not ask for."""
    found = []
    for i, limit in enumerate(c.known_list(c.dig(props, "spec", "limits")) or []):
        for part in ("default", "defaultRequest"):
            given = c.dig(limit, part)
            for key in given if isinstance(given, dict) else ():
                if "/" in str(key) and any(d in str(key).lower() for d in _DEVICE_RESOURCE):
                    found.append(f"spec.limits[{i}].{part}.{key}")
    return found


def allowed(entries: Any, resource_type: str, name: str, urn: str) -> bool:
    """Whether an allow-list names this resource by type and name (`<type>::<name>`) or URN."""
    return isinstance(entries, list) and bool({f"{resource_type}::{name}", urn} & {str(e) for e in entries})


def verdict(resource_type: str, urn: str, name: str, props: Any, config: dict[str, Any]) -> Optional[str]:
    """Why a resource is refused as unjudgeable (None: judged, inert, or allowed)."""
    if resource_type in LIMIT_RANGES:
        devices = _device_defaults(props)
        if not devices or allowed(config.get("allowResources"), resource_type, name, urn):
            return None
        return (
            f"its defaults give every container of the namespace a device ({', '.join(devices[:3])}): those "
            f"pods ask for GPUs nowhere a rule reads; request devices in the pod spec instead"
        )
    if judged_by(resource_type, urn, props) is not None:
        return None
    if resource_type.startswith("pulumi:providers:"):
        return None  # a provider's configuration: its resources are judged (or refused) one by one
    inert = INERT.get(resource_type)
    set_inputs: list[str] = []
    if inert is not None:
        unless, _ = inert
        set_inputs = [p for p in unless if isinstance(props, dict) and props.get(p) not in (None, "", [])]
        if not set_inputs:
            return None
    if allowed(config.get("allowResources"), resource_type, name, urn):
        return None
    if any(fnmatch.fnmatchcase(resource_type, str(p)) for p in config.get("allowTypes") or []):
        return None
    if set_inputs:
        return (
            f"{resource_type} is inert only while {', '.join(inert[0] if inert else ())} are unset, and it sets "
            f"{', '.join(set_inputs)}, which no rule of the pack judges"
        )
    return f"no rule of the pack judges {resource_type}, and the pack's list of inert types does not name it"


def _validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
    inert = INERT.get(args.resource_type)
    if args.resource_type in JUDGED or (inert is not None and not inert[0]):
        return  # judged, or inert whatever its inputs: no need to read them
    cfg = c.config_with_defaults(args, UNIVERSE_CONFIG)
    why = verdict(args.resource_type, args.urn, args.name, c.plain(args.props), cfg)
    if why:
        report(
            f"{c.name_of(args)} cannot be judged: {why}. Whatever it launches, runs or opens would pass every "
            f"rule unseen. Fix: use a type the pack judges (an aws.eks.NodeGroup with an aws.ec2 launch template, "
            f"a Kubernetes workload, an aws.ec2 security group rule); or, once it is checked elsewhere, list "
            f"{args.resource_type!r} in this policy's allowTypes (or '{args.resource_type}::{args.name}' in "
            f"allowResources); a type that "
            f"is inert belongs in llm_pd_eks_tools/gen_resource_types.py with its reason."
        )


unjudgeable_type = c.resource_policy(
    name=POLICY_NAME,
    description="Every resource's type is judged by a rule or known inert; any other type (another provider's, "
    "a new one, an operator's CRD without a pod template) is refused unless the policy config allows it.",
    validate=_validate,
    config=UNIVERSE_CONFIG,
)

POLICIES = [unjudgeable_type]
