"""Rules for Ray on Kubernetes: NIXL moves the KV cache over LIBFABRIC (EFA) only, and GPU pods
get their share of the node's EFA devices and the libfabric `efa` provider.

NIXL's default backend is UCX, which on EKS falls back to TCP over the ENA interface: the service
works, only slowly, so nothing but a policy notices. Likewise a GPU pod without
`vpc.amazonaws.com/efa` devices or with `FI_PROVIDER` other than `efa` silently uses sockets.

The rules judge every workload a vLLM engine can run in, wherever it is declared (`workloads`,
llm_pd_eks_policy/workloads.py): KubeRay objects and pod-running Kubernetes objects, as resources of their own or
carried in ConfigFiles/ConfigGroups, Helm values and YAML/JSON text; KV-transfer configs in serve
configs and on command lines; FI_PROVIDER as the kubelet, the shell and Ray set it.
"""

from __future__ import annotations

import json
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

from . import yaml_text
from .common import (
    GPU_TABLE_SCHEMA,
    TypeTable,
    config_with_defaults,
    dig,
    guarded,
    is_unknown,
    known_list,
    norm_type,
    plain,
    resource_policy,
)
from .pod_env import (
    ClaimStore,
    External,
    ObjectStore,
    dra_gpus,
    effective_env,
    requested,
)
from .stack import StackView
from .workloads import (
    FABRIC_VARIABLES,
    UNSET,
    Workload,
    command_line,
    container_command,
    containers,
    kv_flags,
    runtime_env_yaml,
    unreadable_settings,
    workloads,
)

_INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
RayObject = Workload  # a KubeRay object (label, kind, obj), as the Ray-only rules see it


