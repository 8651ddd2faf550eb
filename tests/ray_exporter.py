"""A fixture exporter: one Ray node's /metrics, rendered by Ray's own metrics code, for the verify tests.

Run as `python tests/ray_exporter.py [PORT]`; it prints `ready <port>`. A subprocess, because Ray's
OpenTelemetry meter provider is process-global. Metrics go through
ray._private.telemetry.open_telemetry_metric_recorder (the recorder the dashboard agent of the
installed Ray, the DLC's 2.58.0, exports with) and prometheus_client renders the exposition: names,
`_total` suffixes, label sets and the histogram reconstruction are Ray's, not ours. It serves every
vLLM metric of the program's table (llm_pd_eks/metrics.py `VLLM_METRICS`, vLLM name and type),
registered under the name vLLM's Ray stat logger gives it; whether Ray then exports it under the name
the table predicts is what the tests query.

Endpoints: GET /metrics; POST /record with a JSON body {"transfers": [[bytes, seconds], ...],
"failed": n, "tokens": n}: what one request did on this node, as vLLM's NixlPromMetrics.observe and
the scheduler stats would record it.
"""

from __future__ import annotations

import bisect
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import REGISTRY, generate_latest
from ray._private.telemetry.open_telemetry_metric_recorder import OpenTelemetryMetricRecorder

from llm_pd_eks import metrics as m

# Bucket bounds by vLLM name: the SLO histograms' from llm_pd_eks/metrics.py, the NIXL ones from
# NixlPromMetrics (vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py).
BUCKETS: dict[str, list[float]] = {
    **{name: list(bounds) for name, bounds in m.BUCKETS.items()},
    "vllm:nixl_xfer_time_seconds": [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0],
    "vllm:nixl_bytes_transferred": [float(2 ** (10 + i)) for i in range(1, 25, 2)],
}
GAUGES = {"vllm:num_requests_running": 1.0, "vllm:num_requests_waiting": 0.0, "vllm:kv_cache_usage_perc": 0.3}
TAGS = {"model_name": "Qwen/Qwen2.5-7B-Instruct", "engine": "0", "ReplicaId": "r1"}

recorder = OpenTelemetryMetricRecorder()
lock = threading.Lock()
totals = {"vllm:nixl_num_failed_transfers": 0.0, "vllm:generation_tokens": 0.0}


def ray_name(vllm_name: str) -> str:
    """The Ray metric vLLM registers (vllm/v1/metrics/ray_wrappers.py: every character outside
    [a-zA-Z0-9_] becomes `_`); Ray's exporter adds `ray_` and, to a counter, `_total`."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", vllm_name)


# Every vLLM metric the program's table names, registered as vLLM's Ray stat logger would.
for vllm_name, kind in m.VLLM_METRICS.items():
    name = ray_name(vllm_name)
    if kind == m.HISTOGRAM:
        recorder.register_histogram_metric(name, name, BUCKETS[vllm_name])
    elif kind == m.COUNTER:
        recorder.register_counter_metric(name, name)
        recorder.set_metric_value(name, TAGS, 0.0)
    else:
        recorder.register_gauge_metric(name, name)
        recorder.set_metric_value(name, TAGS, GAUGES.get(vllm_name, 0.0))


def observe(vllm_name: str, value: float) -> None:
    buckets = BUCKETS[vllm_name]
    counts = [0] * (len(buckets) + 1)
    counts[bisect.bisect_left(buckets, value)] = 1
    recorder.record_histogram_aggregated_batch(ray_name(vllm_name), [{"tags": dict(TAGS), "bucket_counts": counts}])


def add(vllm_name: str, amount: float) -> None:
    totals[vllm_name] += amount
    recorder.set_metric_value(ray_name(vllm_name), TAGS, totals[vllm_name])


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
                observe("vllm:nixl_bytes_transferred", float(num_bytes))
                observe("vllm:nixl_xfer_time_seconds", float(seconds))
            add("vllm:nixl_num_failed_transfers", event.get("failed", 0))
            add("vllm:generation_tokens", event.get("tokens", 0))
            if event.get("tokens"):
                observe("vllm:time_to_first_token_seconds", 0.3)
                observe("vllm:inter_token_latency_seconds", 0.02)
        self.send_response(204)
        self.end_headers()


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
    print(f"ready {server.server_address[1]}", flush=True)
    server.serve_forever()
