"""The CEL of the cluster's GPU-pod admission policy, as data: what `admission_policy.py` deploys as a
ValidatingAdmissionPolicy, what the tests evaluate offline against the policy pack's pod fixtures and
what `make verify` evaluates against the live GPU pods (llm_pd_eks_tools/ops/verify/admission.py).

The PR-time pack reads what a stack declares; a pod can still reach the cluster from a Helm chart's
defaults, an operator, a patch or a CronJob. The API server runs this policy on every pod it admits,
whatever created it. It judges only pods that ask for GPUs (`nvidia.com/gpu` in the requests or limits
of any container or init container: the match condition) and asks of them:

- `efa-devices`: each GPU container requests its share of the node's EFA devices
  (`vpc.amazonaws.com/efa`, at least efa * gpus / gpus-per-node and at least one) on every EFA
  instance type the pod may land on: the types its node selector or required node affinity names,
  else the stack's GPU type (the cluster's GPU nodes are this program's node group).
- `fi-provider-literal`: each GPU container's `FI_PROVIDER`, where set, is the literal `efa` (not from
  a ConfigMap, Secret or field ref); a container with `envFrom` sets it literally (env wins over envFrom,
  so no ConfigMap can put `tcp` in); no command line or literal env value sets or unsets it otherwise.
- `nixl-libfabric`: where a container's command line or a literal env value states a NixlConnector or
  its `kv_connector_extra_config`, the NIXL backends are exactly `["LIBFABRIC"]` (NIXL's default is
  UCX, which on EKS is TCP), written plainly (no `\\u` escapes that could hide a second key).
- `no-privilege`: no privileged container, no capability added but IPC_LOCK (libfabric pins the memory
  it registers with the EFA device; the devices themselves come from the EFA device plugin as
  `vpc.amazonaws.com/efa`, EKS user guide "Manage EFA devices on Amazon EKS"), no host network, PID or
  IPC namespace.

The CEL stays within the standard definitions that both the API server (cel-go) and the offline
evaluator (cel-python) implement: no Kubernetes extension libraries (lists, strings, regex `find`,
quantity, url, ip/cidr, authz, format, optionals), regular expressions in the RE2 subset Python's
`re2` module shares (no look-around, no back-references). Quantities of extended resources are whole
numbers, read as `int(string(q))` where `q` is written in digits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .catalog import EC2_GPU_TYPES

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
# Capabilities a GPU pod may add: IPC_LOCK, as Kubernetes and the container runtime accept it.
ALLOWED_CAPABILITIES = ("IPC_LOCK", "CAP_IPC_LOCK")
POLICY_NAME = "llm-pd-eks-gpu-pods"
# The binding's actions for each `admissionPolicy.mode` (Deny and Warn may not be combined).
VALIDATION_ACTIONS: dict[str, tuple[str, ...]] = {
    "audit": ("Audit",),
    "warn": ("Warn", "Audit"),
    "deny": ("Deny", "Audit"),
}


@dataclass(frozen=True)
class CelVariable:
    name: str
    expression: str


@dataclass(frozen=True)
class CelRule:
    """One validation (or match condition): its name, its CEL and what a failing pod is told."""

    name: str
    expression: str
    message: str = ""
    reason: str = "Forbidden"


@dataclass(frozen=True)
class PolicyCel:
    """Everything the API server evaluates, in its order: match conditions, then the validations
    (the variables are evaluated when a validation first reads them)."""

    match_conditions: tuple[CelRule, ...]
    variables: tuple[CelVariable, ...]
    validations: tuple[CelRule, ...]


def _quote(text: str) -> str:
    """`text` as a CEL single-quoted string literal (raw strings would differ between evaluators)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _list(items: Any) -> str:
    return "[" + ", ".join(_quote(i) for i in items) + "]"


def _count(container: str, resource: str) -> str:
    """A container's count of an extended resource (limits, else requests; 0 when absent). Counts the API
    server writes other than in digits (a canonical `1k`) are taken as very large."""
    res = _quote(resource)
    parts = []
    for side in ("limits", "requests"):
        field = f"{container}.resources.{side}"
        parts.append((f"(has({field}) && {res} in {field})", f"string({field}[{res}])"))
    (lim_has, lim), (req_has, req) = parts
    value = f"({lim_has} ? {lim} : {req})"
    return (
        f"(has({container}.resources) && ({lim_has} || {req_has}) ? "
        f"({value}.matches('^[0-9]+$') ? int({value}) : 1000000) : 0)"
    )


