"""`make cost-audit` offline: Cost Explorer from a moto server (moto 5.2.5 serves queued
`get_cost_and_usage` results, POSTed to its /moto-api/static/ce/cost-and-usage-results and handed out
in request order, one per distinct request), the cluster's Prometheus a real Debian Prometheus over
backfilled series, Service Quotas a botocore Stubber on a real client (moto has no ec2 quota codes).

The audit runs at a fixed moment, 03:00 UTC, so a 6-hour window covers the last 3 hours of one billed
day and the first 3 of the day being billed: Cost Explorer's amounts are per day, the fakes bill the
stack's hourly rates for the hours of each day that were billed, and every expectation is a rate
times the window's 6 hours, computed here from the rates, not copied from a run.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
from botocore.stub import Stubber
from prom_fixtures import Series, backfill, free_port, process, prometheus, wait_for

from llm_pd_eks import metrics as m
from llm_pd_eks.catalog import gpu_instance_type
from llm_pd_eks_sizing import cost_audit
from llm_pd_eks_tools.core.cli import Exit, run
from llm_pd_eks_tools.core.stack import stack_config

STACK = "dev"
CONFIG = stack_config(STACK)
GPU = gpu_instance_type(CONFIG.gpu_nodes.instance_type)
HOURS = 6
MINUTES = HOURS * 60
BUSY_DECODE_MIN = 120  # decode GPUs work for 2 h, then idle (2 % utilisation) for 4 h
DECODE_TOKENS_PER_MIN = 60_000
PREFILL_ENGINES, DECODE_ENGINES = 4, 1

# The audit's moment: 03:00 UTC yesterday (in the past on any clock, inside Prometheus's retention).
NOW = datetime.combine(datetime.now(UTC).date() - timedelta(days=1), clock(3), tzinfo=UTC)
GPU_NODES = 2
# Hourly rates the fakes bill (net amortized USD per hour of the whole stack), per component.
GPU_PRICE = 21.9576  # p4d.24xlarge on demand, us-west-2 (llm_pd_eks/data/prices.json)
RATES = {
    "gpu-nodes": GPU_NODES * GPU_PRICE,
    "system-nodes": 2 * 0.2016,
    "eks-control-plane": 0.10,
    "nat-gateway": 0.045,
    "ebs-volumes": 0.30,
    "network": 0.05,
}
# (day, hours of it Cost Explorer has billed): the day before NOW's, whole, and NOW's, 3 hours in.
BILLED = [(NOW.date() - timedelta(days=1), 24.0), (NOW.date(), 3.0)]


def series() -> Series:
    gpus = range(GPU.gpus)
    util = [({"node": "ip-10-10-1-11", "gpu": str(g), "modelName": GPU.nvml_gpu_name}, lambda i: 80.0) for g in gpus]
    util += [
        (
            {"node": "ip-10-10-1-12", "gpu": str(g), "modelName": GPU.nvml_gpu_name},
            lambda i: 20.0 if i < BUSY_DECODE_MIN else 2.0,
        )
        for g in gpus
    ]
    running = [
        ({"phase": "prefill", "node": "ip-10-10-1-11", "pod": f"llm-pd-prefill-{n}"}, lambda i: 3.0)
        for n in range(PREFILL_ENGINES)
    ]
    running += [({"phase": "decode", "node": "ip-10-10-1-12", "pod": "llm-pd-decode-0"}, lambda i: 40.0)]
    tokens = [
        ({"phase": "decode", "pod": "llm-pd-decode-0"}, lambda i: DECODE_TOKENS_PER_MIN * i),
        ({"phase": "prefill", "pod": "llm-pd-prefill-0"}, lambda i: 200.0 * i),
    ]
    return {m.GPU_UTIL: util, m.RUNNING: running, m.GENERATION_TOKENS: tokens}


def ce_day(day: date, groups: list[tuple[str, dict[str, float]]]) -> dict[str, Any]:
    return {
        "TimePeriod": {"Start": day.isoformat(), "End": (day + timedelta(days=1)).isoformat()},
        "Total": {},
        "Estimated": day == NOW.date(),
        "Groups": [
            {
                "Keys": [k],
                "Metrics": {
                    n: {"Amount": f"{v:.6f}", "Unit": "USD" if n.endswith("Cost") else "Hrs"}
                    for n, v in metrics.items()
                },
            }
            for k, metrics in groups
        ],
    }


def ce_results(billed: list[tuple[date, float]] = BILLED) -> list[dict[str, Any]]:
    """Queued in the order the audit asks: by SERVICE, INSTANCE_TYPE, PURCHASE_TYPE, USAGE_TYPE."""
    cost, usage = cost_audit.COST_METRIC, cost_audit.USAGE_METRIC

    def query(groups: Any) -> dict[str, Any]:
        return {"ResultsByTime": [ce_day(d, groups(h)) for d, h in billed], "DimensionValueAttributes": []}

    r = RATES
    return [
        query(
            lambda h: [
                (cost_audit.EC2_COMPUTE, {cost: (r["gpu-nodes"] + r["system-nodes"]) * h}),
                ("Amazon Elastic Container Service for Kubernetes", {cost: r["eks-control-plane"] * h}),
                (cost_audit.EC2_OTHER, {cost: (r["nat-gateway"] + r["ebs-volumes"]) * h}),
                ("Amazon Virtual Private Cloud", {cost: r["network"] * h}),
            ]
        ),
        query(
            lambda h: [
                (GPU.name, {cost: r["gpu-nodes"] * h, usage: GPU_NODES * h}),
                (CONFIG.system_nodes.instance_type, {cost: r["system-nodes"] * h, usage: 2 * h}),
            ]
        ),
        query(lambda h: [(cost_audit.ON_DEMAND, {cost: r["gpu-nodes"] * h, usage: GPU_NODES * h})]),
        query(
            lambda h: [
                ("USW2-NatGateway-Hours", {cost: r["nat-gateway"] * h}),
                ("USW2-EBS:VolumeUsage.gp3", {cost: r["ebs-volumes"] * h}),
            ]
        ),
    ]


@pytest.fixture
def moto_url(tmp_path: Path) -> Iterator[str]:
    """A moto server of its own (the CE queue is per server), stopped afterwards."""
    port = free_port()
    args = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with process(args, tmp_path / "moto.log"):
        url = f"http://127.0.0.1:{port}"
        wait_for("moto server", lambda: urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=5).status == 200)
        yield url


def queue(url: str, results: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(
        f"{url}/moto-api/static/ce/cost-and-usage-results",
        data=json.dumps({"results": results}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201


def quotas(vcpus: float) -> tuple[Any, Stubber]:
    client = boto3.client(
        "service-quotas", region_name=CONFIG.region, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stub = Stubber(client)
    code = GPU.family_quota_code
    stub.add_response(
        "get_service_quota",
        {
            "Quota": {
                "ServiceCode": "ec2",
                "QuotaCode": code,
                "Value": vcpus,
                "QuotaName": "Running On-Demand P instances",
            }
        },
        {"ServiceCode": "ec2", "QuotaCode": code},
    )
    stub.activate()
    return client, stub


def ce_client(url: str) -> Any:
    return boto3.client(
        "ce", region_name="us-east-1", endpoint_url=url, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


def png_size_and_colors(data: bytes) -> tuple[int, int, set[tuple[int, int, int]]]:
    """(width, height, the RGB colours used) of a PNG, decoded by Pillow (matplotlib's own dependency)."""
    from PIL import Image

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    image = Image.open(io.BytesIO(data)).convert("RGB")
    return image.width, image.height, {rgb for _, rgb in image.getcolors(maxcolors=image.width * image.height)}


def test_the_chart_is_the_same_bytes_for_the_same_bars() -> None:
    from llm_pd_eks_sizing.cost_audit.png_chart import ROW_PX, bar_chart

    bars = [("gpu-nodes", 263.49, "$263.49"), ("network", 130.0, "$130.00")]
    first = bar_chart("dev spend", bars)
    assert bar_chart("dev spend", bars) == first  # no timestamp, no version text
    assert b"Software" not in first and b"matplotlib" not in first
    assert bar_chart("dev spend", [*bars, ("nat-gateway", 0.27, "$0.27")]) != first
    width, height, colors = png_size_and_colors(bar_chart("dev spend", [*bars, ("ebs", 90.0, "$90.00")], width=640))
    assert width == 640 and height == png_size_and_colors(first)[1] + ROW_PX  # a row per bar
    assert {(31, 119, 180), (255, 127, 14), (44, 160, 44)} <= colors  # each bar its own colour


def test_audit_from_all_sources(tmp_path: Path, moto_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    queue(moto_url, ce_results())
    quota_vcpus = 4 * GPU.vcpus  # four nodes' worth: maxSize + surge needs more
    sq, stub = quotas(quota_vcpus)
    data = backfill(tmp_path, series(), MINUTES, end=NOW.timestamp())
    out = tmp_path / "out"
    with prometheus(tmp_path, data, {"global": {"scrape_interval": "15s"}}) as prom:
        code = cost_audit.main(
            ["--stack", STACK, "--since", f"{HOURS}h", "--prometheus", prom, "--out", str(out)],
            clients=(ce_client(moto_url), sq),
            now=NOW,
        )
    stub.assert_no_pending_responses()
    err = capsys.readouterr().err
    assert code == Exit.OK, err
    for source in ("cost explorer", "prometheus", "service quotas", "make size"):
        assert f"cost-audit: {source}: ok" in err  # a progress line per source

    report = json.loads((out / "report.json").read_text())
    # the window's 6 hours of each rate: 3 of the whole day before (a 3/24 share) and the 3 billed today
    assert report["spend_by_component"] == pytest.approx({k: rate * HOURS for k, rate in RATES.items()}, abs=0.01)
    assert report["total_spend"] == pytest.approx(sum(RATES.values()) * HOURS, abs=0.02)
    assert report["gpu_node_hours_billed"] == pytest.approx(GPU_NODES * HOURS)
    assert report["gpu_node_hours_seen"] == pytest.approx(GPU_NODES * HOURS, rel=0.01)  # the two sources agree
    assert "prorated" in report["window_basis"] and f"{BILLED[0][0]} x0.125" in report["window_basis"]
    gpu_cost = RATES["gpu-nodes"] * HOURS
    gpu = report["gpu"]
    gpus = 2 * GPU.gpus
    assert gpu["gpu_hours"] == pytest.approx(gpus * HOURS, rel=0.01)
    idle_hours = GPU.gpus * (MINUTES - BUSY_DECODE_MIN) / 60
    assert gpu["idle_gpu_hours"] == pytest.approx(idle_hours, rel=0.01)
    decode_util = (20.0 * BUSY_DECODE_MIN + 2.0 * (MINUTES - BUSY_DECODE_MIN)) / MINUTES
    assert gpu["util_by_phase_percent"]["prefill"] == pytest.approx(80.0)
    assert gpu["util_by_phase_percent"]["decode"] == pytest.approx(decode_util, abs=0.2)
    assert (gpu["nodes_min"], gpu["nodes_max"]) == (2, 2)
    decode_tokens = DECODE_TOKENS_PER_MIN * MINUTES
    assert report["tokens_by_phase"]["decode"] == pytest.approx(decode_tokens, rel=0.01)
    assert report["replicas"]["max"] == {"decode": DECODE_ENGINES, "prefill": PREFILL_ENGINES}
    assert report["actual_usd_per_mtok"] == pytest.approx(gpu_cost / (decode_tokens / 1e6), rel=0.01)
    assert report["idle_spend"] == pytest.approx(gpu_cost * idle_hours / (gpus * HOURS), rel=0.01)
    assert report["reservation_coverage"] == 0.0
    surge = 2  # one AZ: twice the AZs beats maxUnavailable 1
    need = (CONFIG.gpu_nodes.max_size + surge) * GPU.vcpus
    assert report["quota"]["needed_vcpus"] == need and report["quota"]["headroom_vcpus"] == quota_vcpus - need
    from llm_pd_eks_sizing import model as sizing

    sized = sizing.size(STACK, CONFIG, sizing.load_workload(cost_audit.ROOT / "workloads" / f"{STACK}.yaml"))
    assert report["predicted"]["disaggregated_usd_per_mtok"] == sized.disaggregated.usd_per_mtok

    recs = " ".join(report["recommendations"])
    assert "Idle GPUs" in recs and f"${report['idle_spend']:,.2f}" in recs
    assert "prefill: peaked at maxReplicas" in recs and "decode: never above 1 of maxReplicas 4" in recs
    assert "shift replicas toward prefill" in recs
    assert "Reservations: 0% of GPU instance hours" in recs
    if quota_vcpus < need:
        assert f"request {need - quota_vcpus} more vCPUs" in recs

    md = (out / "report.md").read_text()
    assert "## Spend by component" in md and f"| gpu-nodes | ${gpu_cost:,.2f} |" in md and "## Recommendations" in md
    assert "net amortized cost; prorated" in md and "| ebs-volumes |" in md
    width, height, colors = png_size_and_colors((out / "spend.png").read_bytes())
    assert width == 900 and height > 6 * 34  # one row per component
    assert (31, 119, 180) in colors  # the bars are drawn


def test_every_source_missing_is_named_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    from botocore.config import Config

    cfg = Config(connect_timeout=2, read_timeout=2, retries={"mode": "standard", "total_max_attempts": 1})
    ce = boto3.client(
        "ce",
        region_name="us-east-1",
        endpoint_url=closed,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=cfg,
    )
    sq = boto3.client(
        "service-quotas",
        region_name="us-west-2",
        endpoint_url=closed,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=cfg,
    )
    out = tmp_path / "out"
    started = time.monotonic()
    code = cost_audit.main(
        ["--stack", STACK, "--out", str(out), "--workload", str(tmp_path / "none.yaml")], clients=(ce, sq)
    )
    err = capsys.readouterr().err
    assert code == Exit.UNVERIFIED
    assert time.monotonic() - started < 120  # bounded: short timeouts, no retry storm
    for source in ("cost explorer", "prometheus", "service quotas", "make size"):
        assert f"cost-audit: {source}: unavailable: " in err
    md = (out / "report.md").read_text()
    assert md.count("UNAVAILABLE") == 4 and "no --prometheus URL" in md
    assert (out / "spend.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--stack", STACK, "--since", "7 days"], "give a window such as 7d"),
        (["--stack", STACK, "--since", "120d"], "at most 90d"),
        (["--stack", STACK, "--prometheus", "localhost:9090"], "is not a URL"),
        (["--stack", "nosuch"], "nosuch"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = run("cost-audit", lambda a: cost_audit.main(a, clients=(None, None)), argv)
    err = capsys.readouterr().err.strip()
    assert code == Exit.USAGE and "\n" not in err and words in err and err.startswith("cost-audit: ")


def test_the_cli_runs_as_a_module(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_sizing.cost_audit", "--stack", STACK, "--since", "0d"],
        cwd=cost_audit.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == Exit.USAGE and "Traceback" not in result.stderr


def test_whole_days_on_both_sides(tmp_path: Path, moto_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--since 1d`: the whole UTC day before NOW's, asked of Cost Explorer as that one day, counted whole."""
    day = NOW.date() - timedelta(days=1)
    queue(moto_url, ce_results([(day, 24.0)]))
    out = tmp_path / "out"
    code = cost_audit.main(
        ["--stack", STACK, "--since", "1d", "--out", str(out)], clients=(ce_client(moto_url), None), now=NOW
    )
    err = capsys.readouterr().err
    assert code == Exit.UNVERIFIED  # no Prometheus, no quota client: named, not fatal
    assert f"cost explorer: ok ({len(RATES)} component(s), {day} to {NOW.date()} (End exclusive)" in err
    report = json.loads((out / "report.json").read_text())
    assert report["spend_by_component"] == pytest.approx({k: rate * 24 for k, rate in RATES.items()}, abs=0.01)
    assert (report["start"], report["end"]) == (f"{day}T00:00+00:00", f"{NOW.date()}T00:00+00:00")
    assert report["window_basis"].startswith(f"whole UTC days {day} to {NOW.date()}")


@pytest.mark.parametrize(
    "since, share_today, share_yesterday",
    [
        ("6h", 1.0, 3 / 24),  # 21:00 yesterday to 03:00: 3 of yesterday's 24 h, all 3 billed today
        ("2h", 2 / 3, 0.0),  # 01:00 to 03:00: 2 of today's 3 billed hours
        ("27h", 1.0, 1.0),  # from midnight yesterday
    ],
)
def test_partial_days_are_prorated_by_billed_hours(since: str, share_today: float, share_yesterday: float) -> None:
    window = cost_audit.parse_since(since, NOW)
    assert not window.whole_days
    assert window.day_share(NOW.date()) == pytest.approx(share_today)
    assert window.day_share(NOW.date() - timedelta(days=1)) == pytest.approx(share_yesterday)


def test_advice_knows_what_covers_the_gpus() -> None:
    """A Capacity Block is prepaid: no advice; a capacity reservation bills On Demand: only a Savings
    Plan discounts it; on demand: either."""
    from helpers import validate_values

    from llm_pd_eks_sizing.cost_audit.advice import reservation_advice
    from llm_pd_eks_sizing.cost_audit.model import Audit

    audit = Audit("dev", "1d", "", "", gpu={"nodes_min": 2}, reservation_coverage=0.0)
    base = {
        "network": {"availabilityZones": ["us-west-2a", "us-west-2b"]},
        "gpuNodes": {"instanceType": "p4d.24xlarge", "availabilityZone": "us-west-2a"},
    }

    def with_capacity(capacity: Any) -> Any:
        return validate_values({**base, "gpuNodes": {**base["gpuNodes"], "capacity": capacity}})

    (on_demand,) = reservation_advice(audit, with_capacity("onDemand"), 24, GPU_PRICE)
    assert "Savings Plan (price) or a capacity reservation (capacity)" in on_demand
    (odcr,) = reservation_advice(audit, with_capacity({"reservationId": "cr-0123456789abcdef0"}), 24, GPU_PRICE)
    assert "holds the capacity at the On-Demand rate" in odcr and "Compute Savings Plan" in odcr
    assert reservation_advice(audit, with_capacity({"capacityBlockId": "cr-0123456789abcdef0"}), 24, GPU_PRICE) == []
    covered = Audit("dev", "1d", "", "", gpu={"nodes_min": 2}, reservation_coverage=0.8)
    assert reservation_advice(covered, with_capacity("onDemand"), 24, GPU_PRICE) == []
