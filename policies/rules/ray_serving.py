"""Rules for Ray on Kubernetes: NIXL moves the KV cache over LIBFABRIC (EFA) only, and GPU pods
get their share of the node's EFA devices and the libfabric `efa` provider.

NIXL's default backend is UCX, which on EKS falls back to TCP over the ENA interface: the service
works, only slowly, so nothing but a policy notices. Likewise a GPU pod without
`vpc.amazonaws.com/efa` devices or with `FI_PROVIDER` other than `efa` silently uses sockets.

The rules judge every Ray object wherever it is declared (`ray_objects`): a `ray.io` RayService,
RayCluster or RayJob of any API version, a generic CustomResource, or one embedded in a Helm
release's values or a YAML manifest string.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import yaml
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    StackValidationArgs,
    StackValidationPolicy,
)

from .common import (
    GPU_TABLE_SCHEMA,
    K8S_CONFIG_MAP,
    K8S_SECRET,
    UNKNOWN,
    TypeTable,
    as_int,
    config_with_defaults,
    dig,
    guarded,
    is_unknown,
    known_list,
    norm_type,
    plain,
    resource_policy,
)
from .stack import StackView

# Where each Ray kind keeps its cluster spec (KubeRay v1 CRDs, tests/data/kuberay).
RAY_CLUSTER_SPEC = {
    "RayService": ("spec", "rayClusterConfig"),
    "RayCluster": ("spec",),
    "RayJob": ("spec", "rayClusterSpec"),
}
_INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")


@dataclass
class RayObject:
    label: str  # for messages: "RayService 'llm'" or "RayService 'llm' in Release 'x' values"
    kind: str
    obj: dict


def ray_objects(resource_type: str, props: Any) -> list[RayObject]:
    """Every KubeRay object a Kubernetes resource declares (itself, or embedded in its inputs)."""
    if not resource_type.startswith("kubernetes:"):
        return []
    token_kind = resource_type.split(":")[-1]
    group = resource_type.split(":")[1] if resource_type.count(":") >= 2 else ""
    if group.startswith("ray.io/") and token_kind in RAY_CLUSTER_SPEC and isinstance(props, dict):
        name = dig(props, "metadata", "name")
        return [RayObject(f"{token_kind} '{name if isinstance(name, str) else '?'}'", token_kind, props)]
    owner = resource_type.split(":")[-1]
    found: list[RayObject] = []
    for path, obj in _embedded(props, ""):
        name = dig(obj, "metadata", "name")
        found.append(RayObject(f"{obj['kind']} '{name if isinstance(name, str) else '?'}' (in {owner} at "
                               f"{path or '(root)'})", obj["kind"], obj))
    return found


def _embedded(node: Any, path: str) -> Iterator[tuple[str, dict]]:
    if isinstance(node, dict):
        kind, api = node.get("kind"), node.get("apiVersion")
        if isinstance(kind, str) and kind in RAY_CLUSTER_SPEC and str(api).startswith("ray.io/"):
            yield path, node
            return
        for key, value in node.items():
            yield from _embedded(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _embedded(value, f"{path}[{i}]")
    elif isinstance(node, str) and "ray.io/" in node and "kind:" in node:
        try:
            docs = list(yaml.safe_load_all(node))
        except yaml.YAMLError:
            return
        for i, doc in enumerate(docs):
            yield from _embedded(doc, f"{path}<yaml doc {i}>")


class ServeConfigError(ValueError):
    pass


def serve_config(spec: Any) -> Any:
    """`spec.serveConfigV2` parsed (it is YAML text); None when absent, the sentinel when unknown."""
    text = dig(spec, "serveConfigV2")
    if text is None or is_unknown(text):
        return text
    if isinstance(text, (dict, list)):
        return text
    if not isinstance(text, str):
        raise ServeConfigError(f"it is a {type(text).__name__} ({str(text)[:40]}), not YAML text")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ServeConfigError(f"not valid YAML ({str(error)[:200]})") from None


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (path, value) in a parsed document; JSON strings under kv_transfer_config are opened."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "kv_transfer_config" and isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    pass
            yield from walk(value, _named(f"{path}.{key}" if path else str(key), value))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, _named(f"{path}[{i}]", value))


def _named(label: str, value: Any) -> str:
    """`label(name)` for a node that carries a name (an application, a connector), so paths read well."""
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return f"{label}({value['name']})"
    return label


# -- NIXL over LIBFABRIC only --------------------------------------------------------------------
NIXL_CONFIG: dict[str, dict[str, Any]] = {
    "requiredBackend": {
        "type": "string",
        "description": "the only NIXL backend the KV transfer may list (LIBFABRIC = EFA; NIXL defaults to UCX)",
        "default": "LIBFABRIC",
    },
}


def _backend_problem(backends: Any, required: str) -> Optional[str]:
    """Why `kv_connector_extra_config.backends` does not guarantee `required`; None if it does.

    vLLM's NixlConnector passes the value to `nixl_agent_config(backends=...)` and defaults it to
    ["UCX"]. NIXL creates every listed backend and, for a transfer that names none, picks the first
    backend that can serve both sides (nixlAgent::createXferReq -> memorySection.findQuery), so a
    list with UCX in it may run on UCX; a string is iterated character by character in Python.
    Plugin names are case-sensitive ("LIBFABRIC").
    """
    if backends is None:
        return "unset (vLLM then uses NIXL's UCX backend: TCP on EKS)"
    if isinstance(backends, str):
        return f"the string {backends!r}, not a list (NIXL's Python API iterates it letter by letter)"
    if not isinstance(backends, list):
        return f"{backends!r}, not a list"
    if backends != [required]:
        return (f"{backends}; NIXL creates every listed backend and picks one per transfer, so only "
                f"[{required!r}] alone guarantees EFA")
    return None


def _nixl_backend(args: ResourceValidationArgs, report: ReportViolation) -> None:
    required = str(config_with_defaults(args, NIXL_CONFIG)["requiredBackend"])
    for ray in ray_objects(args.resource_type, plain(args.props)):
        if ray.kind != "RayService":
            continue
        try:
            config = serve_config(dig(ray.obj, "spec"))
        except ServeConfigError as error:
            report(f"{ray.label}: spec.serveConfigV2 is {error}. KubeRay needs YAML text. Fix: build it with "
                   f"yaml.safe_dump from the serve config dict.")
            continue
        if config is None or is_unknown(config):
            continue
        for path, node in walk(config):
            if not isinstance(node, dict) or node.get("kv_connector") != "NixlConnector":
                continue
            backends = dig(node, "kv_connector_extra_config", "backends")
            if is_unknown(backends):
                continue
            problem = _backend_problem(backends, required)
            if problem:
                report(f"{ray.label}: NixlConnector at {path or '(root)'} has backends {problem}; the KV "
                       f"cache may not travel over EFA. Fix: kv_connector_extra_config: "
                       f"{{backends: ['{required}']}}.")


nixl_libfabric = resource_policy(
    name="nixl-libfabric-backend",
    description="Every NixlConnector in a RayService's serve config lists exactly [LIBFABRIC] as NIXL backends.",
    validate=_nixl_backend,
    config=NIXL_CONFIG,
)


# -- EFA devices and the libfabric provider in GPU pods --------------------------------------------
POD_EFA_CONFIG: dict[str, dict[str, Any]] = {
    **GPU_TABLE_SCHEMA,
    "gpuResource": {"type": "string", "default": "nvidia.com/gpu", "description": "GPU extended resource"},
    "efaResource": {"type": "string", "default": "vpc.amazonaws.com/efa", "description": "EFA extended resource"},
    "fiProvider": {"type": "string", "default": "efa", "description": "required value of env FI_PROVIDER"},
}


def ray_groups(kind: str, obj: Any) -> list[tuple[str, Any]]:
    """(label, pod spec) of a Ray object's head and worker groups."""
    cluster = dig(obj, *RAY_CLUSTER_SPEC[kind])
    groups: list[tuple[str, Any]] = []
    head = dig(cluster, "headGroupSpec", "template", "spec")
    if isinstance(head, dict):
        groups.append(("head group", head))
    for i, worker in enumerate(known_list(dig(cluster, "workerGroupSpecs")) or []):
        pod = dig(worker, "template", "spec")
        name = dig(worker, "groupName")
        if isinstance(pod, dict):
            groups.append((f"worker group '{name if isinstance(name, str) else i}'", pod))
    return groups