def asks_for_gpus(container: str) -> str:
    return f"{_count(container, GPU_RESOURCE)} > 0"


_ALL_CONTAINERS = "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
# Occurrences of FI_PROVIDER on a command line or in a literal env value other than `FI_PROVIDER=efa`
# (also quoted) and the references `$FI_PROVIDER` / `${FI_PROVIDER}`: an assignment of anything else, an
# `unset`, `env -u`, `+=`, `printf -v`, a JSON key in a runtime env. Longer names (FI_PROVIDER_PATH) are others.
_FI_BAD = (
    r"(^|[^$A-Za-z0-9_{])FI_PROVIDER("
    r"$|[^=A-Za-z0-9_]|=($|[^e\"']|e($|[^f])|ef($|[^a])|efa[A-Za-z0-9_.,:+/^-])"
    r"|=\"($|[^e]|e($|[^f])|ef($|[^a])|efa($|[^\"]))"
    r"|='($|[^e]|e($|[^f])|ef($|[^a])|efa($|[^'])))"
)
# A quote, maybe backslash-escaped (JSON inside a shell script).
_Q = r"\\?\""
_LIBFABRIC_TAIL = "".join(
    f"|{'LIBFABRIC'[:i]}[^{'LIBFABRIC'[i]}]" for i in range(1, len("LIBFABRIC"))
)  # L[^I]|LI[^B]|...
_BACKENDS_KEY = _Q + r"backends" + _Q + r"\s*:\s*"
_BACKENDS_GOOD = _BACKENDS_KEY + r"\[\s*" + _Q + "LIBFABRIC" + _Q + r"\s*\]"
# A backends value that is not exactly ["LIBFABRIC"]: not a list, an empty list, another first element,
# or a second element after LIBFABRIC.
_BACKENDS_BAD = (
    _BACKENDS_KEY
    + r"(?:[^\s\[]|\[\s*\]|\[\s*[^\s\"\\\]]|\[\s*"
    + _Q
    + r"(?:[^L]"
    + _LIBFABRIC_TAIL
    + r"|LIBFABRIC[^\"\\]|LIBFABRIC"
    + _Q
    + r"\s*[^\s\]]))"
)
_KV_MENTION = r"NixlConnector|kv_connector_extra_config"
_UNICODE_ESCAPE = r"[\\]u[0-9a-fA-F]{4}"  # a JSON \uXXXX escape, which could spell a second "backends" key


def _texts(container: str) -> str:
    """A container's command line and literal env values, as one list of strings."""
    return (
        f"(has({container}.command) ? {container}.command : []) + (has({container}.args) ? {container}.args : []) + "
        f"(has({container}.env) ? {container}.env.filter(e, has(e.value)).map(e, e.value) : [])"
    )


def _efa_ok(container: str, node_type: str) -> str:
    """The container's EFA request covers its share on `node_type` (true for a type without EFA)."""
    gpus, efa = _count(container, GPU_RESOURCE), _count(container, EFA_RESOURCE)
    share = f"(variables.efaTable[{node_type}][1] * {gpus} / variables.efaTable[{node_type}][0])"
    return f"(!({node_type} in variables.efaTable) || {efa} >= ({share} < 1 ? 1 : {share}))"


