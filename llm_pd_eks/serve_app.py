"""The Serve application of the RayService: Ray Serve LLM's `build_pd_openai_app`, one `LLMConfig` per role,
or (serving.mode `aggregated`) Ray Serve LLM's `build_openai_app` with one `LLMConfig` and no KV transfer.

`serveConfigV2` is `yaml.safe_dump` of the dict built here; the shape of `args` is that of Ray's
`PDServingArgs` (prefill_config / decode_config, each an `LLMConfig`) or `LLMServingArgs`
(llm_configs), with the OpenAI ingress's own Serve options (`ingress_deployment_config`) and Serve's
HTTP request timeout (`http_options`) from llm_pd_eks/serve_limits.py.
- Prefill and decode never share a node: each role's LLM config asks, in every placement bundle, for
  its own custom Ray resource (`prefill_slot` / `decode_slot`), which only that role's worker group
  advertises (llm_pd_eks/ray_worker_pod.py).
- Autoscaling: each role's `target_ongoing_requests`, `max_ongoing_requests` and up/downscale
  delays come from the stack config (`make size WRITE=1` derives them: llm_pd_eks_tools/size.py
  `autoscaling_values`).
- NIXL moves the KV cache over LIBFABRIC (libfabric's `efa` provider with device RDMA). Left on
  its default backend (UCX) it falls back to TCP over the VPC and everything still "works",
  only many times slower.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from .catalog import GpuInstanceType
from .config.serving import AGGREGATED_ROLE, ServingConfig
from .ray_resources import role_resource
from .serve_limits import http_options, ingress_deployment_config
from .serve_routing import CONDITIONAL_IMPORT_PATH, conditional, decode_experimental_configs, request_router_config

IMPORT_PATH = "ray.serve.llm:build_pd_openai_app"
AGGREGATED_IMPORT_PATH = "ray.serve.llm:build_openai_app"
# A decode replica whose NIXL read of a request's KV blocks fails (the prefill replica scaled down or
# restarted, its lease on the blocks expired, a transfer error on EFA) recomputes those blocks itself
# instead of failing the request: vLLM 0.26's default `fail` finishes it with an error
# (vllm/config/kv_transfer.py `kv_load_failure_policy: Literal["recompute", "fail"] = "fail"`,
# vllm/v1/core/sched/scheduler.py `recompute_kv_load_failures`). The client gets a slower answer,
# not an error; failed reads still show as vllm:nixl_num_failed_transfers (llm_pd_eks/metrics.py).
KV_LOAD_FAILURE_POLICY = "recompute"
KV_TRANSFER_CONFIG = {
    "kv_connector": "NixlConnector",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
    "kv_load_failure_policy": KV_LOAD_FAILURE_POLICY,
}


def model_source(serving: ServingConfig) -> str:
    """Where Ray Serve LLM loads the weights from: `serving.weightsS3Uri`, else the Hugging Face id.

    An `s3://` model_source is a cloud mirror to Ray Serve LLM 2.58 (engines/vllm/vllm_models.py
    `from_llm_config`: `is_remote_path` -> `CloudMirrorConfig(bucket_uri=model_source)`, the model
    keeping `model_id` as its name), downloaded into the Hugging Face cache on every replica node."""
    return serving.weights_s3_uri or serving.model_id


def llm_config(serving: ServingConfig, role: str, instance: GpuInstanceType) -> dict[str, Any]:
    """One `LLMConfig` (as a dict) for the prefill or the decode side, or the aggregated group (no KV
    connector: its engines prefill what they decode)."""
    group = serving.groups()[role]
    config: dict[str, Any] = {
        "model_loading_config": {"model_id": serving.model_id, "model_source": model_source(serving)},
        "accelerator_type": instance.ray_accelerator_type,
        "engine_kwargs": {
            "tensor_parallel_size": group.tensor_parallel_size,
            "max_model_len": serving.max_model_len,
            "kv_cache_dtype": serving.kv_cache_dtype,
        },
        # One bundle per TP rank; STRICT_PACK keeps a TP group on one node (NVLink, not EFA).
        "placement_group_config": {
            "bundle_per_worker": {"GPU": 1, role_resource(role): 1},
            "strategy": "STRICT_PACK",
        },
        "deployment_config": {
            "max_ongoing_requests": group.max_ongoing_requests,
            "autoscaling_config": {
                "min_replicas": group.min_replicas,
                "max_replicas": group.max_replicas,
                "target_ongoing_requests": group.target_ongoing_requests,
                "upscale_delay_s": group.upscale_delay_s,
                "downscale_delay_s": group.downscale_delay_s,
            },
        },
    }
    if not serving.aggregated_mode:
        # no YAML anchors between the two roles' copies
        config["engine_kwargs"]["kv_transfer_config"] = copy.deepcopy(KV_TRANSFER_CONFIG)
    router = request_router_config(serving, role, instance)  # llm_pd_eks/serve_routing.py
    if router is not None:
        config["deployment_config"]["request_router_config"] = router
        config["engine_kwargs"]["enable_prefix_caching"] = True
    if role == "decode" and conditional(serving):
        config["experimental_configs"] = decode_experimental_configs(serving)
    return config


def application(serving: ServingConfig, instance: GpuInstanceType) -> dict[str, Any]:
    """The one Serve application: the P/D OpenAI app, or the aggregated one."""
    ingress = ingress_deployment_config(serving.ingress_facing_groups())
    if serving.aggregated_mode:
        import_path = AGGREGATED_IMPORT_PATH
        args: dict[str, Any] = {"llm_configs": [llm_config(serving, AGGREGATED_ROLE, instance)]}
    else:
        import_path = CONDITIONAL_IMPORT_PATH if conditional(serving) else IMPORT_PATH
        args = {
            "prefill_config": llm_config(serving, "prefill", instance),
            "decode_config": llm_config(serving, "decode", instance),
        }
    return {
        "name": "llm",
        "route_prefix": "/",
        "import_path": import_path,
        "args": {**args, "ingress_deployment_config": ingress},
    }


def serve_config(serving: ServingConfig, instance: GpuInstanceType) -> dict[str, Any]:
    """The Serve deploy config: Serve's HTTP options and the one application."""
    return {"http_options": http_options(serving), "applications": [application(serving, instance)]}


def serve_config_yaml(serving: ServingConfig, instance: GpuInstanceType) -> str:
    return yaml.safe_dump(serve_config(serving, instance), sort_keys=False)
