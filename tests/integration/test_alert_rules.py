"""The alert rules on Prometheus's own engine: `promtool check rules` and `promtool test rules`.

Every alert has a firing and a non-firing case (a test checks that none is missing). Input series
use the names and labels the scrape produces (llm_pd_eks/metrics.py; `phase` and `pod` are added by
the PodMonitor's relabelling). promtool compares annotations too; they are templated with values,
so the unit tests run on the rules without annotations, while `promtool check rules` parses the
full file including every template.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import requires_binary

from llm_pd_eks import metrics as m
from llm_pd_eks.alerts import KV_THROUGHPUT_RECORD, rule_groups
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import ObservabilityConfig
from llm_pd_eks.kv_transfer import kv_band, kv_rank_floor_gbps
from llm_pd_eks.models import MODELS
from llm_pd_eks.serving_names import NAMESPACE

PROMTOOL = shutil.which("promtool")
CONFIG = ObservabilityConfig()
INSTANCE = GPU_INSTANCE_TYPES["g6e.12xlarge"]
FLOOR = kv_rank_floor_gbps(INSTANCE, CONFIG.kv_throughput_floor_fraction)

DEC = 'phase="decode",pod="llm-pd-decode-worker-a"'
PRE = 'phase="prefill",pod="llm-pd-prefill-worker-a"'


def series(name: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f"{name}{{{labels}}}", "values": values}


def gbps_series(gbps: float) -> list[dict[str, str]]:
    """NIXL byte/time sums growing at `gbps` Gbit/s of transfer time (1 s of transfer per minute)."""
    bytes_per_min = gbps * 1e9 / 8
    return [
        series(f"{m.NIXL_BYTES}_sum", DEC, f"0+{bytes_per_min:.0f}x60"),
        series(f"{m.NIXL_BYTES}_count", DEC, "0+10x60"),
        series(f"{m.NIXL_XFER_TIME}_sum", DEC, "0+1x60"),
    ]


def burn_series(
    histogram: str, threshold: float, good_fraction: float, labels: str, minutes: int = 120, per_min: int = 1000
) -> list[dict[str, str]]:
    """`per_min` requests a minute (1000 unless told), `good_fraction` of them within `threshold`."""
    good = round(per_min * good_fraction)
    return [
        series(f"{histogram}_bucket", f'{labels},le="{m.le(threshold)}"', f"0+{good}x{minutes}"),
        series(f"{histogram}_bucket", f'{labels},le="+Inf"', f"0+{per_min}x{minutes}"),
        series(f"{histogram}_count", labels, f"0+{per_min}x{minutes}"),
    ]


def alert(name: str, eval_time: str, inputs: list[dict[str, str]], fires: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": inputs,
        "alert_rule_test": [
            {"eval_time": eval_time, "alertname": name, "exp_alerts": [{"exp_labels": labels} for labels in fires]}
        ],
        "name": f"{name} {'fires' if fires else 'stays quiet'}",
    }


def crit(**labels: str) -> dict[str, str]:
    return {"severity": "critical", "component": "llm-pd", **labels}


def warn(**labels: str) -> dict[str, str]:
    return {"severity": "warning", "component": "llm-pd", **labels}


FAILING = [series(m.NIXL_FAILED_TRANSFERS, DEC, "0 0 0 1 2 2 2 2 2 2 2 2 2 2 2")]
# requests the decode engine finished, by vLLM's finished_reason (one errored request at 3m, or none)
ERRORED = [series(m.REQUEST_SUCCESS, DEC + ',finished_reason="error"', "0 0 0 1 1 1 1 1 1 1 1 1 1 1 1")]
HEALED = [
    series(m.REQUEST_SUCCESS, DEC + ',finished_reason="error"', "0x14"),
    series(m.REQUEST_SUCCESS, DEC + ',finished_reason="stop"', "0+30x14"),
]
# Ray Serve's series carry these labels (Ray 2.58.0 request_ingress_metrics.py, router.py)
QUEUE = 'application="llm",deployment="PDProxyServer",handle="h-1",actor_id="a-1"'
TARGET = f'job="monitoring/ray",namespace="{NAMESPACE}",pod="llm-pd-decode-worker-a"'
PRE_TARGET = f'job="monitoring/ray",namespace="{NAMESPACE}",pod="llm-pd-prefill-worker-a",phase="prefill"'


def serve_requests(errors_per_min: int, per_min: int = 100) -> list[dict[str, str]]:
    """`per_min` HTTP requests a minute (100 unless told) to the `llm` application, `errors_per_min` of
    them answered 500."""
    labels = 'application="llm",route="/v1",method="POST"'
    return [
        series(m.SERVE_HTTP_REQUESTS, labels + ',status_code="200"', f"0+{per_min - errors_per_min}x30"),
        series(m.SERVE_HTTP_REQUESTS, labels + ',status_code="500"', f"0+{errors_per_min}x30"),
    ]


GENERATING = [series(m.GENERATION_TOKENS, DEC, "0+500x60")]

CASES: list[dict[str, Any]] = [
    # failures recompute heals are a ticket; with requests ending in error they cost answers and page
    alert("KVTransferFailures", "9m", [*FAILING, *HEALED], [warn(phase="decode")]),
    alert("KVTransferFailures", "9m", [series(m.NIXL_FAILED_TRANSFERS, DEC, "0x14")], []),
    alert("KVTransferFailuresLoseAnswers", "6m", [*FAILING, *ERRORED], [crit(phase="decode")]),
    alert("KVTransferFailuresLoseAnswers", "9m", [*FAILING, *HEALED], []),
    # no NIXL series at all, and NIXL series that stand still: both mean no KV moves
    alert("KVTransferStalled", "30m", GENERATING, [crit()]),
    alert("KVTransferStalled", "30m", [*GENERATING, series(f"{m.NIXL_BYTES}_count", DEC, "0x60")], [crit()]),
    alert("KVTransferStalled", "30m", [*GENERATING, *gbps_series(FLOOR * 4)], []),
    alert("KVTransferStalled", "30m", [series(m.GENERATION_TOKENS, DEC, "0x60")], []),  # idle: nothing to move
    alert("KVThroughputBelowFloor", "40m", gbps_series(FLOOR / 10), [warn(phase="decode")]),
    alert("KVThroughputBelowFloor", "40m", gbps_series(FLOOR * 2), []),
    alert("TTFTBudgetBurn", "90m", burn_series(m.TTFT, CONFIG.ttft_slo_seconds, 0.5, PRE), [crit(phase="prefill")]),
    alert("TTFTBudgetBurn", "90m", burn_series(m.TTFT, CONFIG.ttft_slo_seconds, 0.999, PRE), []),
    # the same half-slow share at 2 requests a minute, under the traffic floor (3 a minute): no page
    alert("TTFTBudgetBurn", "90m", burn_series(m.TTFT, CONFIG.ttft_slo_seconds, 0.5, PRE, per_min=2), []),
    alert(
        "InterTokenLatencyBudgetBurn",
        "90m",
        burn_series(m.ITL, CONFIG.itl_slo_seconds, 0.5, DEC),
        [crit(phase="decode")],
    ),
    alert("InterTokenLatencyBudgetBurn", "90m", burn_series(m.ITL, CONFIG.itl_slo_seconds, 0.999, DEC), []),
    # 10% slow: under the fast rate (14.4 x 1%), over the medium one (6 x 1%) once 6 h hold it
    alert("TTFTBudgetBurn", "7h", burn_series(m.TTFT, CONFIG.ttft_slo_seconds, 0.9, PRE, 480), [crit(phase="prefill")]),
    # 2% slow: a slow burn (over 1 x 1%, under 6 x 1%) is a ticket, never a page
    alert(
        "TTFTBudgetSlowBurn",
        "3h",
        burn_series(m.TTFT, CONFIG.ttft_slo_seconds, 0.98, PRE, 240),
        [warn(phase="prefill")],
    ),
    alert("TTFTBudgetBurn", "3h", burn_series(m.TTFT, CONFIG.ttft_slo_seconds, 0.98, PRE, 240), []),
    alert("TTFTBudgetSlowBurn", "3h", burn_series(m.TTFT, CONFIG.ttft_slo_seconds, 0.999, PRE, 240), []),
    alert(
        "InterTokenLatencyBudgetSlowBurn",
        "3h",
        burn_series(m.ITL, CONFIG.itl_slo_seconds, 0.98, DEC, 240),
        [warn(phase="decode")],
    ),
    alert("InterTokenLatencyBudgetSlowBurn", "3h", burn_series(m.ITL, CONFIG.itl_slo_seconds, 0.999, DEC, 240), []),
    alert("ServeServerErrors", "15m", serve_requests(errors_per_min=10), [crit(application="llm")]),
    alert("ServeServerErrors", "15m", serve_requests(errors_per_min=1), []),  # 1%: under the 5% line
    # one request in two fails, at 2 a minute: under the traffic floor, no page
    alert("ServeServerErrors", "15m", serve_requests(errors_per_min=1, per_min=2), []),
    alert(
        "ServeRequestsQueued",
        "15m",
        [series(m.SERVE_QUEUED, QUEUE, "3x30")],
        [warn(application="llm", deployment="PDProxyServer")],
    ),
    alert("ServeRequestsQueued", "15m", [series(m.SERVE_QUEUED, QUEUE, "3 0 3 0 3 0 3 0 3 0 3 0 3 0 3 0")], []),
    alert(
        "ServingTargetDown",
        "10m",
        [series(m.SCRAPE_UP, TARGET + ',phase="decode"', "0x20")],
        [warn(job="monitoring/ray", namespace=NAMESPACE, pod="llm-pd-decode-worker-a")],
    ),
    alert("ServingTargetDown", "10m", [series(m.SCRAPE_UP, TARGET + ',phase="decode"', "1x20")], []),
    # decode's pods gone from discovery: the vLLM/NIXL alerts would stay quiet for want of series
    alert(
        "ServingTargetsMissing",
        "20m",
        [series(m.SCRAPE_UP, PRE_TARGET, "1x30")],
        [crit(namespace=NAMESPACE, phase="decode")],
    ),
    alert(
        "ServingTargetsMissing",
        "20m",
        [series(m.SCRAPE_UP, PRE_TARGET, "0x30"), series(m.SCRAPE_UP, TARGET + ',phase="decode"', "1x30")],
        [crit(namespace=NAMESPACE, phase="prefill")],
    ),
    alert(
        "ServingTargetsMissing",
        "20m",
        [series(m.SCRAPE_UP, PRE_TARGET, "1x30"), series(m.SCRAPE_UP, TARGET + ',phase="decode"', "1x30")],
        [],
    ),
    alert(
        "DecodeKVCacheNearlyFull",
        "10m",
        [series(m.KV_CACHE_USAGE, DEC, "0.97x20")],
        [warn(phase="decode", pod="llm-pd-decode-worker-a")],
    ),
    # a full prefill cache is normal (it holds prompts until decode pulls them): decode only
    alert(
        "DecodeKVCacheNearlyFull",
        "10m",
        [series(m.KV_CACHE_USAGE, DEC, "0.5x20"), series(m.KV_CACHE_USAGE, PRE, "0.97x20")],
        [],
    ),
    alert(
        "RayPodsPending",
        f"{CONFIG.pending_minutes + 5}m",
        [series(m.KSM_POD_PHASE, f'namespace="{NAMESPACE}",pod="llm-pd-decode-worker-b",phase="Pending"', "1x40")],
        [warn(namespace=NAMESPACE, pod="llm-pd-decode-worker-b")],
    ),
    alert(
        "RayPodsPending",
        f"{CONFIG.pending_minutes + 5}m",
        [
            series(m.KSM_POD_PHASE, f'namespace="{NAMESPACE}",pod="llm-pd-decode-worker-b",phase="Pending"', "0x40"),
            series(m.KSM_POD_PHASE, f'namespace="{NAMESPACE}",pod="llm-pd-decode-worker-b",phase="Running"', "1x40"),
        ],
        [],
    ),
]

RECORDING_CASE = {
    "interval": "1m",
    "input_series": gbps_series(40.0),
    "promql_expr_test": [
        {
            "expr": f"round({KV_THROUGHPUT_RECORD}, 0.001)",
            "eval_time": "30m",
            "exp_samples": [{"labels": '{phase="decode"}', "value": 40}],
        }
    ],
}

needs_promtool = requires_binary("promtool")


def _write_rules(path: Path, strip_annotations: bool) -> Path:
    groups = copy.deepcopy(rule_groups(CONFIG, INSTANCE))
    if strip_annotations:
        for group in groups:
            for rule in group["rules"]:
                rule.pop("annotations", None)
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_rules_parse_with_their_templates(tmp_path: Path) -> None:
    result = _promtool("check", "rules", str(_write_rules(tmp_path / "rules.yml", False)), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_every_alert_fires_and_stays_quiet_as_expected(tmp_path: Path) -> None:
    _write_rules(tmp_path / "rules.yml", True)
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [*CASES, RECORDING_CASE]}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = _promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_a_broken_expectation_fails(tmp_path: Path) -> None:
    """The harness can fail: expecting the quiet KV-failure case to fire is reported."""
    _write_rules(tmp_path / "rules.yml", True)
    wrong = alert("KVTransferFailures", "6m", [series(m.NIXL_FAILED_TRANSFERS, DEC, "0x10")], [crit(phase="decode")])
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [wrong]}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = _promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode != 0 and "KVTransferFailures" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    alerts = {r["alert"] for g in rule_groups(CONFIG, INSTANCE) for r in g["rules"] if "alert" in r}
    cases = [(c["alert_rule_test"][0]["alertname"], bool(c["alert_rule_test"][0]["exp_alerts"])) for c in CASES]
    assert {(name, fires) for name in alerts for fires in (True, False)} <= set(cases)


def test_floor_is_the_kv_models_per_rank_rate() -> None:
    """The alert's floor is `fraction` of the per-rank rate the KV model plans with (the one model that
    `make size`, the preview and `make verify` use): one rank's EFA interfaces at the measured efficiency."""
    for name in ("p4d.24xlarge", "p5.48xlarge"):
        instance = GPU_INSTANCE_TYPES[name]
        band = kv_band(next(iter(MODELS.values())), 1, 2, instance)
        assert band.rdma and kv_rank_floor_gbps(instance, 0.5) == pytest.approx(0.5 * band.measured_gbps, abs=1e-3)
        rules = {r.get("alert"): r for r in rule_groups(CONFIG, instance)[0]["rules"]}
        assert f"< {kv_rank_floor_gbps(instance, 0.5)}" in rules["KVThroughputBelowFloor"]["expr"]
    # p5: 32 interfaces / 8 GPUs = 4 per rank, x 100 Gbit/s x 0.192 = 76.8 Gbit/s, the measured figure.
    assert kv_rank_floor_gbps(GPU_INSTANCE_TYPES["p5.48xlarge"], 1.0) == pytest.approx(76.8, abs=1e-3)
