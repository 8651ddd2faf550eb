"""The metric names, alert rules and dashboard queries on a real Prometheus, fed by Ray's own exporter code.

Two exporters (tests/ray_exporter.py: the installed Ray's (2.58.0) OpenTelemetry recorder, so Ray's names and
suffixes) stand in for a prefill and a decode worker; Prometheus scrapes them with the labels the
PodMonitor adds (`phase`, `pod`, `node`) and loads the generated rule file. A misspelt metric (a
missing `_total`, `vllm:` instead of `ray_vllm_`) would return no samples here.
"""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
import yaml
from helpers import requires_binary
from verify_fakes import Prometheus, RayExporter

from llm_pd_eks import metrics as m
from llm_pd_eks.alerts import GROUP_NAME, KV_THROUGHPUT_RECORD, rule_groups
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES, KV_FLOOR_FRACTION
from llm_pd_eks.config import ObservabilityConfig
from llm_pd_eks.dashboards import dashboard, expressions
from llm_pd_eks.kv_transfer import kv_rank_floor_gbps

pytestmark = requires_binary("prometheus")
INSTANCE = GPU_INSTANCE_TYPES["g6e.12xlarge"]
CONFIG = ObservabilityConfig()
FLOOR = kv_rank_floor_gbps(INSTANCE, KV_FLOOR_FRACTION)
VLLM_NAME = re.compile(re.escape(m.RAY_PREFIX) + r"vllm_\w+")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("prometheus")
    rules = workdir / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups(CONFIG, INSTANCE)}, sort_keys=False))
    exporters = {phase: RayExporter() for phase in m.PHASES}  # start both, then wait: imports overlap
    server = None
    try:
        for exporter in exporters.values():
            exporter.wait()
        exporters["prefill"].record(tokens=1)
        for _ in range(3):
            exporters["decode"].record(transfers=[[448 * 2**20, 0.0376]], tokens=16)
        targets = [
            (e.target, {m.PHASE_LABEL: phase, "pod": f"llm-pd-{phase}-a", m.NODE_LABEL: f"node-{phase}"})
            for phase, e in exporters.items()
        ]
        server = Prometheus(workdir, targets, rules).wait_ready()
        server.wait_for(f"{m.NIXL_BYTES}_count")
        # rate() needs growth between scrapes: traffic after the first scrape, as a live service has
        for _ in range(3):
            exporters["decode"].record(transfers=[[448 * 2**20, 0.0376]], tokens=16)
        yield server
    finally:
        if server is not None:
            server.close()
        for exporter in exporters.values():
            exporter.close()


@pytest.mark.parametrize(
    "name",
    [
        m.scraped_name(vllm_name) + ("_count" if kind == m.HISTOGRAM else "")
        for vllm_name, kind in m.VLLM_METRICS.items()
    ],
)
def test_metric_names_match_what_ray_exports(prometheus, name):
    phases = {s["metric"][m.PHASE_LABEL] for s in prometheus.wait_for(name)}
    assert "decode" in phases, name


def test_the_rule_file_loads_and_every_rule_is_healthy(prometheus):
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/rules", timeout=10) as response:
        groups = json.loads(response.read())["data"]["groups"]
    (group,) = [g for g in groups if g["name"] == GROUP_NAME]
    assert len(group["rules"]) == len(rule_groups(CONFIG, INSTANCE)[0]["rules"])
    assert all(r["health"] in ("ok", "unknown") for r in group["rules"]), group["rules"]


def test_kv_throughput_is_measured_above_the_floor(prometheus):
    (sample,) = prometheus.wait_for(f'{KV_THROUGHPUT_RECORD}{{{m.PHASE_LABEL}="decode"}} > 0')
    # 448 MiB in 37.6 ms is 100 Gbit/s; Ray rebuilds the sums from bucket midpoints, so only roughly.
    assert FLOOR < float(sample["value"][1]) < 200


def test_every_dashboard_query_runs_and_the_serving_panels_have_data(prometheus):
    model = dashboard(FLOOR, {INSTANCE.name: 10.49264})
    for expr in expressions(model):
        prometheus.query(expr)  # a query Prometheus refuses raises (status != success)
    assert prometheus.wait_for(f"histogram_quantile(0.5, sum by (phase, le) (rate({m.TTFT}_bucket[5m])))")
    assert prometheus.wait_for(f"sum by (phase) ({m.RUNNING})")


def test_every_vllm_name_the_alerts_and_dashboards_query_is_served(prometheus):
    """A name an expression spells by hand (not through llm_pd_eks/metrics.py) must still be one Ray exports."""
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/label/__name__/values", timeout=10) as response:
        served = set(json.loads(response.read())["data"])
    rules = [r["expr"] for group in rule_groups(CONFIG, INSTANCE) for r in group["rules"]]
    queried = {n for expr in [*rules, *expressions(dashboard(FLOOR, {}))] for n in VLLM_NAME.findall(expr)}
    assert {m.TTFT + "_bucket", m.NIXL_BYTES + "_sum"} <= queried
    assert queried <= served, sorted(queried - served)
