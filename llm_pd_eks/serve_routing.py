"""`serving.routing` rendered into the Serve application: routers per role, and the decode-only path.

- Prefix-aware routing is each role's Serve `request_router_config` (Ray 2.58.0 ray/serve/config.py
  `RequestRouterConfig`: `request_router_class`, `request_router_kwargs`; the LLMConfig's
  `deployment_config` passes it to `serve.deployment`), naming Ray Serve LLM's own
  `PrefixCacheAffinityRouter` (ray/serve/llm/request_router.py) with Serve's `FIFOMixin` in front
  (llm_pd_eks/runtime/prefix_router.py says why: Ray's class alone drops requests), with the
  `initialize_state` arguments of Ray's class.
  The decode role's router picks the decode replica for a request from the ingress; the prefill role's
  router picks the prefill replica the decode server's prefill handle calls. The role's vLLM engine
  gets `enable_prefix_caching: true` explicitly: the router only pays where the engine caches.
- Conditional disaggregation needs a decode server that can keep a request: Ray's P/D builder binds
  `PDDecodeServer` (ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py) and ignores
  the LLMConfig's `server_cls`. The application then imports `build_pd_openai_app` from the project's
  runtime module (llm_pd_eks/runtime/conditional_pd.py), which calls Ray's own builder with that one
  class swapped for a subclass; the threshold travels in the decode LLMConfig's `experimental_configs`
  (where Ray's PDDecodeServer already reads its own switches).
- Both runtime modules reach every Ray pod as one ConfigMap on the Python path
  (llm_pd_eks/ray_service.py), and only when either feature is on. The ConfigMap is named by the hash
  of its content and `immutable: true`: a running pod's mounted module never changes under it (a pod
  of the old cluster that starts a replica during a NewCluster upgrade still loads the old code, and
  a rollback names the old ConfigMap again); a new module is a new ConfigMap, and Pulumi deletes the
  old one only after the RayService update that switched the cluster has finished (ray_service.py).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Optional

from .catalog import GpuInstanceType
from .config.serving import AGGREGATED_ROLE, ReplicaGroupConfig, ServingConfig
from .models import MODELS

RAY_PREFIX_ROUTER_CLASS = "ray.serve.llm.request_router.PrefixCacheAffinityRouter"  # what the project's extends
PREFIX_ROUTER_MODULE = "llm_pd_eks_prefix_router"  # the importable name inside the image
PREFIX_ROUTER_CLASS = f"{PREFIX_ROUTER_MODULE}.PrefixCacheAffinityFifoRouter"
# Ray's PrefixCacheAffinityRouter.initialize_state defaults keep the prefix tree unbounded
# (do_eviction False); a long-lived replica set must bound it. Ray's eviction loop trims each replica's
# share of the tree (prefix_tree.py `_run_eviction_loop`: per tenant, characters above the threshold
# evicted down to the target), so the cap is one replica's KV cache in characters: what the engine can
# hold cached, no more (older entries name blocks vLLM has already evicted), at CHARS_PER_TOKEN
# characters a token (English text under Llama/Qwen BPE tokenizers: about four), the target 90 % of it.
CHARS_PER_TOKEN = 4
EVICTION_TARGET_SHARE = 0.9
# vLLM's default gpu_memory_utilization: the share of each GPU the engine budgets (weights + KV cache).
ENGINE_MEMORY_SHARE = 0.9
# The tree's bounds where the engine's KV capacity is unknown or smaller: Ray's own eviction sizes.
RAY_EVICTION_THRESHOLD_CHARS, RAY_EVICTION_TARGET_CHARS = 400_000, 360_000


def replica_kv_tokens(serving: ServingConfig, group: ReplicaGroupConfig, instance: GpuInstanceType) -> int:
    """Tokens one replica's KV cache holds: vLLM's memory budget over the TP group, less the weights,
    over the model's KV bytes a token (llm_pd_eks/models.py)."""
    model = MODELS[serving.model_id]
    budget = group.tensor_parallel_size * instance.gpu_memory_gib * 2**30 * ENGINE_MEMORY_SHARE
    free = budget - model.weight_bytes(2)
    return max(0, int(free // model.kv_bytes_per_token(serving.kv_cache_dtype_bytes)))


def prefix_tree_eviction(serving: ServingConfig, role: str, instance: GpuInstanceType) -> dict[str, Any]:
    """Ray's eviction arguments, sized to one replica's KV cache (never below Ray's own sizes)."""
    threshold = max(
        RAY_EVICTION_THRESHOLD_CHARS, CHARS_PER_TOKEN * replica_kv_tokens(serving, serving.groups()[role], instance)
    )
    target = (
        RAY_EVICTION_TARGET_CHARS
        if threshold == RAY_EVICTION_THRESHOLD_CHARS
        else int(threshold * EVICTION_TARGET_SHARE)
    )
    return {"do_eviction": True, "eviction_threshold_chars": threshold, "eviction_target_chars": target}


RUNTIME_MODULE = "llm_pd_eks_conditional_pd"  # the importable name inside the image
RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
RUNTIME_SOURCE = RUNTIME_DIR / "conditional_pd.py"
# Every module the runtime ConfigMap carries: the name the pods import -> its source here.
RUNTIME_SOURCES = {RUNTIME_MODULE: RUNTIME_SOURCE, PREFIX_ROUTER_MODULE: RUNTIME_DIR / "prefix_router.py"}
RUNTIME_MOUNT = "/opt/llm-pd-eks/python"  # on PYTHONPATH in every Ray container
CONDITIONAL_IMPORT_PATH = f"{RUNTIME_MODULE}:build_pd_openai_app"
THRESHOLD_KEY = "llm_pd_eks_decode_only_below_tokens"  # decode LLMConfig experimental_configs


def prefix_aware(serving: ServingConfig, role: str) -> bool:
    """Whether `role` routes by prefix; the aggregated group follows `prefixAware.decode`, the role the
    ingress calls."""
    flag = "decode" if role == AGGREGATED_ROLE else role
    return bool(getattr(serving.routing.prefix_aware, flag))


def imbalanced_threshold(serving: ServingConfig, group: ReplicaGroupConfig) -> int:
    """Queue-length gap at which load wins over prefix affinity: set, or the role's Serve target."""
    configured = serving.routing.imbalanced_threshold
    return configured if configured is not None else max(1, math.ceil(group.target_ongoing_requests))


def request_router_config(serving: ServingConfig, role: str, instance: GpuInstanceType) -> Optional[dict[str, Any]]:
    """The role's Serve request_router_config, or None for Serve's default (power of two choices)."""
    if not prefix_aware(serving, role):
        return None
    group = serving.groups()[role]
    return {
        "request_router_class": PREFIX_ROUTER_CLASS,
        "request_router_kwargs": {
            "imbalanced_threshold": imbalanced_threshold(serving, group),
            "match_rate_threshold": serving.routing.match_rate_threshold,
            **prefix_tree_eviction(serving, role, instance),
        },
    }


def conditional(serving: ServingConfig) -> bool:
    return serving.routing.decode_only_below_tokens is not None


def decode_experimental_configs(serving: ServingConfig) -> dict[str, Any]:
    below = serving.routing.decode_only_below_tokens
    return {THRESHOLD_KEY: below} if below is not None else {}


def runtime_needed(serving: ServingConfig) -> bool:
    """Whether the pods need the runtime modules: the decode-only path or a prefix-aware role."""
    return conditional(serving) or any(prefix_aware(serving, role) for role in serving.groups())


def runtime_source() -> str:
    return RUNTIME_SOURCE.read_text()


def runtime_digest() -> str:
    """A short hash of the runtime modules: on the pods' annotations, so a new module rolls the cluster."""
    return hashlib.sha256(json.dumps(runtime_configmap_data(), sort_keys=True).encode()).hexdigest()[:16]


def preview_line(serving: ServingConfig) -> str:
    """What the plan's routing does, in one line."""
    roles = []
    for role in serving.groups():
        if prefix_aware(serving, role):
            gap = imbalanced_threshold(serving, serving.groups()[role])
            router = "PrefixCacheAffinityRouter with FIFO fallback"
            roles.append(f"{role} prefix-aware ({router}, load wins past a {gap}-request gap)")
        else:
            roles.append(f"{role} power-of-two")
    below = serving.routing.decode_only_below_tokens
    if serving.aggregated_mode:
        return f"routing: {', '.join(roles)}; aggregated: every request prefilled where it is decoded"
    path = f"prompts under {below} tokens prefilled on decode" if below else "every request through prefill"
    return f"routing: {', '.join(roles)}; {path}"


RUNTIME_CONFIGMAP_PREFIX = "llm-pd-eks-runtime"
RUNTIME_DIGEST_ANNOTATION = "llm-pd-eks/runtime-module"
RUNTIME_VOLUME = "llm-pd-eks-runtime"


def runtime_configmap_data() -> dict[str, str]:
    return {f"{module}.py": path.read_text() for module, path in sorted(RUNTIME_SOURCES.items())}


def runtime_configmap_name() -> str:
    """`llm-pd-eks-runtime-<hash of the modules>`: a different module is a different ConfigMap."""
    return f"{RUNTIME_CONFIGMAP_PREFIX}-{runtime_digest()}"


def with_runtime_module(group: dict[str, Any]) -> dict[str, Any]:
    """A Ray group's pod template with the runtime modules mounted and on PYTHONPATH (every container:
    Serve imports the builder and the router class wherever the controller's build task lands, the
    decode class wherever a decode replica starts, and a router wherever a handle routes). Their hash
    is a pod annotation: Python loads a module once per process, so a new module needs new pods
    (KubeRay's upgrade, as for an image change)."""
    template = group["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {})[RUNTIME_DIGEST_ANNOTATION] = runtime_digest()
    spec = template["spec"]
    spec.setdefault("volumes", []).append({"name": RUNTIME_VOLUME, "configMap": {"name": runtime_configmap_name()}})
    for container in spec["containers"]:
        container.setdefault("volumeMounts", []).append(
            {"name": RUNTIME_VOLUME, "mountPath": RUNTIME_MOUNT, "readOnly": True}
        )
        container.setdefault("env", []).append({"name": "PYTHONPATH", "value": RUNTIME_MOUNT})
    return group
