"""How long a request may run, how the ingress scales, and how a GPU worker stops without dropping streams.

- Request timeout: Serve's `http_options.request_timeout_s` is the proxy's end-to-end limit for an HTTP
  request (Ray 2.58.0 ray/serve/config.py `HTTPOptions`; unset, a request whose replica never answers
  holds its client forever). It is set above the longest generation the stack admits: a first token
  within the TTFT SLO, then `maxModelLen` tokens each within the inter-token SLO (the alert defaults,
  llm_pd_eks/config/observability.py), plus a margin. Ray Serve LLM's ingress cuts a request on its own
  after `RAY_SERVE_LLM_ROUTER_HTTP_TIMEOUT` (default 600 s, ray/llm/_internal/serve/constants.py; the
  whole of a non-streamed answer, the first chunk of a stream): the worker pods get the same value, so
  the two limits agree. `http_options` are read when Serve starts on a cluster: a change reaches the
  next Ray cluster, not the running one.
- Ingress: Ray Serve LLM gives its OpenAiIngress `target_ongoing_requests` 1e9 and no `min_replicas`
  (ray/llm/_internal/serve/core/ingress/ingress.py `DEFAULT_INGRESS_OPTIONS`), so one replica carries
  every stream and never scales. Here it runs at least `INGRESS_MIN_REPLICAS`, each sized to carry the
  LLM side's load at its autoscaling target split over that minimum, and may take the whole LLM side's
  most (`max_ongoing_requests`), so one ingress replica can carry all while another is replaced.
- Stopping a GPU worker: `ray stop` alone SIGTERMs the raylet with everything else, so in-flight streams
  are cut. The preStop hook first asks the GCS to drain the node (`ray drain-node`, reason preemption,
  with a deadline): Serve then starts replacement replicas elsewhere and stops this node's replicas
  gracefully once they are replaced or the deadline nears (ray/serve/_private/deployment_state.py,
  draining nodes), and its proxy here stops taking new connections. The hook waits, bounded by the
  deadline, until no Serve replica process is left on the node, and only then runs `ray stop`. The
  pod's terminationGracePeriodSeconds covers the node-id lookup, the deadline and `ray stop`'s own
  grace period.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from .config.observability import ObservabilityConfig
from .config.serving import ReplicaGroupConfig, ServingConfig

# The slowest first token and token the alerts accept by default (llm_pd_eks/config/observability.py).
FIRST_TOKEN_BOUND_S = float(ObservabilityConfig.model_fields["ttft_slo_seconds"].default)
TOKEN_BOUND_S = float(ObservabilityConfig.model_fields["itl_slo_seconds"].default)
REQUEST_TIMEOUT_MARGIN_S = 60
# Ray Serve LLM's ingress-side limit (ray/llm/_internal/serve/constants.py DEFAULT_LLM_ROUTER_HTTP_TIMEOUT).
ROUTER_TIMEOUT_ENV = "RAY_SERVE_LLM_ROUTER_HTTP_TIMEOUT"

INGRESS_MIN_REPLICAS = 2
INGRESS_MAX_REPLICAS = 2 * INGRESS_MIN_REPLICAS

# The longest a stopping worker keeps serving its streams: a roll of the GPU node group waits this long
# per pod at most; a generation longer than it is cut at a node stop (and counted as such by the client).
DRAIN_DEADLINE_CAP_S = 900
RAY_STOP_GRACE_S = 30  # `ray stop --grace-period`: SIGTERM, then SIGKILL what is left (Ray's default: 16)
NODE_ID_LOOKUP_S = 30  # a driver connecting to the local raylet to learn the node's id
DRAIN_REASON = "DRAIN_NODE_REASON_PREEMPTION"  # accepted while the node still runs work (idle termination is not)
# Serve's replica actors carry this process title on the node (`ray::ServeReplica:<app>:<deployment>`).
REPLICA_PROCESS_PATTERN = "ray::ServeReplica"


def longest_generation_s(serving: ServingConfig) -> float:
    """A first token within the TTFT bound, then `maxModelLen` tokens each within the inter-token bound."""
    return FIRST_TOKEN_BOUND_S + serving.max_model_len * TOKEN_BOUND_S


def request_timeout_s(serving: ServingConfig) -> int:
    """Serve's end-to-end HTTP limit: above the longest generation the stack admits."""
    return math.ceil(longest_generation_s(serving)) + REQUEST_TIMEOUT_MARGIN_S


