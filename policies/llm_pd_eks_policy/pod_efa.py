"""GPU pods get their share of the node's EFA devices and the libfabric `efa` provider
(`ray-gpu-pods-efa`): a GPU pod without `vpc.amazonaws.com/efa` devices or with `FI_PROVIDER` other
than `efa` silently uses sockets. Every workload a vLLM engine can run in is judged (workloads.py),
FI_PROVIDER as the kubelet, the shell and Ray set it, and a fabric the pack cannot read is refused
(fabric.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from .common import (
    GPU_TABLE_SCHEMA,
    TypeTable,
    config_with_defaults,
    dig,
    guarded,
    is_unknown,
    known_list,
    memoized,
    norm_type,
)
from .fabric import unreadable_fabric
from .node_labels import LabelIndex, node_labels
from .pod_env import ClaimStore, EnvView, External, ObjectStore, dra_gpus, effective_env, requested
from .ray_serving import ServeConfigError, serve_config, walk
from .stack import StackView
from .workloads import (
    FABRIC_VARIABLES,
    UNSET,
    Workload,
    command_line,
    container_command,
    containers,
    runtime_env_yaml,
    unreadable_settings,
    workloads,
)

_INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")


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


def _selected_types(view: StackView, table: TypeTable, pod: Any) -> set[str]:
    """The EFA GPU types of the capacity a pod's nodeSelector admits (empty: it selects none of them,
    or selects by nothing the pack can tell apart)."""
    selector = dig(pod, "nodeSelector")
    if not isinstance(selector, dict) or not selector:
        return set()
    efa, index = _labelled(view, table)
    return {t for i in index.admitted(selector) for t in efa[i]}


def _labelled(view: StackView, table: TypeTable) -> tuple[list[set[str]], LabelIndex]:
    """The EFA GPU types of each GPU capacity, and the index of their node labels, once per judgement."""

    def build() -> tuple[list[set[str]], LabelIndex]:
        efa_types, labelled = [], []
        for cap in view.capacities():
            efa = table.efa_of(cap.instance_types)
            if efa:
                azs = {view.subnet_az(s) for s in cap.subnets.resolved} | cap.literal_azs
                labelled.append(node_labels(view, cap, {str(az) for az in azs if az and not is_unknown(az)}))
                efa_types.append(efa)
        return efa_types, LabelIndex(labelled)

    return memoized(("labelled", id(view), id(table)), (view, table), build)


def _stack_gpu_types(view: StackView, table: TypeTable) -> set[str]:
    types: set[str] = set()
    for cap in view.capacities():
        types |= table.efa_of(cap.instance_types)
    return types


def _gpu_pods_efa(args: StackValidationArgs, report: ReportViolation) -> None:
    """Every container that gets GPUs (requested, or through DRA resource claims) uses its share of
    EFA; a Ray workload with GPU pods also keeps its runtime env from undoing its pods' settings."""
    check = _PodCheck.of(args, report)
    for resource in check.view.resources:
        if not resource.resource_type.startswith("kubernetes:"):
            continue
        for work in workloads(resource.resource_type, check.view.props(resource)):
            uses_gpus = False
            for label, pod in work.pods():
                node_type = check.node_type(pod)
                for container in containers(pod):
                    uses_gpus = check.container(resource, work, label, pod, container, node_type) or uses_gpus
            if uses_gpus and work.is_ray:
                _ray_env_overrides(work, check.cfg["fiProvider"], report, resource.urn)


