"""The preview's key figures: GPU placement, node counts, cost and the KV-cache transfer.

Node groups, NAT gateways and the control plane are read from the *recorded plan* (what the program
would create), not from the config, so a component that ignores a setting shows up here. The serving
figures come from the validated stack config (`config.serving`), absent until that section exists.

Pure functions (`kv_transfer`, `estimate_cost`) carry the arithmetic so tests can check it by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from llm_pd_eks.prices import PRICES_FILE, PriceTable, load_prices  # noqa: F401 - re-exported
from llm_pd_eks_tools.plan.preview.report import CostFigure, CostLine, Figures, KvTransferFigure, NodeGroupFigure

if TYPE_CHECKING:  # pragma: no cover
    from llm_pd_eks.models import ModelSpec
    from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration


# -- KV-cache transfer -------------------------------------------------------------------------
def transfer_seconds(num_bytes: int, gbps: float) -> float:
    """Ideal line-rate time (no protocol overhead) to move `num_bytes` at `gbps` gigabit/s."""
    return num_bytes * 8 / (gbps * 1e9)


def kv_transfer(
    model: "ModelSpec",
    tokens: int,
    kv_cache_dtype: str,
    dtype_bytes: int,
    efa_gbps: float,
    tcp_gbps: float,
) -> KvTransferFigure:
    """One request's KV cache (`tokens` positions) moved from prefill to decode, over EFA and one TCP flow.

    The bytes come from the one formula, `ModelSpec.kv_bytes_per_token`; `dtype_bytes` from the
    serving config (`ServingConfig.kv_cache_dtype_bytes`), which owns what each `kv_cache_dtype` means.
    """
    size = model.kv_bytes_per_token(dtype_bytes) * tokens
    return KvTransferFigure(
        status="ok",
        model_id=model.model_id,
        tokens=tokens,
        kv_cache_dtype=kv_cache_dtype,
        bytes=size,
        efa_gbps=float(efa_gbps),
        tcp_gbps=float(tcp_gbps),
        efa_seconds=transfer_seconds(size, efa_gbps),
        tcp_seconds=transfer_seconds(size, tcp_gbps),
    )


# -- cost --------------------------------------------------------------------------------------
@dataclass
class Cost:
    region: str
    lines: list[CostLine]
    hourly: float
    monthly: float
    missing: list[str] = field(default_factory=list)  # items with no price in the table


def _line(item: str, quantity: int, unit_hourly: float) -> CostLine:
    return CostLine(item=item, quantity=quantity, unit_hourly=unit_hourly, hourly=unit_hourly * quantity)


def estimate_cost(
    prices: PriceTable, region: str, instances: list[tuple[str, int]], nat_gateways: int, eks_clusters: int
) -> Cost:
    """Hourly and monthly on-demand cost of `instances` [(type, count)] plus NAT and control plane."""
    table = prices.regions.get(region)
    if table is None:
        return Cost(region, [], 0.0, 0.0, [f"region {region} (priced: {', '.join(sorted(prices.regions))})"])
    lines: list[CostLine] = []
    missing: list[str] = []
    for instance_type, count in instances:
        unit = table["instances"].get(instance_type)
        if unit is None:
            missing.append(f"{instance_type} in {region}")
            continue
        lines.append(_line(instance_type, count, unit))
    if nat_gateways:
        lines.append(_line("NAT gateway", nat_gateways, table["nat_gateway_hour"]))
    if eks_clusters:
        lines.append(_line("EKS control plane", eks_clusters, table["eks_cluster_hour"]))
    hourly = sum(line.hourly for line in lines)
    return Cost(region, lines, hourly, hourly * prices.hours_per_month, missing)


# -- figures from the recorded plan ------------------------------------------------------------
def _launch_template(run: "ProgramRun", node_group: "Registration") -> Optional["Registration"]:
    for urn in node_group.property_dependencies.get("launchTemplate", []):
        try:
            return run.by_urn(urn)
        except KeyError:
            continue
    return None


def node_groups(run: "ProgramRun") -> list[NodeGroupFigure]:
    """Every managed node group of the plan (by name), its instance type taken from it or its launch template."""
    from llm_pd_eks.catalog import GPU_INSTANCE_TYPES

    found = []
    for ng in run.of_type("aws:eks/nodeGroup:NodeGroup"):
        lt = _launch_template(run, ng)
        types = ng.inputs.get("instanceTypes") or []
        instance_type = types[0] if types else (lt.inputs.get("instanceType", "?") if lt else "?")
        scaling = ng.inputs.get("scalingConfig") or {}
        nics = (lt.inputs.get("networkInterfaces") or []) if lt else []
        efa = sum(1 for nic in nics if nic.get("interfaceType") in ("efa", "efa-only"))
        azs = []
        for urn in ng.property_dependencies.get("subnetIds", []):
            try:
                azs.append(run.by_urn(urn).inputs.get("availabilityZone", "?"))
            except KeyError:
                continue
        found.append(
            NodeGroupFigure(
                name=ng.name,
                instance_type=instance_type,
                min_size=int(scaling.get("minSize", 0)),
                desired_size=int(scaling.get("desiredSize", 0)),
                max_size=int(scaling.get("maxSize", 0)),
                gpu=instance_type in GPU_INSTANCE_TYPES,
                efa_interfaces=efa,
                availability_zones=tuple(sorted(set(azs))),
            )
        )
    # By name: the mock engine records concurrent registrations in whatever order they finish, and
    # every figure built from this list (the cost line, the summary's node rows) must not follow it.
    return sorted(found, key=lambda figure: figure.name)


def _serving_kv(config: Any, gpu: Optional[NodeGroupFigure]) -> KvTransferFigure:
    serving = getattr(config, "serving", None) if config is not None else None
    if serving is None:
        return KvTransferFigure(status="n/a", reason="the stack config has no serving section")
    if gpu is None:
        return KvTransferFigure(status="n/a", reason="the plan has no GPU node group")
    from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
    from llm_pd_eks.models import MODELS

    model = MODELS.get(serving.model_id)
    if model is None:
        return KvTransferFigure(status="n/a", reason=f"model {serving.model_id} is not in llm_pd_eks/models.py")
    instance = GPU_INSTANCE_TYPES[gpu.instance_type]
    return kv_transfer(
        model,
        serving.max_model_len,
        serving.kv_cache_dtype,
        serving.kv_cache_dtype_bytes,
        instance.network_gbps,
        getattr(instance, "single_flow_tcp_gbps", 10.0),  # an older checkout's catalog (preview-diff's base)
    )


def key_figures(run: "ProgramRun", config: Any, region: str, prices: Optional[PriceTable] = None) -> Figures:
    """Everything the report shows as figures (the diff compares these)."""
    prices = prices or load_prices()
    groups = node_groups(run)
    gpu = next((g for g in groups if g.gpu), None)
    nat = len(run.of_type("aws:ec2/natGateway:NatGateway"))
    # each aws.eks.Cluster, and each pulumi-eks component whose inner one is not in the plan
    inner = run.of_type("aws:eks/cluster:Cluster")
    outer = [c for c in run.of_type("eks:index:Cluster") if c.urn not in {r.parent for r in inner}]
    clusters = len(inner) + len(outer)
    cost = estimate_cost(prices, region, [(g.instance_type, g.desired_size) for g in groups], nat, clusters)
    cost_max = estimate_cost(prices, region, [(g.instance_type, g.max_size) for g in groups], nat, clusters)
    return Figures(
        region=region,
        node_groups=groups,
        nat_gateways=nat,
        eks_clusters=clusters,
        cost=CostFigure(
            region=cost.region,
            lines=cost.lines,
            hourly=cost.hourly,
            monthly=cost.monthly,
            missing=cost.missing,
            at_max_size_hourly=cost_max.hourly,
            prices_as_of=prices.as_of,
            currency=prices.currency,
            hours_per_month=prices.hours_per_month,
        ),
        kv_transfer=_serving_kv(config, gpu),
        kv_band=kv_band_figure(config, gpu, run.stack),
        sized=sized_throughput_figure(run.stack, config, cost.hourly),
        routing=_routing(config),
        weights=weights_figure(config, gpu),
    )


def _routing(config: Any) -> str:
    from llm_pd_eks.serve_routing import preview_line

    serving = getattr(config, "serving", None) if config is not None else None
    return preview_line(serving) if serving is not None else ""


# -- the KV-transfer band and $/Mtok at the throughput the stack is sized for (llm_pd_eks_sizing/model/) ----------
def _checkout_root() -> Path:
    """The previewed checkout: where its `llm_pd_eks` package was imported from (the preview ensures it)."""
    import llm_pd_eks

    return Path(llm_pd_eks.__file__).resolve().parent.parent


def kv_band_figure(config: Any, gpu: Optional[NodeGroupFigure], stack: Optional[str] = None) -> dict[str, Any]:
    """The KV band (llm_pd_eks/kv_transfer.py: line rate, measured NIXL/EFA, single-flow TCP) for a
    maxModelLen request."""
    serving = getattr(config, "serving", None) if config is not None else None
    if serving is None or gpu is None:
        return {"status": "n/a", "reason": "no serving section or no GPU node group"}
    try:
        from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
        from llm_pd_eks.models import MODELS
        from llm_pd_eks_sizing.model import kv_band

        band = kv_band(
            MODELS[serving.model_id],
            serving.max_model_len,
            serving.kv_cache_dtype_bytes,
            GPU_INSTANCE_TYPES[gpu.instance_type],
            serving.prefill.tensor_parallel_size,
            _calibrated_kv_efficiency(stack, config),
        )
    except (ImportError, AttributeError, KeyError) as error:  # an older checkout (preview-diff's base)
        return {"status": "n/a", "reason": f"this checkout has no KV band figures ({type(error).__name__})"}
    return {"status": "ok", **band.as_dict()}


def weights_figure(config: Any, gpu: Optional[NodeGroupFigure]) -> dict[str, Any]:
    """What one GPU node's cold start pulls through the NAT gateway for the weights, and what
    serving.weightsS3Uri saves of it. Every node a replica runs on downloads the whole model once
    into its node cache (Ray Serve LLM `initialize_node` on each placement-group node; the cache is
    the node's hostPath, llm_pd_eks/ray_worker_pod.py), so a node's cold start is the model's size."""
    serving = getattr(config, "serving", None) if config is not None else None
    if serving is None or gpu is None:
        return {"status": "n/a", "reason": "no serving section or no GPU node group"}
    try:
        from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
        from llm_pd_eks.models import MODELS

        gb = MODELS[serving.model_id].weights_gib_bf16 * 2**30 / 1e9
        node_gpus = GPU_INSTANCE_TYPES[gpu.instance_type].gpus
        nodes = sum(g.nodes(g.min_replicas, node_gpus) for g in serving.groups().values())
        uri = getattr(serving, "weights_s3_uri", None)
    except (ImportError, AttributeError, KeyError) as error:  # an older checkout (preview-diff's base)
        return {"status": "n/a", "reason": f"this checkout has no weights figures ({type(error).__name__})"}
    return {
        "status": "ok",
        "model_id": serving.model_id,
        "source": uri or "huggingface",
        "gb_per_node_cold_start": round(gb, 1),
        "nat_gb_per_node_cold_start": 0.0 if uri else round(gb, 1),
        "nat_gb_saved_per_node_cold_start": round(gb, 1) if uri else 0.0,
        "nodes_at_min": nodes,
    }


def _calibrated_kv_efficiency(stack: Optional[str], config: Any) -> Optional[float]:
    """calibration/<stack>.yaml's nixlbench efficiency for the previewed stack, None without one."""
    if stack is None:
        return None
    from llm_pd_eks_sizing.model import load_calibration

    found = load_calibration(stack, _checkout_root(), config)
    return found.kv_efficiency if found is not None else None


def sized_throughput_figure(stack: str, config: Any, hourly: float) -> dict[str, Any]:
    """$/Mtok of the stack as previewed (desired sizes) at the output rate of `workloads/<stack>.yaml`."""
    path = _checkout_root() / "workloads" / f"{stack}.yaml"
    if not path.exists():
        return {"status": "n/a", "reason": f"no workloads/{stack}.yaml to size for"}
    try:
        from llm_pd_eks_sizing.model import (
            COST_BASIS,
            load_workload,
            size,
            usd_per_million_output_tokens,
            usd_per_million_total_tokens,
        )
        from llm_pd_eks_tools.core.cli import ToolError

        result = size(stack, config, load_workload(path), _checkout_root())
    except (ImportError, AttributeError) as error:
        return {"status": "n/a", "reason": f"this checkout cannot size ({type(error).__name__})"}
    except ToolError as error:
        return {"status": "n/a", "reason": str(error)}
    tokens_s = result.output_tokens_s
    recommended = result.recommended()
    return {
        "status": "ok",
        "workload": f"workloads/{stack}.yaml",
        "output_tokens_s": tokens_s,
        "usd_per_mtok": usd_per_million_output_tokens(hourly, tokens_s) if hourly else None,
        "usd_per_mtok_total": usd_per_million_total_tokens(hourly, result.total_tokens_s) if hourly else None,
        "sized_nodes": result.disaggregated.nodes if result.disaggregated.feasible else None,
        "verdict": result.verdict(),
        # the layout make size recommends, priced beside the configured one
        "recommended": None
        if recommended is None
        else {
            "mode": recommended.mode,
            "nodes": recommended.nodes,
            "hourly": recommended.hourly,
            "usd_per_mtok": recommended.usd_per_mtok,
            "usd_per_mtok_total": recommended.usd_per_mtok_total,
        },
        "cost_basis": COST_BASIS,
        "calibration": result.calibration,
    }
