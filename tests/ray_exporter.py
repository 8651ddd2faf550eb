"""A fixture exporter: one Ray node's /metrics, rendered by Ray's own metrics code, for the verify tests.

Run as `python tests/ray_exporter.py [PORT]`; it prints `ready <port>`. A subprocess, because Ray's
OpenTelemetry meter provider is process-global. Metrics go through
ray._private.telemetry.open_telemetry_metric_recorder (the recorder the dashboard agent of the
installed Ray, the DLC's 2.57.0, exports with) and prometheus_client renders the exposition: names,
`_total` suffixes, label sets and the histogram reconstruction are Ray's, not ours.

Endpoints: GET /metrics; POST /record with a JSON body {"transfers": [[bytes, seconds], ...],
"failed": n, "tokens": n}: what one request did on this node, as vLLM's NixlPromMetrics.observe and
the scheduler stats would record it.
"""

from __future__ import annotations

import bisect
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import REGISTRY, generate_latest
from ray._private.telemetry.open_telemetry_metric_recorder import OpenTelemetryMetricRecorder

# vLLM's bucket bounds: NixlPromMetrics (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py).
XFER_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
BYTES_BUCKETS = [float(2 ** (10 + i)) for i in range(1, 25, 2)]
TTFT_BUCKETS = [
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
]
ITL_BUCKETS = [
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
]
TAGS = {"model_name": "Qwen/Qwen2.5-7B-Instruct", "engine": "0", "ReplicaId": "r1"}

recorder = OpenTelemetryMetricRecorder()
lock = threading.Lock()
totals = {"failed": 0.0, "tokens": 0.0}

# Ray metric names are vLLM's with ':' -> '_' (vllm/v1/metrics/ray_wrappers.py); Ray adds `ray_`.
for name, buckets in (
    ("vllm_nixl_xfer_time_seconds", XFER_BUCKETS),
    ("vllm_nixl_bytes_transferred", BYTES_BUCKETS),
    ("vllm_time_to_first_token_seconds", TTFT_BUCKETS),
    ("vllm_inter_token_latency_seconds", ITL_BUCKETS),
):
    recorder.register_histogram_metric(name, name, buckets)
for name in ("vllm_nixl_num_failed_transfers", "vllm_generation_tokens", "vllm_nixl_num_failed_notifications"):
    recorder.register_counter_metric(name, name)
    recorder.set_metric_value(name, TAGS, 0.0)
for name, value in (
    ("vllm_num_requests_running", 1.0),
    ("vllm_num_requests_waiting", 0.0),
    ("vllm_kv_cache_usage_perc", 0.3),
):
    recorder.register_gauge_metric(name, name)
    recorder.set_metric_value(name, TAGS, value)


def observe(name: str, buckets: list[float], value: float) -> None:
    counts = [0] * (len(buckets) + 1)
    counts[bisect.bisect_left(buckets, value)] = 1
    recorder.record_histogram_aggregated_batch(name, [{"tags": dict(TAGS), "bucket_counts": counts}])


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        with lock:
            body = generate_latest(REGISTRY)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        event = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with lock:
            for num_bytes, seconds in event.get("transfers", []):
                observe("vllm_nixl_bytes_transferred", BYTES_BUCKETS, float(num_bytes))
                observe("vllm_nixl_xfer_time_seconds", XFER_BUCKETS, float(seconds))
            totals["failed"] += event.get("failed", 0)
            totals["tokens"] += event.get("tokens", 0)
            recorder.set_metric_value("vllm_nixl_num_failed_transfers", TAGS, totals["failed"])
            recorder.set_metric_value("vllm_generation_tokens", TAGS, totals["tokens"])
            if event.get("tokens"):
                observe("vllm_time_to_first_token_seconds", TTFT_BUCKETS, 0.3)
                observe("vllm_inter_token_latency_seconds", ITL_BUCKETS, 0.02)
        self.send_response(204)
        self.end_headers()


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
    print(f"ready {server.server_address[1]}", flush=True)
    server.serve_forever()
