"""Ray Serve autoscaling settings of one role, from the per-replica concurrency the sizing model gives.

Serve's default policy in Ray 2.57.0 (ray/serve/autoscaling_policy.py:
`replica_queue_length_autoscaling_policy`, whose `_core_replica_queue_length_policy` does the arithmetic)
wants `current * total_ongoing / (target_ongoing_requests * current)` replicas, i.e. one replica per
`target_ongoing_requests` requests in flight. Serve's wrapper around the policy (`_apply_autoscaling_config`,
`_apply_delay_logic`) applies a change only after the load has kept asking for it for upscale_delay_s
(downscale_delay_s) of wall-clock time, and the result is bounded by min/max_replicas
(ray/serve/_private/autoscaling_state.py, `apply_bounds`). So:
- target_ongoing_requests = the concurrency at which one replica still meets the latency objective;
- max_ongoing_requests = twice that: a replica may run ahead of its target while new replicas come up
  (a TP-8 70B replica takes minutes to load), yet a finite cap keeps the rest queued at the proxy
  instead of piling into one engine (Ray Serve LLM's own default is 1e9: no back-pressure);
- the delays are Serve's defaults (30 s up, 600 s down): a GPU node costs minutes to start, so do not
  give it back on a short lull.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BACKPRESSURE_HEADROOM = 2  # max_ongoing_requests / target_ongoing_requests
UPSCALE_DELAY_S = 30.0  # ray.serve.config.AutoscalingConfig.upscale_delay_s default
DOWNSCALE_DELAY_S = 600.0  # ray.serve.config.AutoscalingConfig.downscale_delay_s default


@dataclass(frozen=True)
class RoleAutoscaling:
    target_ongoing_requests: float
    max_ongoing_requests: int
    upscale_delay_s: float
    downscale_delay_s: float

    def config_values(self) -> dict[str, float | int]:
        """The serving.prefill / serving.decode keys (camelCase) `make size WRITE=1` writes."""
        return {
            "targetOngoingRequests": self.target_ongoing_requests,
            "maxOngoingRequests": self.max_ongoing_requests,
            "upscaleDelayS": self.upscale_delay_s,
            "downscaleDelayS": self.downscale_delay_s,
        }


def from_concurrency(per_replica_concurrency: float) -> RoleAutoscaling:
    """Serve settings for a replica that sustains `per_replica_concurrency` requests in flight."""
    if not per_replica_concurrency > 0:
        raise ValueError(f"per-replica concurrency must be positive, got {per_replica_concurrency!r}")
    target = max(1, math.floor(per_replica_concurrency))
    return RoleAutoscaling(float(target), BACKPRESSURE_HEADROOM * target, UPSCALE_DELAY_S, DOWNSCALE_DELAY_S)
