"""Fail closed where the serving rules cannot see: a Helm v3 `Release` installs objects that never
reach the plan (pulumi-kubernetes runs Helm inside the provider and registers one resource), so a
chart that runs GPU or vLLM pods from its values cannot be judged by `nixl-libfabric-backend` or
`ray-gpu-pods-efa`. Workload objects carried whole in the values are judged where they are
(rules/workloads.py); everything else that shows a GPU or vLLM workload is refused here, with the
way to make it judgeable, unless the policy config names the release in `unjudgeable.allow`.
"""

from __future__ import annotations

from typing import Any, Iterator

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import config_with_defaults, dig, is_unknown, name_of, plain, resource_policy
from .workloads import WORKLOAD_KINDS

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
_VLLM_WORDS = ("vllm", "kv_transfer_config", "kv-transfer-config", "kv_connector", "nixlconnector")

VISIBLE_CONFIG: dict[str, dict[str, Any]] = {
    "gpuResource": {"type": "string", "default": "nvidia.com/gpu", "description": "GPU extended resource"},
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


def _signals(node: Any, gpu_resource: str, path: str = "", depth: int = 0) -> Iterator[str]:
    """Paths in Helm values that show a GPU or vLLM workload, outside workload objects carried whole."""
    if depth > 64:
        return
    if isinstance(node, dict):
        if isinstance(node.get("kind"), str) and node["kind"] in WORKLOAD_KINDS and "apiVersion" in node:
            return  # judged as a workload by the serving rules
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if key == gpu_resource and path.split(".")[-1] in ("limits", "requests"):
                yield here
            elif key == "resourceClaims":
                yield here
            elif isinstance(key, str) and any(w in key.lower() for w in _VLLM_WORDS):
                yield here
            else:
                yield from _signals(value, gpu_resource, here, depth + 1)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _signals(value, gpu_resource, f"{path}[{i}]", depth + 1)
    elif isinstance(node, str) and not is_unknown(node) and any(w in node.lower() for w in _VLLM_WORDS):
        if "apiVersion" not in node:  # text that is a manifest is opened by the workload rules
            yield path


def _release_visible(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != HELM_RELEASE or allowed_unjudgeable(args, VISIBLE_CONFIG):
        return
    props = plain(args.props)
    cfg = config_with_defaults(args, VISIBLE_CONFIG)
    values, files = dig(props, "values"), dig(props, "valueYamlFiles")
    why: list[str] = []
    if files and not is_unknown(files):
        why.append("its valueYamlFiles, which the pack cannot read")
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