def requested(container: Any, resource: str) -> Optional[int]:
    """How many of `resource` the container asks for (limits or requests); None if not known yet."""
    values = [dig(container, "resources", part, resource) for part in ("limits", "requests")]
    known = [as_int(v) or 0 for v in values if v is not None and not is_unknown(v)]
    if any(is_unknown(v) for v in values) and not any(known):
        return None
    return max(known, default=0)


@dataclass
class External:
    """A value that comes from something outside the stack (or a field the pack cannot read)."""

    source: str


@dataclass
class EnvView:
    """A container's environment as the kubelet builds it: envFrom sources in order, then `env`
    entries in order, a later entry replacing an earlier one of the same name (Kubernetes docs,
    "Define Environment Variables for a Container": env takes precedence over envFrom)."""

    values: dict[str, Any] = field(default_factory=dict)
    unknown_source: bool = False  # a source whose keys are not known yet may set anything
    external_sources: list[str] = field(default_factory=list)

    def get(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        if self.unknown_source:
            return UNKNOWN
        if self.external_sources:
            return External(", ".join(self.external_sources))
        return None


class ObjectStore:
    """The stack's ConfigMaps and Secrets, by (namespace, name)."""

    def __init__(self, view: Optional[StackView]) -> None:
        self._items: dict[tuple[str, str, str], Any] = {}
        for resource in view.of_type(K8S_CONFIG_MAP, K8S_SECRET) if view else []:
            props = view.props(resource) if view else {}
            kind = "ConfigMap" if resource.resource_type == K8S_CONFIG_MAP else "Secret"
            name, ns = dig(props, "metadata", "name"), dig(props, "metadata", "namespace")
            if not isinstance(name, str):
                name = resource.name  # auto-named: the logical name is the best we have
            self._items[(kind, ns if isinstance(ns, str) else "*", name)] = self._data(kind, props)

    @staticmethod
    def _data(kind: str, props: dict) -> Any:
        data = dig(props, "data")
        if is_unknown(data) or is_unknown(dig(props, "stringData")):
            return UNKNOWN
        out: dict[str, Any] = {}
        if kind == "Secret" and isinstance(data, dict):
            for key, value in data.items():
                try:
                    out[key] = base64.b64decode(str(value)).decode() if not is_unknown(value) else UNKNOWN
                except (binascii.Error, UnicodeDecodeError):
                    out[key] = UNKNOWN
        elif isinstance(data, dict):
            out.update(data)
        if isinstance(dig(props, "stringData"), dict):
            out.update(dig(props, "stringData"))
        return out

    def lookup(self, kind: str, namespace: Any, name: Any) -> Any:
        """The object's data, UNKNOWN, or None when no such object is in the stack."""
        if is_unknown(name) or is_unknown(namespace):
            return UNKNOWN
        for ns in ((namespace if isinstance(namespace, str) else "default"), "*"):
            if (kind, ns, name) in self._items:
                return self._items[(kind, ns, name)]
        return None


def effective_env(container: Any, namespace: Any, store: ObjectStore) -> EnvView:
    view = EnvView()
    env_from = dig(container, "envFrom")
    if is_unknown(env_from):
        view.unknown_source = True
    for source in known_list(env_from) or []:
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            ref = dig(source, key)
            if ref is None:
                continue
            name = dig(ref, "name")
            data = store.lookup(kind, namespace, name)
            if is_unknown(data):
                view.unknown_source = True
            elif data is None:
                view.external_sources.append(f"{kind} {name!r} (envFrom, not in this stack)")
            else:
                prefix = dig(source, "prefix")
                prefix = prefix if isinstance(prefix, str) else ""
                view.values.update({f"{prefix}{k}": v for k, v in data.items()})
    env = dig(container, "env")
    if is_unknown(env):
        view.unknown_source = True
        return view
    for item in known_list(env) or []:
        name = dig(item, "name")
        if not isinstance(name, str):
            continue
        value_from = dig(item, "valueFrom")
        if value_from is None:
            value = dig(item, "value")
            view.values[name] = "" if value is None else value
            continue
        for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = dig(value_from, key)
            if ref is None:
                continue
            data = store.lookup(kind, namespace, dig(ref, "name"))
            if is_unknown(data):
                view.values[name] = UNKNOWN
            elif data is None:
                view.values[name] = External(f"{kind} {dig(ref, 'name')!r} (not in this stack)")
            else:
                view.values[name] = data.get(dig(ref, "key"), External(f"{kind} {dig(ref, 'name')!r} has no "
                                                                        f"key {dig(ref, 'key')!r}"))
            break
        else:
            view.values[name] = UNKNOWN if is_unknown(value_from) else External(f"valueFrom {list(value_from)}")
    return view


def _pod_instance_type(pod: Any) -> Optional[str]:
    """The instance type a pod is pinned to by nodeSelector or a required node affinity, if one."""
    for label in _INSTANCE_TYPE_LABELS:
        value = norm_type(dig(pod, "nodeSelector", label))
        if value:
            return value
    terms = dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                "nodeSelectorTerms")
    for term in known_list(terms) or []:
        for expr in known_list(dig(term, "matchExpressions")) or []:
            values = known_list(dig(expr, "values")) or []
            if dig(expr, "key") in _INSTANCE_TYPE_LABELS and dig(expr, "operator") == "In" and len(values) == 1:
                return norm_type(values[0])
    return None


