"""Fail closed where the serving rules cannot see: a Helm v3 `Release` installs objects that never
reach the plan (pulumi-kubernetes runs Helm inside the provider and registers one resource), so a
chart that runs GPU or vLLM pods from its values cannot be judged by `nixl-libfabric-backend` or
`ray-gpu-pods-efa`. Workload objects carried whole in the values are judged where they are
(llm_pd_eks_policy/workloads.py); everything else that shows a GPU or vLLM workload is refused here, with the
way to make it judgeable, unless the policy config names the release in `unjudgeable.allow`.
"""

from __future__ import annotations

from typing import Any, Iterator

from pulumi_policy import ReportViolation, ResourceValidationArgs

from . import workloads
from .common import as_int, config_with_defaults, dig, is_unknown, name_of, plain, resource_policy
from .exposure import chart_name

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
# Keys whose value is a vLLM KV-transfer setting (JSON/YAML config keys, not prose).
_KV_KEYS = ("kv_transfer_config", "kvtransferconfig", "kv-transfer-config", "kv_connector", "kvconnector")
_IMAGE_KEYS = ("image", "repository", "imagerepository")
_COMMAND_KEYS = ("command", "args", "extraargs", "entrypoint")

VISIBLE_CONFIG: dict[str, dict[str, Any]] = {
    "gpuResource": {"type": "string", "default": "nvidia.com/gpu", "description": "GPU extended resource"},
    "chartsWithoutGpuPods": {
        "type": "array",
        "items": {"type": "string"},
        "description": "chart names whose templates run no GPU or vLLM pod whatever their values (the charts "
        "this program installs as Helm v3 Releases, and common cluster infrastructure); a Release of any other "
        "chart is refused, since what its templates and defaults run never reaches the plan",
        "default": [
            "aws-efa-k8s-device-plugin",
            "aws-load-balancer-controller",
            "cert-manager",
            "cluster-autoscaler",
            "dcgm-exporter",
            "external-dns",
            "ingress-nginx",
            "kube-prometheus-stack",
            "kuberay-operator",
            "metrics-server",
            "nvidia-device-plugin",
            "traefik",
        ],
    },
    "unjudgeable": {
        "type": "object",
        "description": "resources (by Pulumi name) the pack may leave unjudged: {allow: [names]}",
        "properties": {
            "allow": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Pulumi resource names to leave unjudged",
            }
        },
        "default": {"allow": []},
    },
}


def allowed_unjudgeable(args: Any, schema: dict[str, dict[str, Any]]) -> bool:
    allow = dig(config_with_defaults(args, schema), "unjudgeable", "allow")
    return isinstance(allow, list) and args.name in allow


def _signals(values: Any, gpu_resource: str) -> Iterator[str]:
    """Paths in Helm values that show a GPU or vLLM workload (outside workload objects carried whole):
    a GPU request (`gpuResource` under limits/requests, a `*gpu*` key with a positive count such as
    the vLLM production stack's `requestGPU`), DRA `resourceClaims`, a vLLM image, a command line
    that starts vLLM or passes `--kv-transfer-config`, a KV-transfer config key. Prose that names
    vLLM (an alert rule's expression, a dashboard) is no workload and is not a signal."""
    stack: list[tuple[str, Any, int]] = [("", values, 0)]
    while stack:
        path, node, depth = stack.pop()
        if depth > 64:
            continue
        if isinstance(node, dict):
            if isinstance(node.get("kind"), str) and "apiVersion" in node and workloads.is_workload_object(node):
                continue  # judged as a workload by the serving rules
            for key, value in node.items():
                here, name = f"{path}.{key}" if path else str(key), str(key).lower()
                if key == gpu_resource and path.split(".")[-1] in ("limits", "requests"):
                    yield here
                elif key == "resourceClaims" or name in _KV_KEYS:
                    yield here
                elif "gpu" in name and (as_int(value) or 0) > 0 and not isinstance(value, bool):
                    yield here
                elif name in _IMAGE_KEYS and isinstance(value, str) and _vllm_image(value):
                    yield here
                elif name in _COMMAND_KEYS and _starts_vllm(value):
                    yield here
                else:
                    stack.append((here, value, depth + 1))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v, depth + 1) for i, v in enumerate(node))


def _vllm_image(image: str) -> bool:
    """An image whose own name (the last path segment, tag and digest removed) is vLLM's
    (`vllm/vllm-openai`, `.../vllm-tpu`): a project's path (`vllm-project/semantic-router/extproc`)
    does not make its image an engine."""
    last = image.split("@")[0].rstrip("/").split("/")[-1].split(":")[0].lower()
    return "vllm" in last


def _starts_vllm(value: Any) -> bool:
    """A command line (list or text) that runs vLLM's server or hands it a KV-transfer config."""
    if not isinstance(value, (str, list)) or is_unknown(value):
        return False
    line = workloads.command_line(value)
    for argv in line.commands:
        program = argv[0].rsplit("/", 1)[-1]
        if program == "vllm" or any(a.startswith("vllm.entrypoints") for a in argv[1:3]):
            return True
        if workloads.kv_flags(argv):
            return True
    return False


def _release_visible(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != HELM_RELEASE or allowed_unjudgeable(args, VISIBLE_CONFIG):
        return
    props = plain(args.props)
    cfg = config_with_defaults(args, VISIBLE_CONFIG)
    values, files = dig(props, "values"), dig(props, "valueYamlFiles")
    why: list[str] = []
    if files and not is_unknown(files):
        why.append("its valueYamlFiles, which the pack cannot read")
    if is_unknown(values):
        why.append("values that are not known at preview as a whole (no dependency tells what they hold)")
    chart = chart_name(props)
    if chart not in (cfg.get("chartsWithoutGpuPods") or []):
        why.append(
            f"chart {chart or dig(props, 'chart')!r}, whose templates and defaults are rendered only inside the "
            f"provider (GPU pods from its defaults, or from values no rule reads, would pass unseen)"
        )
    if isinstance(values, dict):
        found = list(_signals(values, str(cfg["gpuResource"])))
        if found:
            why.append(f"values that run GPU or vLLM pods ({', '.join(found[:4])}) rendered only inside the provider")
    if why:
        report(
            f"{name_of(args)} (chart {dig(props, 'chart')!r}) cannot be judged by the serving rules: "
            f"{'; '.join(why)}. Fix: install it with kubernetes.helm.v4.Chart (its objects are registered "
            f"and judged), pass the values inline, or list {args.name!r} in this policy's "
            f"unjudgeable.allow once its pods are checked another way."
        )


helm_release_visible = resource_policy(
    name="serving-workloads-visible",
    description="A Helm v3 Release whose values run GPU or vLLM pods (or come from files) cannot be judged "
    "by the serving rules and is refused unless named in unjudgeable.allow.",
    validate=_release_visible,
    config=VISIBLE_CONFIG,
)

POLICIES = [helm_release_visible]
