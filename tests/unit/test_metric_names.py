"""llm_pd_eks/metrics.py's vLLM names are ones the DLC's vLLM (llm_pd_eks/versions.py) really defines.

The judge is tests/data/vllm/metrics-<that version>.json, generated from its wheel by
llm_pd_eks_tools/maint/gen_vllm_facts.py (`make facts`; the SOURCE beside it):
each `vllm:` name, its type, and the TTFT / inter-token latency bucket bounds the SLO thresholds
must sit on. A counter is scraped with `_total` (the OpenTelemetry Prometheus reader), a histogram
and a gauge under their own name.
"""

from __future__ import annotations

import json

import pytest
from helpers import DATA

from llm_pd_eks import metrics
from llm_pd_eks.versions import DLC_VLLM_VERSION

VLLM = json.loads((DATA / "vllm" / f"metrics-{DLC_VLLM_VERSION}.json").read_text())
PREFIX = metrics.RAY_PREFIX + "vllm_"


def ours() -> dict[str, str]:
    """Every vLLM metric name llm_pd_eks/metrics.py exports, by constant name."""
    return {k: v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str) and v.startswith(PREFIX)}


def test_the_module_names_vllm_metrics_at_all():
    assert {"TTFT", "ITL", "NIXL_BYTES", "NIXL_FAILED_TRANSFERS"} <= set(ours())


@pytest.mark.parametrize("constant", sorted(ours()))
def test_each_name_is_a_metric_of_the_dlcs_vllm_with_its_type_suffix(constant):
    scraped = ours()[constant]
    candidates = {
        metrics.ray_vllm(name) + ("_total" if spec["type"] == "counter" else ""): name
        for name, spec in VLLM["metrics"].items()
    }
    assert scraped in candidates, f"{constant} = {scraped}: no vLLM {DLC_VLLM_VERSION} metric is scraped so"


@pytest.mark.parametrize("vllm_name", sorted(metrics.VLLM_METRICS))
def test_each_table_entry_has_vllms_type(vllm_name):
    """The table's types decide the scraped suffixes and what tests/ray_exporter.py registers."""
    assert metrics.VLLM_METRICS[vllm_name] == VLLM["metrics"][vllm_name]["type"]


def test_the_table_holds_every_constant():
    assert set(ours().values()) == {metrics.scraped_name(n) for n in metrics.VLLM_METRICS}


def test_bucket_bounds_are_vllms():
    assert (
        set(metrics.BUCKETS)
        == set(VLLM["buckets"])
        == {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"}
    )
    assert metrics.BUCKETS["vllm:time_to_first_token_seconds"] is metrics.TTFT_BUCKETS
    assert metrics.BUCKETS["vllm:inter_token_latency_seconds"] is metrics.ITL_BUCKETS
    for vllm_name, bounds in metrics.BUCKETS.items():
        assert list(bounds) == VLLM["buckets"][vllm_name], vllm_name


def test_the_judge_knows_a_wrong_name():
    """The check above can fail: a name vLLM does not define, or a counter without `_total`."""
    known = {metrics.ray_vllm(n) + ("_total" if s["type"] == "counter" else "") for n, s in VLLM["metrics"].items()}
    assert metrics.ray_vllm("vllm:nixl_num_failed_transfers") not in known
    assert metrics.ray_vllm("vllm:gpu_cache_usage_perc") not in known