def _stack_gpu_types(view: StackView, table: TypeTable) -> set[str]:
    types: set[str] = set()
    for cap in view.capacities():
        types |= table.efa_of(cap.instance_types)
    return types


def _gpu_pods_efa(args: StackValidationArgs, report: ReportViolation) -> None:
    cfg = config_with_defaults(args, POD_EFA_CONFIG)
    table = TypeTable.from_config(cfg)
    gpu_res, provider = cfg["gpuResource"], cfg["fiProvider"]
    view = StackView(args.resources)
    store = ObjectStore(view)
    stack_types = _stack_gpu_types(view, table)
    for resource in view.resources:
        for ray in ray_objects(resource.resource_type, view.props(resource)):
            namespace = dig(ray.obj, "metadata", "namespace")
            uses_gpus = False
            for label, pod in ray_groups(ray.kind, ray.obj):
                pinned = _pod_instance_type(pod)
                # Unpinned with several GPU types in the stack: the pod may land on any of them, so the
                # largest EFA share holds.
                candidates = {pinned} if pinned else stack_types
                node_type = max(sorted(candidates & set(table.efa)), default=None,
                                key=lambda t: _efa_share(table, t, requested_gpus(pod, gpu_res)))
                for container in known_list(dig(pod, "containers")) or []:
                    gpus = requested(container, gpu_res)
                    if not gpus:  # none, or unknown
                        continue
                    uses_gpus = True
                    problems = _container_problems(container, gpus, node_type, table, cfg, namespace, store)
                    if problems:
                        cname = dig(container, "name")
                        report(f"{ray.label}, {label}, container '{cname}' requests {gpus} x {gpu_res} but does "
                               f"not use EFA fully. Fix: " + "; ".join(problems) + ".", resource.urn)
            if uses_gpus:
                _serve_env_overrides(ray, provider, report, resource.urn)


