"""`make size`'s routing lines: where serving.routing's features pay for the stack's model, GPU and
workload, for the serving mode the verdict recommends (the P/D layout's lines follow, marked as a
comparison, when the verdict is aggregated), so the routing advice never contradicts the verdict."""

from __future__ import annotations

from llm_pd_eks_sizing.model import Sizing


def routing_lines(result: Sizing) -> list[str]:
    """Where serving.routing's two features pay for this model, instance and workload (sizing/routing.py)."""
    from llm_pd_eks.catalog import gpu_instance_type
    from llm_pd_eks.models import MODELS
    from llm_pd_eks_sizing.model.routing import prefix_routing

    model, instance = MODELS[result.model_id], gpu_instance_type(result.instance_type)
    recommended = result.recommended()
    if recommended is not None and recommended.mode == "aggregated":  # the routing line follows the verdict
        side = recommended.side("aggregated")
        lines = [
            "",
            "routing (serving.routing), for serving.mode aggregated (the verdict above):",
            "  decodeOnlyBelowTokens: no prefill stage to skip in mode aggregated; leave it unset",
        ]
        prefix = result.workload.shared_prefix
        if prefix is None:
            lines.append("  prefixAware: no shared prefix in the workload (sharedPrefix), nothing to keep cached")
        else:
            gain = prefix_routing(model, instance, prefix.tokens, prefix.distinct, side.replicas, side.tp)
            lines.append(
                f"  prefixAware (aggregated): hit rate {gain.hit_rate_random:.0%} -> {gain.hit_rate_affinity:.0%}, "
                f"{gain.saved_s * 1e3:,.1f} ms of prefill saved a request ({gain.basis})"
            )
        pd = _pd_routing_lines(result)[2:]  # its own heading left out
        if pd:
            lines.append("  not the verdict's mode, for comparison: with serving.mode disaggregated")
            lines.extend(f"  {line}" for line in pd)
        return lines
    return _pd_routing_lines(result)


def _pd_routing_lines(result: Sizing) -> list[str]:
    """The routing lines of the P/D layout (decode-only below a length, prefix-aware prefill)."""
    from llm_pd_eks.catalog import gpu_instance_type
    from llm_pd_eks.models import MODELS
    from llm_pd_eks_sizing.model.engine import Replica
    from llm_pd_eks_sizing.model.routing import decode_only_threshold, prefill_queue_wait, prefix_routing

    model, instance = MODELS[result.model_id], gpu_instance_type(result.instance_type)
    sides = {s.role: s for s in result.disaggregated.sides}
    if not result.disaggregated.feasible or not {"prefill", "decode"} <= set(sides):
        return ["", "routing (serving.routing): no disaggregated layout meets the objectives, nothing to route"]
    threshold = decode_only_threshold(model, instance, sides["decode"].tp)
    prefill = sides["prefill"]
    rate = result.workload.request_rate / prefill.replicas
    wait = prefill_queue_wait(Replica(model, instance, prefill.tp), result.workload.input_tokens, rate)
    loaded = decode_only_threshold(model, instance, sides["decode"].tp, queue_wait_s=wait)
    lines = [
        "",
        "routing (serving.routing):",
        f"  decodeOnlyBelowTokens, idle prefill stage: {threshold.text()}",
        f"  decodeOnlyBelowTokens at this load ({rate:.2f} requests/s a prefill replica, mean queue wait "
        f"{wait(1) * 1e3:,.1f} ms): {loaded.text()}",
    ]
    prefix = result.workload.shared_prefix
    if prefix is None:
        lines.append("  prefixAware: no shared prefix in the workload (sharedPrefix), nothing to keep cached")
    else:
        gain = prefix_routing(model, instance, prefix.tokens, prefix.distinct, prefill.replicas, prefill.tp)
        lines.append(
            f"  prefixAware (prefill): hit rate {gain.hit_rate_random:.0%} -> {gain.hit_rate_affinity:.0%}, "
            f"{gain.saved_s * 1e3:,.1f} ms of prefill saved a request ({gain.basis})"
        )
    return lines
