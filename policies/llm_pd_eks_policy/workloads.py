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

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import yaml

from .common import dig, is_unknown, known_list

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


@dataclass
class Workload:
    label: str  # for messages: "Deployment 'vllm'" or "RayService 'llm' (in ConfigGroup at objs[0])"
    kind: str
    obj: dict

    @property
    def is_ray(self) -> bool:
        return self.kind in RAY_CLUSTER_SPEC

    @property
    def namespace(self) -> Any:
        return dig(self.obj, "metadata", "namespace")

    def pods(self) -> list[tuple[str, dict]]:
        """(label, pod spec) of every pod the object runs."""
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


def _kind_of_type(resource_type: str) -> Optional[str]:
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


def workloads(resource_type: str, props: Any) -> list[Workload]:
    """Every workload a Kubernetes resource declares: itself, or objects embedded in its inputs."""
    if not resource_type.startswith("kubernetes:"):
        return []
    kind = _kind_of_type(resource_type)
    if kind is not None and isinstance(props, dict):
        name = dig(props, "metadata", "name")
        return [Workload(f"{kind} '{name if isinstance(name, str) else '?'}'", kind, props)]
    owner = resource_type.split(":")[-1]
    found: list[Workload] = []
    for path, obj in embedded(props, _is_workload_object):
        name = dig(obj, "metadata", "name")
        found.append(
            Workload(
                f"{obj['kind']} '{name if isinstance(name, str) else '?'}' (in {owner} at {path or '(root)'})",
                obj["kind"],
                obj,
            )
        )
    return found


def _is_workload_object(node: dict) -> bool:
    kind, api = node.get("kind"), node.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api, str):
        return False
    if kind in RAY_CLUSTER_SPEC:
        return api.startswith("ray.io/")
    return kind in POD_SPEC_PATHS


def embedded(node: Any, match: Callable[[dict], bool], path: str = "", depth: int = 0) -> Iterator[tuple[str, dict]]:
    """(path, object) of every Kubernetes object in `node` that `match`es: nested objects, lists, and
    YAML or JSON text (one or many documents) that names a kind and an apiVersion."""
    if depth > 64:  # resource-decodable refuses deeper inputs; never recurse without bound
        return
    if isinstance(node, dict):
        if match(node):
            yield path, node
            return
        for key, value in node.items():
            yield from embedded(value, match, f"{path}.{key}" if path else str(key), depth + 1)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from embedded(value, match, f"{path}[{i}]", depth + 1)
    elif isinstance(node, str) and "kind" in node and "apiVersion" in node:
        try:  # YAML text, one or many documents; JSON text parses as YAML too
            docs = list(yaml.safe_load_all(node))
        except yaml.YAMLError:
            try:
                docs = [json.loads(node)]
            except ValueError:
                return
        for i, doc in enumerate(docs):
            yield from embedded(doc, match, f"{path}<document {i}>", depth + 1)


def containers(pod: Any) -> list[dict]:
    """A pod's init containers (sidecars run beside the engine) and containers."""
    out = []
    for key in ("initContainers", "containers"):
        out += [c for c in known_list(dig(pod, key)) or [] if isinstance(c, dict)]
    return out


# -- command lines ---------------------------------------------------------------------------------
_SHELLS = re.compile(r"(^|/)(ba|z|da|k|a)?sh$")
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", ";;", "\n"}
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
UNSET = object()  # a command line that removes a variable from the environment


@dataclass
class CommandLine:
    """What a container's command line does before the engine starts: variables it sets or unsets
    (in order; the last one wins) and the argument tokens of every command it runs."""

    assignments: list[tuple[str, Any]] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)  # scripts the pack could not tokenize

    def last(self, name: str) -> Any:
        """The value `name` ends with (UNSET when removed); None when the command line leaves it alone."""
        value: Any = None
        for key, val in self.assignments:
            if key == name or (key == "*" and name != "*"):
                value = val
        return value


def _statements(tokens: list[str]) -> Iterator[list[str]]:
    current: list[str] = []
    for token in tokens:
        if token in _SEPARATORS:
            if current:
                yield current
            current = []
        else:
            current.append(token)
    if current:
        yield current


def _shell_tokens(script: str) -> Optional[list[str]]:
    lexer = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes
        return None