def http_options(serving: ServingConfig) -> dict[str, Any]:
    """serveConfigV2's `http_options` (Serve's HTTPOptionsSchema)."""
    return {"request_timeout_s": request_timeout_s(serving)}


def ingress_deployment_config(llm_groups: list[ReplicaGroupConfig]) -> dict[str, Any]:
    """The OpenAiIngress's Serve options, sized from the groups whose replicas it feeds (the decode
    side for P/D, the one LLM group when aggregated)."""
    at_target = sum(g.max_replicas * g.target_ongoing_requests for g in llm_groups)
    most = sum(g.max_replicas * g.max_ongoing_requests for g in llm_groups)
    target = max(1, math.ceil(at_target / INGRESS_MIN_REPLICAS))
    return {
        "max_ongoing_requests": max(most, target),
        "autoscaling_config": {
            "min_replicas": INGRESS_MIN_REPLICAS,
            "max_replicas": INGRESS_MAX_REPLICAS,
            "target_ongoing_requests": target,
        },
    }


def drain_deadline_s(serving: ServingConfig) -> int:
    """How long a stopping worker drains: the request timeout, at most DRAIN_DEADLINE_CAP_S."""
    return min(request_timeout_s(serving), DRAIN_DEADLINE_CAP_S)


def worker_grace_s(serving: ServingConfig) -> int:
    """terminationGracePeriodSeconds: the whole preStop hook, then the SIGTERM after it, fit inside."""
    return NODE_ID_LOOKUP_S + drain_deadline_s(serving) + 2 * RAY_STOP_GRACE_S


NODE_ID_PROGRAM = (
    'import ray; ray.init(address="auto", logging_level="ERROR", log_to_driver=False); '
    "print(ray.get_runtime_context().get_node_id())"
)


def drain_argv(deadline_s: int) -> list[str]:
    """`ray drain-node` for this node (its id in $NODE_ID), with the deadline the pod's grace covers."""
    return [
        "ray",
        "drain-node",
        "--node-id",
        "$NODE_ID",
        "--reason",
        DRAIN_REASON,
        "--reason-message",
        "Kubernetes is stopping the pod",
        "--deadline-remaining-seconds",
        str(deadline_s),
    ]


def stop_argv() -> list[str]:
    return ["ray", "stop", "--grace-period", str(RAY_STOP_GRACE_S)]


def _line(argv: list[str]) -> str:
    """A shell line for `argv`, with the one variable it names left to the shell."""
    return " ".join('"$NODE_ID"' if arg == "$NODE_ID" else shlex.quote(arg) for arg in argv)


def pre_stop_script(serving: ServingConfig) -> str:
    """The preStop hook: drain (when the node id can be had and the GCS accepts it), wait for this node's
    Serve replicas to leave, bounded by the deadline, then stop Ray. A failed drain still stops Ray."""
    deadline = drain_deadline_s(serving)
    replicas_left = f"pgrep -f {shlex.quote(REPLICA_PROCESS_PATTERN)} >/dev/null 2>&1"
    lookup = f"timeout {NODE_ID_LOOKUP_S} python3 -c {shlex.quote(NODE_ID_PROGRAM)}"
    return "\n".join(
        [
            f'NODE_ID="$({lookup} 2>/dev/null | tail -n 1)"',
            f'if [ -n "$NODE_ID" ] && {_line(drain_argv(deadline))}; then',
            "  waited=0",
            f"  while [ $waited -lt {deadline} ] && {replicas_left}; do",
            "    sleep 2; waited=$((waited + 2))",
            "  done",
            "fi",
            _line(stop_argv()),
        ]
    )


def pre_stop_command(serving: ServingConfig) -> list[str]:
    return ["/bin/sh", "-c", pre_stop_script(serving)]