@dataclass
class _PodCheck:
    """What every pod of one judgement is held to: the config, the joined view, the objects env and
    claims come from, and (computed for the first pod that needs it) the stack's EFA GPU types."""

    view: StackView
    table: TypeTable
    cfg: dict[str, Any]
    store: ObjectStore
    claims: ClaimStore
    report: ReportViolation
    stack_types: Optional[set[str]] = None

    @classmethod
    def of(cls, args: StackValidationArgs, report: ReportViolation) -> _PodCheck:
        cfg = config_with_defaults(args, POD_EFA_CONFIG)
        table = TypeTable.from_config(cfg)
        view = StackView.of(args.resources)
        return cls(view, table, cfg, ObjectStore(view), ClaimStore(view), report)

    def node_type(self, pod: Any) -> Optional[str]:
        """The EFA GPU type whose share the pod is held to: of the types it pins (instance type or
        node labels); unpinned (or pinned to several) with several GPU types in the stack, the pod
        may land on any of them, so the largest EFA share holds."""
        pinned = pod_instance_types(pod) or _selected_types(self.view, self.table, pod)
        if not pinned and self.stack_types is None:
            self.stack_types = _stack_gpu_types(self.view, self.table)
        candidates = pinned or self.stack_types or set()
        gpus = self.cfg["gpuResource"]
        return max(
            sorted(candidates & set(self.table.efa)),
            default=None,
            key=lambda t: _efa_share(self.table, t, requested_gpus(pod, gpus)),
        )

    def container(
        self, resource: Any, work: Workload, label: str, pod: Any, container: Any, node_type: Optional[str]
    ) -> bool:
        """Judge one container; whether it gets GPUs. One without them, in a patch, may still change
        the fabric settings of the containers it patches."""
        gpu_res, namespace = self.cfg["gpuResource"], work.namespace
        gpus: Any = requested(container, gpu_res)
        via = f"{gpus} x {gpu_res}"
        if not gpus:
            dra = dra_gpus(pod, container, namespace, self.claims, str(self.cfg["draGpuDeviceClassPattern"]))
            if is_unknown(dra) or not dra:
                if resource.resource_type.endswith("Patch"):
                    provider = self.cfg["fiProvider"]
                    _patched_fabric(work, label, container, provider, self.store, self.report, resource.urn)
                return False
            gpus = self.table.gpus.get(node_type or "", 1) if dra == "all" else int(dra)
            via = f"GPUs through DRA resource claims ({dra})"
        problems = _container_problems(container, gpus, node_type, self.table, self.cfg, namespace, self.store)
        problems += _loaded_code(pod, container, namespace, self.store)
        if problems:
            cname = dig(container, "name")
            self.report(
                f"{work.label}, {label}, container '{cname}' requests {via} but does "
                f"not use EFA fully. Fix: " + "; ".join(problems) + ".",
                resource.urn,
            )
        return True


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
    """What a GPU container must change to reach its share of EFA: the devices it requests, the
    FI_PROVIDER its env gives libfabric, and what its command line does to the fabric settings."""
    efa_res, provider = cfg["efaResource"], cfg["fiProvider"]
    devices = _device_share(container, gpus, node_type, table, efa_res)
    env = effective_env(container, namespace, store)
    return devices + _env_provider(env.get("FI_PROVIDER"), provider) + _command_line(container, env, provider)


def _device_share(container: Any, gpus: int, node_type: Optional[str], table: TypeTable, efa_res: str) -> list[str]:
    """A container that asks for EFA devices asks for its GPUs' share of the node's (at least one)."""
    efa = requested(container, efa_res)
    expected = 1
    why = ""
    if node_type in table.efa and table.gpus.get(node_type):
        expected = _efa_share(table, node_type, gpus)
        why = f" ({gpus} of {node_type}'s {table.gpus[node_type]} GPUs -> {expected} of its {table.efa[node_type]})"
    return [f"request {expected} '{efa_res}' device(s){why}, not {efa}"] if efa is not None and efa < expected else []


def _env_provider(value: Any, provider: str) -> list[str]:
    """FI_PROVIDER as the container's env leaves it: the configured provider, read at preview."""
    if is_unknown(value):
        return [
            f"set env FI_PROVIDER={provider} literally (it comes from a value not known at preview, which no rule "
            f"can read)"
        ]
    if isinstance(value, External):
        return [f"set env FI_PROVIDER={provider} literally (it comes from {value.source}, which the pack cannot read)"]
    if value != provider:
        return [
            f"set env FI_PROVIDER={provider} (is {value!r}; with duplicates the last entry wins)"
            if value is not None
            else f"set env FI_PROVIDER={provider}"
        ]
    return []


