"""Sizing before apply: from a workload to prefill/decode replicas, nodes, P:D ratio and $/Mtok.

A documented roofline with a queue in front, not a simulator. Every figure is per *replica* (one
vLLM engine over a tensor-parallel group of `tp` GPUs on one node) and comes from:

* **prefill is compute-bound**: time = a per-forward intercept + FLOPs on the non-embedding parameters
  plus attention (`prefill_flops`) / (tp x the GPU's dense BF16 peak x MFU x the TP term);
* **decode is memory-bound**: one step = an intercept + the weights it streams (`decode_weight_bytes`)
  plus every running sequence's KV cache (`ModelSpec.kv_bytes_per_token`) at tp x memory bandwidth x
  MBU x the TP term (or the compute roof, if higher); the constants are one `EngineConstants` row per
  engine and dtype (`ENGINE_CONSTANTS`), or calibration/<stack>.yaml's (`make calibrate`);
* **queueing**: each prefill replica is an M/G/1 queue (Poisson arrivals split evenly; DistServe, OSDI'24,
  §4.1 models a prefill instance as M/D/1; Pollaczek-Khinchine gives the mean wait for any service
  distribution) with the usual exponential tail for the percentile; a decode replica holds as many
  sequences as Little's law says (rate x output tokens x step time);
* **KV transfer** per `kv_band`, per TP rank over its own EFA interfaces: line rate as the bound, the
  measured per-interface NIXL efficiency as the plan, one TCP flow only where the type has no
  GPUDirect RDMA (the failure case);
* **aggregated** (no disaggregation, for comparison): the same replicas do both, vLLM chunked prefill
  riding prefill chunks on decode steps, so a step that carries a chunk is slower (the interference
  DistServe and Splitwise avoid by splitting).

The rows' sources are at each constant; tests/data/sizing-calibration/ holds the published points
that fit (or, held out, judge) them. Where the model is weak is in docs/sizing.md.

Modules: `engine` (constants, FLOPs, bytes, the replica), `workload` (the workload file), `queueing`,
`kv` (the KV band's text), `plan` (the search and the whole answer), `calibration`
(calibration/<stack>.yaml) and `point` (the point query).
"""

from __future__ import annotations

from llm_pd_eks_sizing.model.calibration import CalibratedConstants, Calibration, calibration_path, load_calibration
from llm_pd_eks_sizing.model.engine import (
    CALIBRATION_ONLY_EMBEDDINGS,
    ENGINE_CONSTANTS,
    NIM_FP8,
    TRTLLM_BF16,
    VLLM_BF16,
    VLLM_LARGE_GPU_GIB,
    EngineConstants,
    Replica,
    decode_weight_bytes,
    embedding_params,
    engine_constants,
    gpu_memory_gib,
    prefill_flops,
    vllm_step_budget,
)
from llm_pd_eks_sizing.model.kv import (
    NIXL_EFA_EFFICIENCY,
    NIXL_EFA_INTERFACE_GBPS,
    NIXL_EFA_MEASURED_GBPS,
    NIXL_EFA_MEASURED_INTERFACES,
    NIXL_EFA_SOURCE,
    KvBand,
    band_text,
    kv_band,
    kv_rank_floor_gbps,
)
from llm_pd_eks_sizing.model.plan import (
    COST_BASIS,
    MAX_REPLICAS,
    Placement,
    Plan,
    Side,
    Sizing,
    hourly_price,
    search_placement,
    size,
    size_aggregated,
    size_decode,
    size_prefill,
    tp_options,
    usd_per_million_output_tokens,
    usd_per_million_total_tokens,
)
from llm_pd_eks_sizing.model.point import PointAnswer, point_query
from llm_pd_eks_sizing.model.queueing import AggregatedLoad, aggregated_load, mg1_wait_quantile
from llm_pd_eks_sizing.model.workload import (
    MAX_WORKLOAD_BYTES,
    Slo,
    TokenLengths,
    Workload,
    load_workload,
    parse_workload,
)

__all__ = [
    "CALIBRATION_ONLY_EMBEDDINGS",
    "COST_BASIS",
    "ENGINE_CONSTANTS",
    "MAX_REPLICAS",
    "MAX_WORKLOAD_BYTES",
    "NIM_FP8",
    "NIXL_EFA_EFFICIENCY",
    "NIXL_EFA_INTERFACE_GBPS",
    "NIXL_EFA_MEASURED_GBPS",
    "NIXL_EFA_MEASURED_INTERFACES",
    "NIXL_EFA_SOURCE",
    "TRTLLM_BF16",
    "VLLM_BF16",
    "VLLM_LARGE_GPU_GIB",
    "AggregatedLoad",
    "CalibratedConstants",
    "Calibration",
    "EngineConstants",
    "KvBand",
    "Placement",
    "Plan",
    "PointAnswer",
    "Replica",
    "Side",
    "Sizing",
    "Slo",
    "TokenLengths",
    "Workload",
    "aggregated_load",
    "band_text",
    "calibration_path",
    "decode_weight_bytes",
    "embedding_params",
    "engine_constants",
    "gpu_memory_gib",
    "hourly_price",
    "kv_band",
    "kv_rank_floor_gbps",
    "load_calibration",
    "load_workload",
    "mg1_wait_quantile",
    "parse_workload",
    "point_query",
    "prefill_flops",
    "search_placement",
    "size",
    "size_aggregated",
    "size_decode",
    "size_prefill",
    "tp_options",
    "usd_per_million_output_tokens",
    "usd_per_million_total_tokens",
    "vllm_step_budget",
]
