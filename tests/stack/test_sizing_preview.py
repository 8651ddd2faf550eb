"""The preview shows the KV band and $/Mtok at the stack's sized throughput."""

from __future__ import annotations

import pytest
from helpers import ROOT, STACKS

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.models import MODELS
from llm_pd_eks_sizing.model import band_text, load_workload, size
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.figures import key_figures, sized_throughput_figure
from llm_pd_eks_tools.plan.preview.render import figure_lines
from llm_pd_eks_tools.plan.preview.report import Figures


def _figures(programs, stack: str) -> Figures:
    config = stack_config(stack, ROOT)
    return key_figures(programs(stack), config, config.region)


@pytest.mark.parametrize("stack", STACKS)
def test_preview_kv_figure_is_the_band(programs, stack):
    figures, config = _figures(programs, stack), stack_config(stack, ROOT)
    band = figures.kv_band
    instance = GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type]
    model = MODELS[config.serving.model_id]
    assert band["status"] == "ok"
    assert band["bytes"] == model.kv_bytes_per_token(config.serving.kv_cache_dtype_bytes) * config.serving.max_model_len
    # per rank: the prefill TP's ranks each move 1/tp over their own share of the node's EFA interfaces
    tp = config.serving.prefill.tensor_parallel_size
    assert band["tp"] == tp and band["rank_bytes"] == pytest.approx(band["bytes"] / tp)
    assert band["line_rate_gbps"] == pytest.approx(instance.network_gbps / instance.gpus)
    assert band["tcp_gbps"] == instance.single_flow_tcp_gbps
    assert band["measured_gbps"] == pytest.approx(band["line_rate_gbps"] * 76.8 / 400)
    values = [value for _, value in figure_lines(figures)]
    assert band_text(band) in values


def test_prod_preview_no_longer_claims_line_rate_alone(programs):
    values = " ".join(value for _, value in figure_lines(_figures(programs, "prod")))
    # 10 GiB at TP 8: 1.25 GiB a rank over its 4 interfaces (400 Gbit/s line rate, ~9.6 GB/s measured)
    assert "per rank (TP 8, 4 EFA interface(s) of 100 Gbit/s each)" in values
    assert "line-rate bound 400 Gbit/s: 26.8 ms" in values  # the node-level figure, now per rank and a bound
    assert "NIXL/EFA at 0.192 of line rate 76.8 Gbit/s: 139.8 ms" in values
    assert "one TCP flow 10 Gbit/s: 1.07 s" in values


@pytest.mark.parametrize("stack", STACKS)
def test_preview_cost_shows_dollars_per_mtok_at_the_sized_throughput(programs, stack):
    figures = _figures(programs, stack)
    sized = figures.sized
    workload = load_workload(ROOT / "workloads" / f"{stack}.yaml")
    tokens_s = workload.request_rate * workload.output_tokens.mean
    assert sized["status"] == "ok" and sized["output_tokens_s"] == pytest.approx(tokens_s)
    assert sized["usd_per_mtok"] == pytest.approx(figures.cost.hourly / (tokens_s * 3600) * 1e6)
    result = size(stack, stack_config(stack, ROOT), workload)
    assert sized["sized_nodes"] == (result.disaggregated.nodes if result.disaggregated.feasible else None)
    assert any("per million output tokens at the sized throughput" in v for _, v in figure_lines(figures))
    # the layout make size recommends, priced beside the configured one, per output and per total token
    recommended = result.recommended()
    assert recommended is not None and sized["recommended"]["mode"] == recommended.mode
    assert sized["recommended"]["hourly"] == pytest.approx(recommended.hourly)
    total_s = workload.request_rate * (workload.input_tokens.mean + workload.output_tokens.mean)
    assert sized["usd_per_mtok_total"] == pytest.approx(figures.cost.hourly / (total_s * 3600) * 1e6)
    assert any(
        f"make size recommends {recommended.mode}" in v and "input + output" in v for _, v in figure_lines(figures)
    )


def test_no_workload_file_means_no_dollars_per_mtok(tmp_path, monkeypatch):
    import llm_pd_eks_tools.plan.preview.figures as figures_module

    monkeypatch.setattr(figures_module, "_checkout_root", lambda: tmp_path)
    sized = sized_throughput_figure("dev", stack_config("dev", ROOT), 10.0)
    assert sized["status"] == "n/a" and "workloads/dev.yaml" in sized["reason"]
