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
import re
from typing import Any, Iterator, Optional, Sequence

import yaml
from pulumi_policy import (
    ReportViolation,
    ResourceValidationArgs,
)

from . import yaml_text
from .common import (
    config_with_defaults,
    dig,
    is_unknown,
    known_list,
    plain,
    resource_policy,
)
from .workloads import (
    Workload,
    command_line,
    container_command,
    containers,
    kv_flags,
    workloads,
)

_INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
RayObject = Workload  # a KubeRay object (label, kind, obj), as the Ray-only rules see it


def ray_objects(resource_type: str, props: Any) -> list[Workload]:
    """Every KubeRay object a Kubernetes resource declares (itself, or embedded in its inputs)."""
    return [w for w in workloads(resource_type, props) if w.is_ray]


class ServeConfigError(ValueError):
    """A serve config or KV-transfer setting the pack cannot read; `fix` says how to make it readable."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = (
            fix
            or "KubeRay needs YAML text and vLLM JSON. Fix: build it with yaml.safe_dump / json.dumps "
            "from the config dict."
        )


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
KNOWN_BUILDERS = [
    "ray.serve.llm:build_pd_openai_app",
    "ray.serve.llm:build_openai_app",
    "llm_pd_eks_conditional_pd:build_pd_openai_app",  # this program's own runtime module
]


NIXL_CONFIG: dict[str, dict[str, Any]] = {
    "requiredBackend": {
        "type": "string",
        "description": "the only NIXL backend the KV transfer may list (LIBFABRIC = EFA; NIXL defaults to UCX)",
        "default": "LIBFABRIC",
    },
    "knownServeBuilders": {
        "type": "array",
        "items": {"type": "string"},
        "description": "serve application builders (import_path) whose KV connector comes from the serve config "
        "the pack reads; any other builder is refused",
        "default": KNOWN_BUILDERS,
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


_NOT_KNOWN = "not known at preview (built in the same apply), so no rule can read it"
_VARIABLE = re.compile(r"^\$\(([A-Za-z_][A-Za-z0-9_]*)\)$")


def _expanded(value: Any, container: Any) -> Any:
    """`$(VAR)` as Kubernetes expands it in command and args: the container's literal env value
    (parsed as JSON when it is JSON); the text itself when VAR is not a literal of the container."""
    match = _VARIABLE.match(value) if isinstance(value, str) else None
    if match is None or container is None:
        return value
    for item in known_list(dig(container, "env")) or []:
        if dig(item, "name") == match.group(1) and isinstance(dig(item, "value"), str):
            try:
                return json.loads(dig(item, "value"))
            except ValueError:
                return dig(item, "value")
    return value


def kv_configs(work: Workload, builders: Sequence[str] = KNOWN_BUILDERS) -> Iterator[tuple[str, Any]]:
    """(where, node) of every KV-transfer config a workload hands to vLLM: the serve config of a
    RayService, `--kv-transfer-config` on a RayJob entrypoint or any container's command line. A
    serve config that is not YAML text is yielded as a ServeConfigError."""
    if work.kind == "RayService":
        try:
            config = serve_config(dig(work.obj, "spec"))
        except ServeConfigError as error:
            yield "spec.serveConfigV2", error
            config = None
        if is_unknown(config):
            yield "spec.serveConfigV2", ServeConfigError(_NOT_KNOWN, "Fix: pass it as literal YAML text.")
        if isinstance(config, (dict, list)):
            for path, node in walk(config):
                yield f"serveConfigV2 {path or '(root)'}", node
                builder = node.get("import_path") if isinstance(node, dict) else None
                if isinstance(builder, str) and builder not in builders:
                    yield (
                        f"serveConfigV2 {path}.import_path",
                        ServeConfigError(
                            f"the builder {builder[:80]!r}, whose code is not in the plan and may choose any KV "
                            f"connector",
                            "Fix: use ray.serve.llm's builders, or list it in knownServeBuilders once reviewed.",
                        ),
                    )
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
    lines: list[tuple[str, Any, Any]] = []
    if work.kind == "RayJob":
        lines.append(("spec.entrypoint", command_line(dig(work.obj, "spec", "entrypoint")), None))
    for label, pod in work.pods():
        for container in containers(pod):
            where = f"{label} container '{dig(container, 'name')}' command"
            lines.append((where, container_command(container), container))
    for where, line, container in lines:
        for flag, value in (found for argv in line.commands for found in kv_flags(argv)):
            value = _expanded(value, container)
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
    if not args.resource_type.startswith("kubernetes:"):
        return
    for work in workloads(args.resource_type, plain(args.props)):
        for where, node in kv_configs(work, [str(b) for b in cfg.get("knownServeBuilders") or []]):
            if isinstance(node, ServeConfigError):
                report(f"{work.label}: {where} is {node}. {node.fix}")
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

POLICIES = [nixl_libfabric]