def _efa_share(table: TypeTable, node_type: str, gpus: int) -> int:
    """EFA devices a pod asking for `gpus` of a `node_type` node must request (at least one)."""
    per_node = table.gpus.get(node_type)
    return max(1, table.efa[node_type] * gpus // per_node) if per_node else 1


def requested_gpus(pod: Any, gpu_res: str) -> int:
    """The largest GPU request of a pod's containers (0 when none is known)."""
    return max((requested(c, gpu_res) or 0 for c in known_list(dig(pod, "containers")) or []), default=0)


def _container_problems(container: Any, gpus: int, node_type: Optional[str], table: TypeTable,
                        cfg: dict[str, Any], namespace: Any, store: ObjectStore) -> list[str]:
    efa_res, provider = cfg["efaResource"], cfg["fiProvider"]
    problems = []
    efa = requested(container, efa_res)
    expected = 1
    why = ""
    if node_type in table.efa and table.gpus.get(node_type):
        expected = _efa_share(table, node_type, gpus)
        why = f" ({gpus} of {node_type}'s {table.gpus[node_type]} GPUs -> {expected} of its {table.efa[node_type]})"
    if efa is not None and efa < expected:
        problems.append(f"request {expected} '{efa_res}' device(s){why}, not {efa}")
    value = effective_env(container, namespace, store).get("FI_PROVIDER")
    if isinstance(value, External):
        problems.append(f"set env FI_PROVIDER={provider} literally (it comes from {value.source}, which the "
                        f"pack cannot read)")
    elif not is_unknown(value) and value != provider:
        problems.append(f"set env FI_PROVIDER={provider} (is {value!r}; with duplicates the last entry wins)"
                        if value is not None else f"set env FI_PROVIDER={provider}")
    return problems


def _serve_env_overrides(ray: RayObject, provider: str, report: ReportViolation, urn: str) -> None:
    """Ray applies a runtime_env's env_vars to the replica processes over the container's env."""
    if ray.kind != "RayService":
        return
    try:
        config = serve_config(dig(ray.obj, "spec"))
    except ServeConfigError:
        return  # nixl-libfabric-backend reports it
    if not isinstance(config, (dict, list)):
        return
    for path, node in walk(config):
        if path.endswith("env_vars") and isinstance(node, dict) and "FI_PROVIDER" in node:
            value = node["FI_PROVIDER"]
            if not is_unknown(value) and value != provider:
                report(f"{ray.label}: serveConfigV2 {path} sets FI_PROVIDER={value!r}, which Ray applies to the "
                       f"replicas over the container's FI_PROVIDER={provider}. Fix: drop it from env_vars (or "
                       f"set {provider!r}).", urn)


gpu_pods_efa = StackValidationPolicy(
    name="ray-gpu-pods-efa",
    description="Ray containers that request GPUs request their share of the node's EFA devices and run "
    "with FI_PROVIDER=efa (env, envFrom and the serve config's runtime_env resolved as Kubernetes and Ray do).",
    validate=guarded("ray-gpu-pods-efa", _gpu_pods_efa),
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties=POD_EFA_CONFIG),
)

POLICIES = [nixl_libfabric, gpu_pods_efa]