def policy_cel(stack_instance_type: str) -> PolicyCel:
    """The policy's CEL for a stack whose GPU node group runs `stack_instance_type`.

    The EFA table (GPUs and EFA interfaces per type) comes from the catalog's EC2 data.
    """
    table = ", ".join(
        f"{_quote(name)}: [{int(row['gpus'])}, {int(row['maximumEfaInterfaces'])}]"
        for name, row in sorted(EC2_GPU_TYPES.items())
    )
    required = "object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    has_required = (
        "has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity) && "
        f"has({required}) && size({required}.nodeSelectorTerms) > 0"
    )
    type_in = f"(e.key in {_list(INSTANCE_TYPE_LABELS)} && e.operator == 'In')"
    selector_types = " + ".join(
        f"(has(object.spec.nodeSelector) && {_quote(label)} in object.spec.nodeSelector ? "
        f"[object.spec.nodeSelector[{_quote(label)}]] : [])"
        for label in INSTANCE_TYPE_LABELS
    )
    variables = (
        CelVariable("efaTable", "{" + table + "}"),
        CelVariable("gpuContainers", f"({_ALL_CONTAINERS}).filter(c, {asks_for_gpus('c')})"),
        CelVariable("selectorTypes", selector_types),
        # Every term of the required node affinity names instance types: the pod lands on one of them.
        CelVariable(
            "affinityTyped",
            f"{has_required} && {required}.nodeSelectorTerms.all(t, "
            f"has(t.matchExpressions) && t.matchExpressions.exists(e, {type_in}))",
        ),
    )
    efa = (
        "variables.gpuContainers.all(c, size(variables.selectorTypes) > 0 ? "
        f"variables.selectorTypes.all(v, {_efa_ok('c', 'v')}) : variables.affinityTyped ? "
        f"{required}.nodeSelectorTerms.all(t, t.matchExpressions.all(e, !{type_in} || "
        f"e.values.all(v, {_efa_ok('c', 'v')}))) : {_efa_ok('c', _quote(stack_instance_type))})"
    )
    fi_provider = (
        "variables.gpuContainers.all(c, "
        "(!has(c.env) || c.env.all(e, e.name != 'FI_PROVIDER' || (has(e.value) && e.value == 'efa' && "
        "!has(e.valueFrom)))) && "
        "(!has(c.envFrom) || (has(c.env) && c.env.exists(e, e.name == 'FI_PROVIDER'))) && "
        f"!({_texts('c')}).exists(s, s.matches({_quote(_FI_BAD)})))"
    )
    nixl = (
        f"({_ALL_CONTAINERS}).all(c, ({_texts('c')}).all(s, !s.matches({_quote(_KV_MENTION)}) || "
        f"(!s.matches({_quote(_BACKENDS_BAD)}) && !s.matches({_quote(_UNICODE_ESCAPE)}) && "
        f"(!s.contains('NixlConnector') || s.matches({_quote(_BACKENDS_GOOD)})))))"
    )
    caps = _list(ALLOWED_CAPABILITIES)
    privilege = (
        f"({_ALL_CONTAINERS}).all(c, !has(c.securityContext) || "
        "((!has(c.securityContext.privileged) || !c.securityContext.privileged) && "
        "(!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || "
        f"c.securityContext.capabilities.add.all(a, a in {caps})))) && "
        + " && ".join(f"!(has(object.spec.{f}) && object.spec.{f})" for f in ("hostNetwork", "hostPID", "hostIPC"))
    )
    pods_gpus = f"({_ALL_CONTAINERS}).exists(c, {asks_for_gpus('c')})"
    return PolicyCel(
        match_conditions=(
            CelRule("asks-for-gpus", pods_gpus),
            # An update is judged only where it changes the spec: a label or finalizer change on a pod
            # admitted before the policy (or in audit) must never be refused, or the pod could not be deleted.
            CelRule("creates-or-changes-spec", "request.operation != 'UPDATE' || object.spec != oldObject.spec"),
        ),
        variables=variables,
        validations=(
            CelRule(
                "efa-devices",
                efa,
                f"a GPU container does not request its share of the node's {EFA_RESOURCE} devices "
                f"(efa x gpus / gpus-per-node, at least 1) on an EFA instance type; without them libfabric "
                f"falls back to TCP",
            ),
            CelRule(
                "fi-provider-literal",
                fi_provider,
                "a GPU container's FI_PROVIDER is not the literal env value 'efa' (valueFrom, envFrom without "
                "a literal FI_PROVIDER, or a command line or env value that sets or unsets it otherwise)",
            ),
            CelRule(
                "nixl-libfabric",
                nixl,
                "a container states a NixlConnector KV transfer whose NIXL backends are not exactly "
                '["LIBFABRIC"] (NIXL\'s default UCX is TCP on EKS)',
            ),
            CelRule(
                "no-privilege",
                privilege,
                "a GPU pod is privileged, adds a capability other than IPC_LOCK, or uses the host's network, "
                "PID or IPC namespace; EFA needs none of these (the EFA device plugin hands out the devices)",
            ),
        ),
    )


def namespace_selector_expressions(exempt: list[str]) -> list[dict[str, Any]]:
    """The namespace selector's expressions: every namespace but the exempt ones."""
    if not exempt:
        return []
    return [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(exempt)}]