def command_line(argv: Any) -> CommandLine:
    """`command` + `args` (or an entrypoint string) read the way a POSIX shell and env(1) run it:
    `export A=B`, `A=B cmd`, `env [-i] [-u A] A=B cmd`, `unset A`, scripts given to `sh -c`."""
    result = CommandLine()
    if isinstance(argv, str):
        tokens = _shell_tokens(argv)
        if tokens is None:
            result.opaque.append(argv)
            return result
        argv = tokens
    words = [w for w in known_list(argv) or [] if isinstance(w, str)]
    _read(words, result, 0)
    return result


def _read(words: list[str], result: CommandLine, depth: int) -> None:
    if depth > 8:
        return
    for statement in _statements(words):
        i = 0
        while i < len(statement):
            word = statement[i]
            match = _ASSIGNMENT.match(word)
            if match:  # `A=B cmd` or a shell assignment
                result.assignments.append((match.group(1), match.group(2)))
                i += 1
                continue
            if word in ("export", "declare", "typeset", "readonly"):
                for arg in statement[i + 1 :]:
                    m = _ASSIGNMENT.match(arg)
                    if m:
                        result.assignments.append((m.group(1), m.group(2)))
                i = len(statement)
                break
            if word == "unset":
                result.assignments += [(arg, UNSET) for arg in statement[i + 1 :] if not arg.startswith("-")]
                i = len(statement)
                break
            if word == "env" or word.endswith("/env"):
                i += 1
                while i < len(statement):
                    arg = statement[i]
                    if arg in ("-i", "--ignore-environment", "-"):
                        result.assignments.append(("*", UNSET))
                    elif arg in ("-u", "--unset") and i + 1 < len(statement):
                        result.assignments.append((statement[i + 1], UNSET))
                        i += 1
                    elif arg.startswith("--unset="):
                        result.assignments.append((arg.split("=", 1)[1], UNSET))
                    elif _ASSIGNMENT.match(arg):
                        m = _ASSIGNMENT.match(arg)
                        assert m is not None
                        result.assignments.append((m.group(1), m.group(2)))
                    elif not arg.startswith("-"):
                        break
                    i += 1
                continue
            break
        rest = statement[i:]
        result.tokens += rest
        if rest and _SHELLS.search(rest[0]) and "-c" in rest[1:]:
            at = rest.index("-c", 1)
            if at + 1 < len(rest):
                script = _shell_tokens(rest[at + 1])
                if script is None:
                    result.opaque.append(rest[at + 1])
                else:
                    _read(script, result, depth + 1)


def container_command(container: Any) -> CommandLine:
    return command_line([*(known_list(dig(container, "command")) or []), *(known_list(dig(container, "args")) or [])])


# -- vLLM's --kv-transfer-config on a command line -------------------------------------------------
_KV_FLAG = "--kv-transfer-config"


def kv_flags(tokens: list[str]) -> list[tuple[str, Any]]:
    """(label, parsed config) of every `--kv-transfer-config` a command line passes to vLLM.

    vLLM's argument parser takes the value as JSON text (`--kv-transfer-config '{...}'` or
    `=...`), accepts `_` for `-` in flag names, and dotted keys (`--kv-transfer-config.kv_connector X`)
    for the fields of a JSON argument. A value that is not JSON is returned as a string, for the rule
    to refuse."""
    found: list[tuple[str, Any]] = []
    dotted: dict[str, Any] = {}
    for i, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        flag, eq, inline = token.partition("=")
        flag = flag.replace("_", "-")
        if not flag.startswith(_KV_FLAG):
            continue
        value: Any = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else None)
        if flag == _KV_FLAG:
            try:
                found.append((_KV_FLAG, json.loads(value) if isinstance(value, str) else value))
            except ValueError:
                found.append((_KV_FLAG, str(value)))
        elif flag.startswith(_KV_FLAG + "."):
            key = token.partition("=")[0][len(_KV_FLAG) + 1 :]
            try:
                parsed: Any = json.loads(value) if isinstance(value, str) else value
            except ValueError:
                parsed = value
            node = dotted
            parts = key.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
            node[parts[-1]] = parsed
    if dotted:
        found.append((f"{_KV_FLAG}.<key>", dotted))
    return found


def runtime_env_yaml(text: Any) -> Any:
    """A RayJob's `spec.runtimeEnvYAML` parsed (None when absent or unknown, the text when invalid)."""
    if not isinstance(text, str) or is_unknown(text):
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text
