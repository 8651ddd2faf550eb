"""Rules for the KubeRay RayService: NIXL moves the KV cache over LIBFABRIC (EFA), and GPU pods
get the EFA devices and the libfabric provider.

NIXL's default backend is UCX, which on EKS falls back to TCP over the ENA interface: the service
works, only slowly, so nothing but a policy notices. Likewise a GPU pod without
`vpc.amazonaws.com/efa` devices or `FI_PROVIDER=efa` silently uses sockets.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional

import yaml
from pulumi_policy import (
    ReportViolation,
    ResourceValidationArgs,
)

from .common import (
    RAY_CLUSTER,
    RAY_SERVICE,
    UNKNOWN,
    as_int,
    config_with_defaults,
    dig,
    is_unknown,
    known_list,
    name_of,
    plain,
    resource_policy,
)


class ServeConfigError(ValueError):
    pass


def serve_config(spec: Any) -> Any:
    """`spec.serveConfigV2` parsed (it is YAML text); None when absent, the sentinel when unknown."""
    text = dig(spec, "serveConfigV2")
    if text is None or is_unknown(text) or isinstance(text, (dict, list)):
        return text
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ServeConfigError(str(error)) from None


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


# -- 6. NIXL over LIBFABRIC --------------------------------------------------------------------
NIXL_CONFIG: dict[str, dict[str, Any]] = {
    "requiredBackend": {
        "type": "string",
        "description": "NIXL backend the KV transfer must name (LIBFABRIC = EFA; NIXL defaults to UCX)",
        "default": "LIBFABRIC",
    },
}


def _nixl_backend(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != RAY_SERVICE:
        return
    required = str(config_with_defaults(args, NIXL_CONFIG)["requiredBackend"]).upper()
    spec = dig(plain(args.props), "spec")
    try:
        config = serve_config(spec)
    except ServeConfigError as error:
        report(f"{name_of(args)}: spec.serveConfigV2 is not valid YAML ({error}). Fix: build it "
               f"with yaml.safe_dump from the serve config dict.")
        return
    if config is None or is_unknown(config):
        return
    for path, node in walk(config):
        if not isinstance(node, dict) or node.get("kv_connector") != "NixlConnector":
            continue
        backends = dig(node, "kv_connector_extra_config", "backends")
        if is_unknown(backends):
            continue
        names = [str(b).upper() for b in (backends if isinstance(backends, list) else [backends] if backends else [])]
        if required not in names:
            shown = names or "unset (NIXL then uses UCX)"
            report(
                f"{name_of(args)}: NixlConnector at {path or '(root)'} has backends {shown}; the "
                f"KV cache would not travel over EFA. Fix: kv_connector_extra_config: "
                f"{{backends: ['{required}']}}."
            )


nixl_libfabric = resource_policy(
    name="nixl-libfabric-backend",
    description="A RayService whose serve config uses NixlConnector names LIBFABRIC in its NIXL backends.",
    validate=_nixl_backend,
    config=NIXL_CONFIG,
)


# -- 7. EFA devices in GPU pods ----------------------------------------------------------------
POD_EFA_CONFIG: dict[str, dict[str, Any]] = {
    "gpuResource": {"type": "string", "default": "nvidia.com/gpu", "description": "GPU extended resource"},
    "efaResource": {"type": "string", "default": "vpc.amazonaws.com/efa", "description": "EFA extended resource"},
    "fiProvider": {"type": "string", "default": "efa", "description": "required value of env FI_PROVIDER"},
}


def ray_groups(resource_type: str, spec: Any) -> list[tuple[str, Any]]:
    """(label, pod spec) of a RayService's or RayCluster's head and worker groups."""
    cluster = dig(spec, "rayClusterConfig") if resource_type == RAY_SERVICE else spec
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


def env_value(container: Any, name: str) -> Any:
    """The literal value of env `name`: None when absent, UNKNOWN when set from elsewhere or unknown."""
    env = dig(container, "env")
    if is_unknown(env):
        return UNKNOWN
    for item in env or []:
        if isinstance(item, dict) and item.get("name") == name:
            if "valueFrom" in item or is_unknown(item.get("value")):
                return UNKNOWN
            return item.get("value")
    return None


def _gpu_pods_efa(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in (RAY_SERVICE, RAY_CLUSTER):
        return
    cfg = config_with_defaults(args, POD_EFA_CONFIG)
    gpu_res, efa_res, provider = cfg["gpuResource"], cfg["efaResource"], cfg["fiProvider"]
    spec = dig(plain(args.props), "spec")
    for label, pod in ray_groups(args.resource_type, spec):
        for container in known_list(dig(pod, "containers")) or []:
            gpus = requested(container, gpu_res)
            if not gpus:  # none, or unknown
                continue
            problems = []
            efa = requested(container, efa_res)
            if efa == 0:
                problems.append(f"request '{efa_res}' devices (resources.limits)")
            value = env_value(container, "FI_PROVIDER")
            if not is_unknown(value) and value != provider:
                problems.append(f"set env FI_PROVIDER={provider} (is {value!r})" if value else
                                f"set env FI_PROVIDER={provider}")
            if problems:
                cname = dig(container, "name")
                report(
                    f"{name_of(args)}, {label}, container '{cname}' requests "
                    f"{gpus} x {gpu_res} but does not use EFA. Fix: " + "; ".join(problems) + "."
                )


gpu_pods_efa = resource_policy(
    name="ray-gpu-pods-efa",
    description="Ray worker containers that request GPUs also request EFA devices and set FI_PROVIDER=efa.",
    validate=_gpu_pods_efa,
    config=POD_EFA_CONFIG,
)

POLICIES = [nixl_libfabric, gpu_pods_efa]