def _command_line(container: Any, env: EnvView, provider: str) -> list[str]:
    """The command line runs after env: it may override FI_PROVIDER, or set fabric variables and
    load the engine's fabric settings where the pack cannot read them."""
    line = container_command(container)
    problem = _fi_problem(line.last("FI_PROVIDER"), provider)
    return (
        ([f"the command line {problem}; leave FI_PROVIDER to env (or export {provider!r})"] if problem else [])
        + [
            f"the command line may set fabric variables where the pack cannot read it ({text!r}); set them in env"
            for text in unreadable_settings(line, FABRIC_VARIABLES)
        ]
        + [
            f"the engine's fabric comes from {where}, which the pack cannot read; give settings inline (env, "
            f"args, serve config)"
            for where in unreadable_fabric(line, {k: v for k, v in env.values.items() if k != "PYTHONPATH"})
        ]
    )


_STARTUP_FILES = ("sitecustomize.py", "usercustomize.py")


def _loaded_code(pod: Any, container: Any, namespace: Any, store: ObjectStore) -> list[str]:
    """Why a GPU container's PYTHONPATH may run code before the engine reads its settings: Python
    runs a `sitecustomize.py` / `usercustomize.py` or a `.pth` file on its path at start-up. A
    directory mounted from a ConfigMap of the stack whose keys hold none of these only adds modules
    that run when imported (a known serve builder imports its own); any other directory is refused."""
    value = effective_env(container, namespace, store).get("PYTHONPATH")
    if value is None or value == "":
        return []
    if not isinstance(value, str) or is_unknown(value):
        return ["the engine's PYTHONPATH comes from a value the pack cannot read; set it literally"]
    volumes = {dig(v, "name"): v for v in known_list(dig(pod, "volumes")) or [] if isinstance(v, dict)}
    mounts = {dig(m, "mountPath"): dig(m, "name") for m in known_list(dig(container, "volumeMounts")) or []}
    unread = []
    for directory in (d for d in value.split(":") if d):
        source = dig(volumes.get(mounts.get(directory.rstrip("/")) or mounts.get(directory)), "configMap", "name")
        data = store.lookup("ConfigMap", namespace, source) if isinstance(source, str) else None
        keys = [str(k) for k in data] if isinstance(data, dict) else None
        if keys is None or any(k in _STARTUP_FILES or k.endswith(".pth") for k in keys):
            unread.append(directory)
    return (
        [
            f"PYTHONPATH {unread} may hold a sitecustomize.py or .pth file that runs before the engine and can change "
            f"its fabric; put modules on it only from a ConfigMap of the stack without start-up files"
        ]
        if unread
        else []
    )


def _patched_fabric(
    work: Workload, label: str, container: Any, provider: str, store: ObjectStore, report: ReportViolation, urn: str
) -> None:
    """A workload patch (DeploymentPatch, ...) merges into an object whose GPU requests it need not
    repeat: any FI_PROVIDER it sets must be the required one."""
    value = effective_env(container, work.namespace, store).values.get("FI_PROVIDER")
    line_value = container_command(container).last("FI_PROVIDER")
    for shown in (value, line_value):
        if isinstance(shown, External) or (shown is not None and not is_unknown(shown) and shown != provider):
            report(
                f"{work.label}, {label}, container '{dig(container, 'name')}' patches FI_PROVIDER to {shown!r} on a "
                f"workload whose GPU requests the patch does not show. Fix: set FI_PROVIDER={provider} (or leave it "
                f"to the workload).",
                urn,
            )
            return


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
        found += [
            ("spec.entrypoint", f"takes the engines' settings from {where}, which the pack cannot read")
            for where in unreadable_fabric(line, {})
        ]
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

POLICIES = [gpu_pods_efa]