def ray_objects(resource_type: str, props: Any) -> list[Workload]:
    """Every KubeRay object a Kubernetes resource declares (itself, or embedded in its inputs)."""
    return [w for w in workloads(resource_type, props) if w.is_ray]


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
        return yaml_text.load(text)
    except yaml_text.YamlTooLarge as error:
        raise ServeConfigError(f"YAML the pack will not expand ({error})") from None
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
    "allowedConnectors": {
        "type": "array",
        "items": {"type": "string"},
        "description": "KV connectors other than NixlConnector that may carry the KV cache (judged elsewhere); "
        "every other connector is a violation",
        "default": [],
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
        return (
            f"{backends}; NIXL creates every listed backend and picks one per transfer, so only "
            f"[{required!r}] alone guarantees EFA"
        )
    return None


_ENGINE_CONFIG_KEYS = ("prefill_config", "decode_config")


def kv_configs(work: Workload) -> Iterator[tuple[str, Any]]:
    """(where, node) of every KV-transfer config a workload hands to vLLM: the serve config of a
    RayService, `--kv-transfer-config` on a RayJob entrypoint or any container's command line. A
    serve config that is not YAML text is yielded as a ServeConfigError."""
    if work.kind == "RayService":
        try:
            config = serve_config(dig(work.obj, "spec"))
        except ServeConfigError as error:
            yield "spec.serveConfigV2", error
            config = None
        if isinstance(config, (dict, list)):
            for path, node in walk(config):
                yield f"serveConfigV2 {path or '(root)'}", node
                # build_pd_openai_app also takes an engine's LLM config as a path to a YAML file
                # (a ConfigMap mounted in the pod): text the pack never sees, so never judged as passing.
                for key in _ENGINE_CONFIG_KEYS:
                    value = node.get(key) if isinstance(node, dict) else None
                    if isinstance(value, str) and not is_unknown(value):
                        yield (
                            f"serveConfigV2 {path}.{key}",
                            ServeConfigError(
                                f"the file path {value[:60]!r}, which the pack cannot read; pass the LLM config inline"
                            ),
                        )
    lines = []
    if work.kind == "RayJob":
        lines.append(("spec.entrypoint", command_line(dig(work.obj, "spec", "entrypoint"))))
    for label, pod in work.pods():
        for container in containers(pod):
            lines.append((f"{label} container '{dig(container, 'name')}' command", container_command(container)))
    for where, line in lines:
        for flag, value in (found for argv in line.commands for found in kv_flags(argv)):
            if not isinstance(value, (dict, list)):
                yield f"{where} {flag}", ServeConfigError(f"{str(value)[:60]!r}, not JSON")
                continue
            for path, node in walk(value):
                yield f"{where} {flag}{'.' + path if path else ''}", node


def _connector_problem(node: dict, required: str, allowed: list[str]) -> Optional[str]:
    """Why a KV-transfer config does not move the KV cache over NIXL's `required` backend."""
    connector = node.get("kv_connector")
    if connector is None or is_unknown(connector) or connector == "MultiConnector":
        return None  # MultiConnector: each of its connectors is judged where walk finds it
    if connector != "NixlConnector":
        if connector in allowed:
            return None
        return (
            f"KV connector {connector!r}: only NixlConnector with backends ['{required}'] moves the KV "
            f"cache over EFA. Fix: kv_connector: NixlConnector, kv_connector_extra_config: "
            f"{{backends: ['{required}']}} (or list {connector!r} in allowedConnectors)"
        )
    backends = dig(node, "kv_connector_extra_config", "backends")
    if is_unknown(backends):
        return None
    problem = _backend_problem(backends, required)
    if problem:
        return (
            f"NixlConnector has backends {problem}; the KV cache may not travel over EFA. Fix: "
            f"kv_connector_extra_config: {{backends: ['{required}']}}"
        )
    return None


def _nixl_backend(args: ResourceValidationArgs, report: ReportViolation) -> None:
    cfg = config_with_defaults(args, NIXL_CONFIG)
    required = str(cfg["requiredBackend"])
    allowed = [str(c) for c in cfg.get("allowedConnectors") or []]
    for work in workloads(args.resource_type, plain(args.props)):
        for where, node in kv_configs(work):
            if isinstance(node, ServeConfigError):
                report(
                    f"{work.label}: {where} is {node}. KubeRay needs YAML text and vLLM JSON. Fix: build it "
                    f"with yaml.safe_dump / json.dumps from the config dict."
                )
                continue
            if not isinstance(node, dict) or "kv_connector" not in node:
                continue
            problem = _connector_problem(node, required, allowed)
            if problem:
                report(f"{work.label}: {where}: {problem}.")


nixl_libfabric = resource_policy(
    name="nixl-libfabric-backend",
    description="Every vLLM KV-transfer config (serve configs, RayJob entrypoints, container command lines, "
    "in any workload kind) uses NixlConnector with exactly [LIBFABRIC] as NIXL backends.",
    validate=_nixl_backend,
    config=NIXL_CONFIG,
)


# -- EFA devices and the libfabric provider in GPU pods --------------------------------------------
POD_EFA_CONFIG: dict[str, dict[str, Any]] = {
    **GPU_TABLE_SCHEMA,
    "gpuResource": {"type": "string", "default": "nvidia.com/gpu", "description": "GPU extended resource"},
    "efaResource": {"type": "string", "default": "vpc.amazonaws.com/efa", "description": "EFA extended resource"},
    "fiProvider": {"type": "string", "default": "efa", "description": "required value of env FI_PROVIDER"},
    "draGpuDeviceClassPattern": {
        "type": "string",
        "default": "gpu",
        "description": "regex (case-insensitive) on a DRA request's deviceClassName that allocates GPUs",
    },
}


def pod_instance_types(pod: Any) -> set[str]:
    """The instance types a pod is pinned to by nodeSelector or a required node affinity (empty: not
    pinned). Affinity terms are ORed and a term's `In` lists every type it admits, so each of them is
    a node the pod may land on."""
    for label in _INSTANCE_TYPE_LABELS:
        value = norm_type(dig(pod, "nodeSelector", label))
        if value:
            return {value}
    types: set[str] = set()
    terms = dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
    for term in known_list(terms) or []:
        for expr in known_list(dig(term, "matchExpressions")) or []:
            if dig(expr, "key") in _INSTANCE_TYPE_LABELS and dig(expr, "operator") == "In":
                types |= {t for t in (norm_type(v) for v in known_list(dig(expr, "values")) or []) if t}
    return types


def _stack_gpu_types(view: StackView, table: TypeTable) -> set[str]:
    types: set[str] = set()
    for cap in view.capacities():
        types |= table.efa_of(cap.instance_types)
    return types


def _gpu_pods_efa(args: StackValidationArgs, report: ReportViolation) -> None:
    cfg = config_with_defaults(args, POD_EFA_CONFIG)
    table = TypeTable.from_config(cfg)
    gpu_res, provider = cfg["gpuResource"], cfg["fiProvider"]
    view = StackView.of(args.resources)
    store = ObjectStore(view)
    claims = ClaimStore(view)
    stack_types = _stack_gpu_types(view, table)
    for resource in view.resources:
        for work in workloads(resource.resource_type, view.props(resource)):
            namespace = work.namespace
            uses_gpus = False
            for label, pod in work.pods():
                pinned = pod_instance_types(pod)
                # Unpinned (or pinned to several types) with several GPU types in the stack: the pod may
                # land on any of them, so the largest EFA share holds.
                candidates = pinned or stack_types
                node_type = max(
                    sorted(candidates & set(table.efa)),
                    default=None,
                    key=lambda t: _efa_share(table, t, requested_gpus(pod, gpu_res)),
                )
                for container in containers(pod):
                    gpus: Any = requested(container, gpu_res)
                    via = f"{gpus} x {gpu_res}"
                    if not gpus:
                        dra = dra_gpus(pod, container, namespace, claims, str(cfg["draGpuDeviceClassPattern"]))
                        if is_unknown(dra) or not dra:
                            continue
                        gpus = table.gpus.get(node_type or "", 1) if dra == "all" else int(dra)
                        via = f"GPUs through DRA resource claims ({dra})"
                    uses_gpus = True
                    problems = _container_problems(container, gpus, node_type, table, cfg, namespace, store)
                    if problems:
                        cname = dig(container, "name")
                        report(
                            f"{work.label}, {label}, container '{cname}' requests {via} but does "
                            f"not use EFA fully. Fix: " + "; ".join(problems) + ".",
                            resource.urn,
                        )
            if uses_gpus and work.is_ray:
                _ray_env_overrides(work, provider, report, resource.urn)


def _efa_share(table: TypeTable, node_type: str, gpus: int) -> int:
    """EFA devices a pod asking for `gpus` of a `node_type` node must request (at least one)."""
    per_node = table.gpus.get(node_type)
    return max(1, table.efa[node_type] * gpus // per_node) if per_node else 1


def requested_gpus(pod: Any, gpu_res: str) -> int:
    """The largest GPU request of a pod's containers (0 when none is known)."""
    return max((requested(c, gpu_res) or 0 for c in known_list(dig(pod, "containers")) or []), default=0)


def _container_problems(
    container: Any,
    gpus: int,
    node_type: Optional[str],
    table: TypeTable,
    cfg: dict[str, Any],
    namespace: Any,
    store: ObjectStore,
) -> list[str]:
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
        problems.append(
            f"set env FI_PROVIDER={provider} literally (it comes from {value.source}, which the pack cannot read)"
        )
    elif not is_unknown(value) and value != provider:
        problems.append(
            f"set env FI_PROVIDER={provider} (is {value!r}; with duplicates the last entry wins)"
            if value is not None
            else f"set env FI_PROVIDER={provider}"
        )
    line = container_command(container)
    problem = _fi_problem(line.last("FI_PROVIDER"), provider)
    if problem:
        problems.append(f"the command line {problem}; leave FI_PROVIDER to env (or export {provider!r})")
    return problems + [
        f"the command line may set fabric variables where the pack cannot read it ({text!r}); set them in env"
        for text in unreadable_settings(line, FABRIC_VARIABLES)
    ]


def _fi_problem(value: Any, provider: str) -> Optional[str]:
    if value is None or is_unknown(value):
        return None
    if value is UNSET:
        return "unsets FI_PROVIDER (libfabric then picks any provider, sockets included)"
    if isinstance(value, str) and value in ("$FI_PROVIDER", "${FI_PROVIDER}"):
        return None
    if isinstance(value, str) and "$" in value:
        return f"sets FI_PROVIDER from a shell expansion ({value[:40]!r}) the pack cannot read"
    if value != provider:
        return f"sets FI_PROVIDER={value!r}"
    return None


def _ray_env_overrides(work: Workload, provider: str, report: ReportViolation, urn: str) -> None:
    """Ray applies a runtime_env's env_vars (and its `py_executable` command line) to the worker
    processes over the container's env: the serve config's runtime_envs, a RayJob's runtimeEnvYAML
    and its entrypoint command line."""
    found: list[tuple[str, str]] = []
    sources: list[tuple[str, Any]] = []
    if work.kind == "RayService":
        try:
            config = serve_config(dig(work.obj, "spec"))
        except ServeConfigError:
            config = None  # nixl-libfabric-backend reports it
        if isinstance(config, (dict, list)):
            sources.append(("serveConfigV2", config))
    if work.kind == "RayJob":
        runtime_env = runtime_env_yaml(dig(work.obj, "spec", "runtimeEnvYAML"))
        if isinstance(runtime_env, dict):
            sources.append(("spec.runtimeEnvYAML", {"runtime_env": runtime_env}))
        line = command_line(dig(work.obj, "spec", "entrypoint"))
        problem = _fi_problem(line.last("FI_PROVIDER"), provider)
        if problem:
            found.append(("spec.entrypoint", problem))
    for where, config in sources:
        for path, node in walk(config):
            if path.endswith("env_vars") and isinstance(node, dict) and "FI_PROVIDER" in node:
                problem = _fi_problem(node["FI_PROVIDER"], provider)
                if problem:
                    found.append((f"{where} {path}", problem))
            if path.endswith("runtime_env") and isinstance(node, dict) and isinstance(node.get("py_executable"), str):
                problem = _fi_problem(command_line(node["py_executable"]).last("FI_PROVIDER"), provider)
                if problem:
                    found.append((f"{where} {path}.py_executable", problem))
    for where, problem in found:
        report(
            f"{work.label}: {where} {problem}, which Ray applies to the workers over the container's "
            f"FI_PROVIDER={provider}. Fix: drop it (or set {provider!r}).",
            urn,
        )


gpu_pods_efa = StackValidationPolicy(
    name="ray-gpu-pods-efa",
    description="Ray containers that request GPUs request their share of the node's EFA devices and run "
    "with FI_PROVIDER=efa (env, envFrom and the serve config's runtime_env resolved as Kubernetes and Ray do).",
    validate=guarded("ray-gpu-pods-efa", _gpu_pods_efa),
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties=POD_EFA_CONFIG),
)

POLICIES = [nixl_libfabric, gpu_pods_efa]
