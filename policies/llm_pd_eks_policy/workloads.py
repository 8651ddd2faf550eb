"""Every place a vLLM engine can run, as the serving rules need it: the pod templates of a Kubernetes
object, the command lines its containers start, and the KV-transfer configs it passes to vLLM.

A workload is a KubeRay object (RayService, RayCluster, RayJob), a pod-running Kubernetes object
(Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, PodTemplate, and their
pulumi-kubernetes `...Patch` forms), declared as a resource of its own or carried inside another
resource's inputs: a `ConfigFile`/`ConfigGroup` (`yaml`, `objs`), a Helm release's or chart's
`values`, a `CustomResource`, as objects or as YAML/JSON text (JSON is YAML to the parser).

Where a path lives (KubeRay v1.7.0 CRDs, helm-chart/kuberay-operator/crds/ray.io_rayjobs.yaml:
`spec.entrypoint`, `spec.runtimeEnvYAML`, `spec.submitterPodTemplate`, `spec.rayClusterSpec`;
Kubernetes API reference for the pod template of each workload kind).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import yaml

from . import yaml_text
from .command_lines import (
    FABRIC_VARIABLES,
    SHELLS,
    UNSET,
    CommandLine,
    command_line,
    container_command,
    kv_flags,
    runtime_env_yaml,
    shell_script,
    unreadable_settings,
    vllm_json_args,
)
from .common import dig, known_list

RAY_CLUSTER_SPEC = {
    "RayService": ("spec", "rayClusterConfig"),
    "RayCluster": ("spec",),
    "RayJob": ("spec", "rayClusterSpec"),
}
# Pod spec of each pod-running kind (Kubernetes API reference: PodSpec, PodTemplateSpec, JobTemplateSpec).
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
WORKLOAD_KINDS = frozenset(RAY_CLUSTER_SPEC) | frozenset(POD_SPEC_PATHS)


# Resources that carry other objects in their inputs (judged for what they carry, not as one object).
_CARRIER_PREFIXES = ("kubernetes:helm.sh/", "kubernetes:yaml", "kubernetes:kustomize")


@dataclass
class Workload:
    label: str  # for messages: "Deployment 'vllm'" or "RayService 'llm' (in ConfigGroup at objs[0])"
    kind: str
    obj: dict
    generic: bool = False  # a kind the pack has no table for: its pod templates are found by shape

    @property
    def is_ray(self) -> bool:
        return self.kind in RAY_CLUSTER_SPEC and not self.generic

    @property
    def namespace(self) -> Any:
        return dig(self.obj, "metadata", "namespace")

    def pods(self) -> list[tuple[str, dict]]:
        """(label, pod spec) of every pod the object runs."""
        if self.generic:
            return pod_specs(self.obj)
        if self.kind in POD_SPEC_PATHS:
            pod = dig(self.obj, *POD_SPEC_PATHS[self.kind])
            return [("pod", pod)] if isinstance(pod, dict) else []
        cluster = dig(self.obj, *RAY_CLUSTER_SPEC[self.kind])
        groups: list[tuple[str, dict]] = []
        head = dig(cluster, "headGroupSpec", "template", "spec")
        if isinstance(head, dict):
            groups.append(("head group", head))
        for i, worker in enumerate(known_list(dig(cluster, "workerGroupSpecs")) or []):
            pod = dig(worker, "template", "spec")
            name = dig(worker, "groupName")
            if isinstance(pod, dict):
                groups.append((f"worker group '{name if isinstance(name, str) else i}'", pod))
        submitter = dig(self.obj, "spec", "submitterPodTemplate", "spec")
        if self.kind == "RayJob" and isinstance(submitter, dict):
            groups.append(("submitter pod", submitter))
        return groups


def _container_like(node: dict) -> bool:
    """An object shaped like a container wherever it sits: an image to run, or resource limits or
    requests (Argo's step `container` and `script`, KServe's predictor `model`, an operator's
    `engine` block)."""
    if isinstance(node.get("image"), str) and any(k in node for k in ("name", "command", "args", "resources", "env")):
        return True
    resources = node.get("resources")
    return isinstance(resources, dict) and any(isinstance(resources.get(k), dict) for k in ("limits", "requests"))


def pod_specs(obj: Any, limit: int = 10_000) -> list[tuple[str, dict]]:
    """(path, pod spec) of every pod spec in an object of any kind, found by shape: an object with a
    `containers` list of objects (PodSpec's one required field), or a container-shaped object outside
    any such list (judged as a pod of that one container). This is how a kind the pack has no table
    for (LeaderWorkerSet's leader and worker templates, a Knative Service, an Argo workflow's steps,
    a KServe predictor, an operator's CRD) is judged as a workload."""
    found: list[tuple[str, dict]] = []
    stack: list[tuple[str, Any]] = [("", obj)]
    seen = 0
    while stack and seen < limit:
        path, node = stack.pop()
        seen += 1
        if isinstance(node, dict):
            listed = node.get("containers")
            if isinstance(listed, list) and listed and all(isinstance(c, dict) for c in listed):
                found.append((path or "(root)", node))
                continue
            if path and _container_like(node):
                found.append((path, {"containers": [node]}))
                continue
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
    return sorted(found, key=lambda item: item[0])


def workload_kind(resource_type: str) -> Optional[str]:
    """The workload kind a `kubernetes:<group>/<version>:<Kind>` token declares, if it is one."""
    if not resource_type.startswith("kubernetes:") or resource_type.count(":") != 2:
        return None
    group, kind = resource_type.split(":")[1:]
    kind = kind[: -len("Patch")] if kind.endswith("Patch") else kind
    if kind in RAY_CLUSTER_SPEC:
        return kind if group.startswith("ray.io/") else None
    if kind in POD_SPEC_PATHS and group.split("/")[0] in ("core", "apps", "batch", "extensions"):
        return kind
    return None


# A KubeRay spec nested in an object of another kind (RayCronJob's job template, an operator's CRD):
# the key that only that spec has, and the kind it is judged as.
_RAY_SPEC_KEYS = (("rayClusterSpec", "RayJob"), ("rayClusterConfig", "RayService"))


def _ray_specs(obj: Any, limit: int = 10_000) -> list[tuple[str, str, dict]]:
    """(path, kind, spec) of every RayJob / RayService spec nested in `obj`, found by shape."""
    found: list[tuple[str, str, dict]] = []
    stack: list[tuple[str, Any]] = [("", obj)]
    seen = 0
    while stack and seen < limit:
        path, node = stack.pop()
        seen += 1
        if isinstance(node, dict):
            kind = next((k for key, k in _RAY_SPEC_KEYS if isinstance(node.get(key), dict)), None)
            if kind is not None:
                found.append((path or "(root)", kind, node))
                continue
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
    return sorted(found, key=lambda item: item[0])


def _generic(label: str, kind: str, obj: dict) -> list[Workload]:
    """A kind without a table: the KubeRay specs it nests, judged as KubeRay objects (entrypoint,
    runtime env, serve config and all), else its pod templates found by shape."""
    specs = _ray_specs(obj.get("spec", obj))
    if specs:
        metadata = obj.get("metadata")
        return [
            Workload(f"{label} {spec_kind} spec at {path}", spec_kind, {"metadata": metadata, "spec": spec})
            for path, spec_kind, spec in specs
        ]
    return [Workload(label, kind, obj, generic=True)]


def workloads(resource_type: str, props: Any) -> list[Workload]:
    """Every workload a Kubernetes resource declares: itself, objects embedded in its inputs, or (a
    kind without a table) itself when it carries a pod template."""
    if not resource_type.startswith("kubernetes:"):
        return []
    kind = workload_kind(resource_type)
    if kind is not None and isinstance(props, dict):
        name = dig(props, "metadata", "name")
        return [Workload(f"{kind} '{name if isinstance(name, str) else '?'}'", kind, props)]
    owner = resource_type.split(":")[-1]
    found: list[Workload] = []
    for path, obj in embedded(props, is_workload_object):
        name = dig(obj, "metadata", "name")
        label = f"{obj['kind']} '{name if isinstance(name, str) else '?'}' (in {owner} at {path or '(root)'})"
        if _table_kind(obj) is None:
            found += _generic(label, obj["kind"], obj)
        else:
            found.append(Workload(label, obj["kind"], obj))
    if not found and not resource_type.startswith(_CARRIER_PREFIXES) and isinstance(props, dict):
        if pod_specs(props) or _ray_specs(props.get("spec", props)):
            name = dig(props, "metadata", "name")
            return _generic(f"{owner} '{name if isinstance(name, str) else '?'}'", owner, props)
    return found


def _table_kind(node: dict) -> Optional[str]:
    kind, api = node.get("kind"), node.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api, str):
        return None
    if kind in RAY_CLUSTER_SPEC:
        return kind if api.startswith("ray.io/") else None
    return kind if kind in POD_SPEC_PATHS else None


def is_workload_object(node: dict) -> bool:
    if not isinstance(node.get("kind"), str) or not isinstance(node.get("apiVersion"), str):
        return False
    return _table_kind(node) is not None or bool(pod_specs(node)) or bool(_ray_specs(node.get("spec", node)))


def embedded(node: Any, match: Callable[[dict], bool], path: str = "", depth: int = 0) -> Iterator[tuple[str, dict]]:
    """(path, object) of every Kubernetes object in `node` that `match`es: nested objects, lists, and
    YAML or JSON text (one or many documents) that names a kind and an apiVersion."""
    if depth > 64:  # no Kubernetes object nests this deep; never recurse without bound
        return
    if isinstance(node, dict):
        if _is_list_wrapper(node):  # `kind: List` (or any *List): the API applies each item
            for i, value in enumerate(node["items"]):
                yield from embedded(value, match, f"{path}.items[{i}]" if path else f"items[{i}]", depth + 1)
            return
        if match(node):
            yield path, node
            return
        for key, value in node.items():
            yield from embedded(value, match, f"{path}.{key}" if path else str(key), depth + 1)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from embedded(value, match, f"{path}[{i}]", depth + 1)
    elif isinstance(node, str) and "kind" in node and "apiVersion" in node:
        for inner, obj in _in_text(node, match, depth + 1):
            yield path + inner, obj


_found_in_text = yaml_text.TextCache()
_HERE = "\0"  # the path of the text itself while its finds are computed (joined to the real path after)


def _in_text(text: str, match: Callable[[dict], bool], depth: int) -> list[tuple[str, dict]]:
    """(path inside the text, object) of every match in YAML or JSON text (one or many documents),
    found once per text and kind of match: a dashboard's megabytes of JSON are walked once, not once
    per rule and request."""
    key = (match, depth, text)
    found = _found_in_text.get(key)
    if found is None:
        try:
            docs = yaml_text.load_all(text)
        except (yaml_text.YamlTooLarge, yaml.YAMLError):
            docs = []  # resource-decodable refuses text too large; other text carries no object
        found = [
            (inner.removeprefix(_HERE), obj)
            for i, doc in enumerate(docs)
            for inner, obj in embedded(doc, match, f"{_HERE}<document {i}>", depth)
        ]
        _found_in_text.put(key, found)
    return found


def _is_list_wrapper(node: dict) -> bool:
    kind = node.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and isinstance(node.get("items"), list)


def containers(pod: Any) -> list[dict]:
    """A pod's init containers (sidecars run beside the engine) and containers."""
    out = []
    for key in ("initContainers", "containers"):
        out += [c for c in known_list(dig(pod, key)) or [] if isinstance(c, dict)]
    return out


__all__ = [
    "FABRIC_VARIABLES",
    "SHELLS",
    "UNSET",
    "CommandLine",
    "command_line",
    "container_command",
    "kv_flags",
    "runtime_env_yaml",
    "shell_script",
    "unreadable_settings",
    "vllm_json_args",
]
