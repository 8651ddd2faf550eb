"""The metric names and label names the alerts, dashboards and `make verify` query: one place.

How a vLLM metric reaches Prometheus under Ray Serve LLM (Ray 2.57.0 and vLLM 0.25.1, what the AWS
Ray LLM DLC carries: llm_pd_eks/versions.py):
- `LLMConfig.log_engine_metrics` defaults to True (ray/llm/_internal/serve/core/configs/llm_config.py),
  so the engine is built with vLLM's `RayPrometheusStatLogger`
  (ray/llm/_internal/serve/engines/vllm/vllm_engine.py).
- That logger (vllm/v1/metrics/ray_wrappers.py) registers each `vllm:` metric as a Ray metric with
  every character outside [a-zA-Z0-9_] replaced by `_` and adds a `ReplicaId` tag.
- Ray's metrics agent exports Ray metrics with the `ray_` namespace through OpenTelemetry's
  Prometheus reader (ray/_private/telemetry/open_telemetry_metric_recorder.py, on by default via
  RAY_enable_open_telemetry), which appends `_total` to counters.
So `vllm:nixl_num_failed_transfers` (a counter) is scraped as `ray_vllm_nixl_num_failed_transfers_total`
and the histogram `vllm:nixl_bytes_transferred` as `ray_vllm_nixl_bytes_transferred_{bucket,sum,count}`.
tests/test_observability_exposition.py renders these names through Ray's own recorder to keep this
table honest. Caveat from that recorder's docstring: a histogram's `_sum` is rebuilt from bucket
midpoints, so sums (and throughputs derived from them) are approximations; counts are exact.

Sources of the vLLM names, read in the vllm==0.25.1 wheel from PyPI (commit g752a3a504):
vllm/v1/metrics/loggers.py (scheduler gauges, TTFT and inter-token histograms and their bucket
bounds), vllm/v1/metrics/ray_wrappers.py (the `_`-substitution and the `ReplicaId` tag) and the NIXL
connector's stats module (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py, `NixlPromMetrics`): NIXL transfer
metrics are recorded by the worker that pulls the KV blocks, i.e. on the decode side; expired KV
leases are counted on the prefill side.
"""

from __future__ import annotations

RAY_PREFIX = "ray_"


def ray_vllm(vllm_name: str) -> str:
    """The Prometheus name of a `vllm:` metric exported through Ray (see the module docstring)."""
    assert vllm_name.startswith("vllm:"), vllm_name
    return RAY_PREFIX + "vllm_" + vllm_name.removeprefix("vllm:")


HISTOGRAM, GAUGE, COUNTER = "histogram", "gauge", "counter"

# Every vLLM metric this module names, with its type: `vLLM name -> type`. tests/ray_exporter.py
# registers these with Ray's own recorder; tests/test_metric_names.py judges them against vLLM's.
VLLM_METRICS: dict[str, str] = {}


def scraped_name(vllm_name: str) -> str:
    """The name a metric of VLLM_METRICS is scraped under: `ray_vllm(...)`, a counter's with `_total`."""
    return ray_vllm(vllm_name) + ("_total" if VLLM_METRICS[vllm_name] == COUNTER else "")


def _vllm(vllm_name: str, kind: str) -> str:
    VLLM_METRICS[vllm_name] = kind
    return scraped_name(vllm_name)


# vLLM engine metrics (labels: model_name, engine, ReplicaId).
TTFT = _vllm("vllm:time_to_first_token_seconds", HISTOGRAM)
ITL = _vllm("vllm:inter_token_latency_seconds", HISTOGRAM)
RUNNING = _vllm("vllm:num_requests_running", GAUGE)
WAITING = _vllm("vllm:num_requests_waiting", GAUGE)
KV_CACHE_USAGE = _vllm("vllm:kv_cache_usage_perc", GAUGE)  # 1 = full
GENERATION_TOKENS = _vllm("vllm:generation_tokens", COUNTER)

# NIXL KV connector metrics (NixlPromMetrics).
NIXL_XFER_TIME = _vllm("vllm:nixl_xfer_time_seconds", HISTOGRAM)  # seconds per transfer
NIXL_BYTES = _vllm("vllm:nixl_bytes_transferred", HISTOGRAM)  # bytes per transfer
NIXL_FAILED_TRANSFERS = _vllm("vllm:nixl_num_failed_transfers", COUNTER)
NIXL_FAILED_NOTIFICATIONS = _vllm("vllm:nixl_num_failed_notifications", COUNTER)
NIXL_KV_EXPIRED = _vllm("vllm:nixl_num_kv_expired_reqs", COUNTER)  # prefill side

# Ray Serve metrics (ray/serve/_private/replica.py, autoscaling_state.py, deployment_state.py).
SERVE_TARGET_REPLICAS = RAY_PREFIX + "serve_autoscaling_target_replicas"  # gauge, labels: deployment, application
SERVE_REPLICA_HEALTHY = RAY_PREFIX + "serve_deployment_replica_healthy"  # gauge, healthy replicas
# Ray 2.58.0 ray/serve/_private/request_ingress_metrics.py (the HTTP proxy's request counter, labels
# route, method, application, status_code) and router.py (requests waiting for a replica, labels
# deployment, application, handle, actor_id); a counter is scraped with `_total`.
SERVE_HTTP_REQUESTS = RAY_PREFIX + "serve_num_http_requests_total"
SERVE_QUEUED = RAY_PREFIX + "serve_deployment_queued_queries"

# Prometheus's own series per scrape target: 1 when the last scrape succeeded, 0 when it failed.
SCRAPE_UP = "up"

# NVIDIA DCGM exporter default counters (NVIDIA/dcgm-exporter etc/default-counters.csv, chart 4.8.2).
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent
GPU_FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB

# kube-state-metrics (shipped by kube-prometheus-stack).
KSM_POD_PHASE = "kube_pod_status_phase"
KSM_NODE_LABELS = "kube_node_labels"  # carries the labels allowed by metricLabelsAllowlist

# vLLM's bucket bounds (vllm/v1/metrics/loggers.py): an SLO threshold must be one of them, or
# `le="<threshold>"` selects no series and the burn-rate alert can never fire.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
BUCKETS = {"vllm:time_to_first_token_seconds": TTFT_BUCKETS, "vllm:inter_token_latency_seconds": ITL_BUCKETS}

# Labels the scrape config adds from the pod (llm_pd_eks/observability.py): which side a sample is from.
PHASE_LABEL = "phase"  # = the pod's ray.io/group: prefill | decode | headgroup
NODE_LABEL = "node"  # = the pod's node name
PHASES = ("prefill", "decode")


def le(bound: float) -> str:
    """A bucket bound as Prometheus exposes it (OpenTelemetry / prometheus_client: `2.5`, `1.0`)."""
    return repr(float(bound))
