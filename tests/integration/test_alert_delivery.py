"""Alert delivery end to end on loopback, with the real Debian binaries: recorded series -> Prometheus
evaluates the program's rules -> Alertmanager routes with the program's configuration -> a loopback
webhook receives exactly the expected notification. And a quiet case.

- The series are backfilled with `promtool tsdb create-blocks-from openmetrics`, ending just before
  Prometheus starts, so `increase(...[5m])` and the burn-rate windows see them at "now".
- The rules are the program's (llm_pd_eks/alerts.rule_groups) with `for:` set to 0s: the pending
  periods are the promtool unit tests' subject (tests/integration/test_alert_rules.py); here the subject is the
  boundary Prometheus -> Alertmanager -> receiver. Only the test config shortens intervals
  (evaluation 1s, group_wait 3s, Prometheus resend-delay 1s); the routing tree, grouping and
  inhibitions are the program's.
- Waits are bounded polls of the servers' own APIs; nothing sleeps to synchronise.
- The binaries must exist (CI installs `prometheus` and `prometheus-alertmanager`): a missing one
  fails these tests, it never skips them.
"""

from __future__ import annotations

import copy
import http.server
import json
import subprocess
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import yaml
from helpers import ROOT, QuietHTTPServer
from prom_fixtures import Series, backfill, binary, free_port, get_json, process, prometheus, wait_for

from llm_pd_eks import metrics as m
from llm_pd_eks.alerts import (
    COMPONENT,
    CRITICAL_RECEIVER,
    EKS_CONTROL_PLANE_ALERTS,
    HEARTBEAT_RECEIVER,
    WARNING_RECEIVER,
    SnsTarget,
    WebhookTarget,
    alertmanager_config,
    rule_groups,
    runbook_anchor,
)
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import ObservabilityConfig

ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
AMTOOL = "/usr/bin/amtool"
INSTANCE = GPU_INSTANCE_TYPES["g6e.12xlarge"]
HEARTBEAT = "https://hc-ping.example.invalid/0f7c"
CONFIG = ObservabilityConfig.model_validate(
    {"alerting": {"runbookBaseUrl": "https://example.invalid/README.md", "heartbeatUrl": HEARTBEAT}}
)
# kube-prometheus-stack 88.5.3's always-firing Watchdog (its `general.rules` group, transcribed): the
# heartbeat the dead-man's switch listens for.
WATCHDOG = {"alert": "Watchdog", "expr": "vector(1)", "labels": {"severity": "none"}}

DEC = {"phase": "decode", "pod": "llm-pd-decode-worker-a"}
PRE = {"phase": "prefill", "pod": "llm-pd-prefill-worker-a"}


# --- recorded series --------------------------------------------------------------------------------


def scraped() -> Series:
    """Both phases' pods answer their scrape (the target alerts stay quiet)."""
    return {
        m.SCRAPE_UP: [
            ({"namespace": "llm-serving", "job": "monitoring/ray", "pod": p["pod"], "phase": p["phase"]}, lambda i: 1.0)
            for p in (PRE, DEC)
        ]
    }


def failing_kv_and_slow_ttft(errors: bool = True) -> Series:
    """NIXL transfers failing on decode and half of all first tokens over the TTFT SLO; with `errors`, the
    decode engine also finishes requests in error (the failures cost answers), else all end `stop`."""
    le = m.le(CONFIG.ttft_slo_seconds)
    reason = {"finished_reason": "error" if errors else "stop"}
    return {
        **scraped(),
        m.NIXL_FAILED_TRANSFERS: [(DEC, lambda i: 2.0 * i)],
        m.REQUEST_SUCCESS: [({**DEC, **reason}, lambda i: 1.0 * i)],
        f"{m.TTFT}_bucket": [({**PRE, "le": le}, lambda i: 50.0 * i), ({**PRE, "le": "+Inf"}, lambda i: 100.0 * i)],
        f"{m.TTFT}_count": [(PRE, lambda i: 100.0 * i)],
    }


def healthy() -> Series:
    le = m.le(CONFIG.ttft_slo_seconds)
    return {
        **scraped(),
        m.NIXL_FAILED_TRANSFERS: [(DEC, lambda i: 0.0)],
        f"{m.TTFT}_bucket": [({**PRE, "le": le}, lambda i: 100.0 * i), ({**PRE, "le": "+Inf"}, lambda i: 100.0 * i)],
        f"{m.TTFT}_count": [(PRE, lambda i: 100.0 * i)],
    }


# --- the servers --------------------------------------------------------------------------------------


class Webhook:
    """A loopback HTTP receiver that records every Alertmanager webhook body, with the path it came to
    under `_path` (/pages, /tickets, /heartbeat: one destination per receiver)."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.append({**json.loads(body), "_path": self.path})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self) -> "Webhook":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def rules_file(path: Path) -> Path:
    groups = copy.deepcopy(rule_groups(CONFIG, INSTANCE))
    groups[0]["rules"].append(dict(WATCHDOG))
    for group in groups:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = "0s"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def am_config(path: Path, webhook_url: str) -> Path:
    """Pages to <hook>/pages, tickets to <hook>/tickets, the heartbeat to <hook>/heartbeat every second."""
    update = {"group_wait": "3s", "group_interval": "1s", "heartbeat_url": f"{webhook_url}/heartbeat"}
    alerting = CONFIG.alerting.model_copy(update={**update, "heartbeat_interval": "1s"})  # test only
    config = alertmanager_config(
        alerting, WebhookTarget(f"{webhook_url}/pages"), WebhookTarget(f"{webhook_url}/tickets")
    )
    config["templates"] = []  # the chart's template directory does not exist here
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@contextmanager
def stack(tmp: Path, series: Series) -> Iterator[tuple[Webhook, str, str]]:
    """Backfilled TSDB + Prometheus (1s evaluation) + Alertmanager + loopback webhook."""
    data = backfill(tmp, series, 90)
    with Webhook() as hook:
        am_port, am_cluster = free_port(), free_port()
        am_file = am_config(tmp / "alertmanager.yml", hook.url)
        checked = subprocess.run(
            [binary(AMTOOL), "check-config", str(am_file)], capture_output=True, text=True, timeout=60
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        am_args = [
            binary(ALERTMANAGER),
            f"--config.file={am_file}",
            f"--storage.path={tmp / 'am'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            f"--cluster.listen-address=127.0.0.1:{am_cluster}",
        ]
        am = f"http://127.0.0.1:{am_port}"
        prom_config = {
            "global": {"evaluation_interval": "1s"},
            "rule_files": [str(rules_file(tmp / "rules.yml"))],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        }
        # Prometheus re-sends firing alerts every resend-delay (default 1m); alerts sent before it has
        # discovered the Alertmanager are dropped, so the test sets it to 1s (test config only)
        resend = "--rules.alert.resend-delay=1s"
        with process(am_args, tmp / "am.log"), prometheus(tmp, data, prom_config, resend) as prom:
            wait_for("Alertmanager ready", lambda: urllib.request.urlopen(f"{am}/-/ready", timeout=5).status == 200)
            yield hook, am, prom


def evaluated(prom: str, after: float) -> bool:
    """Every rule group has been evaluated since `after` (unix seconds)."""
    groups = get_json(f"{prom}/api/v1/rules")["data"]["groups"]
    return bool(groups) and all(_ts(g["lastEvaluation"]) > after for g in groups)


def _ts(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() if not rfc3339.startswith("0001") else 0


def firing(prom: str) -> set[str]:
    result = get_json(f"{prom}/api/v1/query?query=ALERTS%7Balertstate%3D%22firing%22%7D")["data"]["result"]
    return {r["metric"]["alertname"] for r in result}


# --- the tests ---------------------------------------------------------------------------------------


def notified(hook: Webhook, path: str) -> set[str]:
    return {a["labels"]["alertname"] for n in hook.received if n["_path"] == path for a in n["alerts"]}


def test_kv_failures_that_cost_answers_page_once_and_hold_back_the_ttft_burn(tmp_path: Path) -> None:
    """Failed transfers with requests ending in error: one page (to the pages destination), the failures'
    ticket (to the tickets destination), and the TTFT burn they cause held back."""
    kv = {"KVTransferFailuresLoseAnswers", "KVTransferFailures"}
    with stack(tmp_path, failing_kv_and_slow_ttft()) as (hook, am, prom):
        # the rules fire on Prometheus: the inhibition, not the data, keeps TTFT quiet
        wait_for("the alerts firing in Prometheus", lambda: {*kv, "TTFTBudgetBurn"} <= firing(prom))
        wait_for(
            "Alertmanager to hold them",
            lambda: {a["labels"]["alertname"] for a in get_json(f"{am}/api/v2/alerts")} >= {*kv, "TTFTBudgetBurn"},
        )
        wait_for("a page and a ticket", lambda: notified(hook, "/pages") and notified(hook, "/tickets"))
        states = {a["labels"]["alertname"]: a["status"] for a in get_json(f"{am}/api/v2/alerts")}
        # Alertmanager marks the TTFT alert suppressed, inhibited by the KV alerts
        assert states["TTFTBudgetBurn"]["state"] == "suppressed" and states["TTFTBudgetBurn"]["inhibitedBy"]
        assert states["KVTransferFailuresLoseAnswers"]["state"] == "active"
    (page,) = [n for n in hook.received if n["_path"] == "/pages"][:1]
    assert page["receiver"] == CRITICAL_RECEIVER and page["status"] == "firing"
    assert page["groupLabels"] == {"alertname": "KVTransferFailuresLoseAnswers", "phase": "decode"}
    (alert,) = page["alerts"]
    assert alert["labels"] == {
        "alertname": "KVTransferFailuresLoseAnswers",
        "component": COMPONENT,
        "phase": "decode",
        "severity": "critical",
    }
    assert alert["annotations"]["runbook_url"] == (
        f"https://example.invalid/README.md#{runbook_anchor('KVTransferFailuresLoseAnswers')}"
    )
    # nothing else reached the pages: no TTFT page; the failures themselves are a ticket
    assert notified(hook, "/pages") == {"KVTransferFailuresLoseAnswers"}, hook.received
    assert "KVTransferFailures" in notified(hook, "/tickets")
    assert all(n["receiver"] == WARNING_RECEIVER for n in hook.received if n["_path"] == "/tickets")


def test_kv_failures_recompute_heals_are_a_ticket_not_a_page(tmp_path: Path) -> None:
    with stack(tmp_path, failing_kv_and_slow_ttft(errors=False)) as (hook, _am, prom):
        wait_for("the failures firing in Prometheus", lambda: "KVTransferFailures" in firing(prom))
        wait_for("the ticket", lambda: "KVTransferFailures" in notified(hook, "/tickets"))
        assert "KVTransferFailuresLoseAnswers" not in firing(prom)
    # the TTFT burn the recompute costs still pages (latency is what it costs), the failures do not
    assert "KVTransferFailures" not in notified(hook, "/pages")
    assert "KVTransferFailuresLoseAnswers" not in notified(hook, "/pages")


def test_watchdog_beats_to_the_external_heartbeat(tmp_path: Path) -> None:
    """The dead-man's switch: the always-firing Watchdog reaches the heartbeat receiver, again and again
    (its heartbeat interval), and never the pages or the tickets."""
    with stack(tmp_path, healthy()) as (hook, _am, _prom):
        wait_for("two heartbeats", lambda: len([n for n in hook.received if n["_path"] == "/heartbeat"]) >= 2)
    beats = [n for n in hook.received if n["_path"] == "/heartbeat"]
    assert {n["receiver"] for n in beats} == {HEARTBEAT_RECEIVER}
    assert {a["labels"]["alertname"] for n in beats for a in n["alerts"]} == {"Watchdog"}
    assert "Watchdog" not in notified(hook, "/pages") | notified(hook, "/tickets")


def test_healthy_series_page_nobody(tmp_path: Path) -> None:
    with stack(tmp_path, healthy()) as (hook, am, prom):
        started = time.time()
        # three full evaluations after start: anything firing would be in Alertmanager by then (resend 1s)
        wait_for("three rule evaluations", lambda: evaluated(prom, started + 2))
        assert firing(prom) == {"Watchdog"}
        assert {a["labels"]["alertname"] for a in get_json(f"{am}/api/v2/alerts")} <= {"Watchdog"}
    assert [n for n in hook.received if n["_path"] != "/heartbeat"] == []


def test_pages_and_tickets_have_a_destination_each() -> None:
    config = alertmanager_config(
        CONFIG.alerting, WebhookTarget("http://127.0.0.1:1/pages"), SnsTarget("arn:aws:sns:us-west-2:1:t", "us-west-2")
    )
    routes = [r for r in config["route"]["routes"] if r["receiver"] == WARNING_RECEIVER]
    assert {"matchers": ['severity = "warning"'], "receiver": WARNING_RECEIVER} in routes
    (critical,) = [r for r in config["route"]["routes"] if r["receiver"] == CRITICAL_RECEIVER]
    assert critical["repeat_interval"] == CONFIG.alerting.critical_repeat_interval
    receivers = {r["name"]: r for r in config["receivers"]}
    assert receivers[CRITICAL_RECEIVER]["webhook_configs"][0]["url"] == "http://127.0.0.1:1/pages"
    assert receivers[WARNING_RECEIVER]["sns_configs"][0]["topic_arn"] == "arn:aws:sns:us-west-2:1:t"
    assert receivers[HEARTBEAT_RECEIVER]["webhook_configs"][0]["url"] == HEARTBEAT


def test_every_alert_links_its_runbook_absolutely() -> None:
    """Each alert's runbook_url is the configured absolute page plus the anchor of its section in
    docs/operations.md: a link that opens from a phone, not a path relative to nothing."""
    headings = {
        line.removeprefix("### ").strip()
        for line in (ROOT / "docs" / "operations.md").read_text().splitlines()
        if line.startswith("### Runbook: ")
    }
    for group in rule_groups(CONFIG, INSTANCE):
        for rule in group["rules"]:
            if "alert" in rule:
                assert f"Runbook: {rule['alert']}" in headings, rule["alert"]
                url = rule["annotations"]["runbook_url"]
                assert url == f"https://example.invalid/README.md#{runbook_anchor(rule['alert'])}"


def test_a_runbook_base_must_be_absolute_and_unset_links_nothing() -> None:
    import pydantic

    try:
        ObservabilityConfig.model_validate({"alerting": {"runbookBaseUrl": "README.md"}})
    except pydantic.ValidationError as error:
        assert "runbookBaseUrl" in str(error) or "runbook_base_url" in str(error)
    else:
        raise AssertionError("a relative runbookBaseUrl was accepted")
    unset = rule_groups(ObservabilityConfig(), INSTANCE)
    annotations = [r["annotations"] for g in unset for r in g["rules"] if "alert" in r]
    assert annotations and all("runbook_url" not in a for a in annotations)  # never an empty link


def routed(tmp_path: Path, *labels: str) -> str:
    """The receiver Alertmanager's own routing tree picks for `labels` (`amtool config routes test`)."""
    config = alertmanager_config(
        CONFIG.alerting, WebhookTarget("http://127.0.0.1:1/pages"), WebhookTarget("http://127.0.0.1:1/tickets")
    )
    config["templates"] = []
    path = tmp_path / "routes.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    done = subprocess.run(
        [binary(AMTOOL), "config", "routes", "test", f"--config.file={path}", *labels],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_the_default_route_reaches_someone(tmp_path: Path) -> None:
    """An alert no route names (no severity, another severity) is a ticket; only the chart's InfoInhibitor
    and `info` alerts go to the null sink; Watchdog beats to the heartbeat; critical pages, except the
    mixin's alerts on the control plane EKS runs, which are tickets."""
    assert routed(tmp_path, "alertname=KubePersistentVolumeFillingUp") == WARNING_RECEIVER
    assert routed(tmp_path, "alertname=Custom", "severity=error") == WARNING_RECEIVER
    assert routed(tmp_path, "alertname=CPUThrottlingHigh", "severity=info") == "null"
    assert routed(tmp_path, "alertname=Watchdog", "severity=none") == HEARTBEAT_RECEIVER
    assert routed(tmp_path, "alertname=ServeServerErrors", "severity=critical") == CRITICAL_RECEIVER
    for name in EKS_CONTROL_PLANE_ALERTS:
        assert routed(tmp_path, f"alertname={name}", "severity=critical") == WARNING_RECEIVER, name


def serve_errors_and_decode_gone() -> Series:
    """10% of Serve's HTTP requests answered 500, and only prefill pods in scrape discovery."""
    labels = {"application": "llm", "route": "/v1", "method": "POST"}
    return {
        m.SERVE_HTTP_REQUESTS: [
            ({**labels, "status_code": "200"}, lambda i: 90.0 * i),
            ({**labels, "status_code": "500"}, lambda i: 10.0 * i),
        ],
        m.SCRAPE_UP: [
            ({"namespace": "llm-serving", "job": "monitoring/ray", "phase": "prefill", "pod": "p-0"}, lambda i: 1.0)
        ],
    }


def test_serve_errors_and_missing_targets_page(tmp_path: Path) -> None:
    with stack(tmp_path, serve_errors_and_decode_gone()) as (hook, _am, prom):
        wanted = {"ServeServerErrors", "ServingTargetsMissing"}
        wait_for("both alerts firing in Prometheus", lambda: wanted <= firing(prom))
        wait_for(
            "a notification of each",
            lambda: wanted <= {a["labels"]["alertname"] for n in hook.received for a in n["alerts"]},
        )
    by_name = {a["labels"]["alertname"]: (n["receiver"], a) for n in hook.received for a in n["alerts"]}
    assert by_name["ServeServerErrors"][0] == CRITICAL_RECEIVER
    assert by_name["ServeServerErrors"][1]["labels"]["application"] == "llm"
    receiver, missing = by_name["ServingTargetsMissing"]
    assert receiver == CRITICAL_RECEIVER and missing["labels"]["phase"] == "decode"
    assert "ServingTargetDown" not in by_name  # prefill's one target answers


def test_the_sns_receiver_config_is_valid_for_alertmanager(tmp_path: Path) -> None:
    arn = "arn:aws:sns:us-west-2:123456789012:observability-alerts-7f3a"
    tickets = "arn:aws:sns:us-west-2:123456789012:observability-tickets-1b2c"
    config = alertmanager_config(CONFIG.alerting, SnsTarget(arn, "us-west-2"), SnsTarget(tickets, "us-west-2"))
    config["templates"] = []
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    checked = subprocess.run(
        [binary(AMTOOL), "check-config", str(tmp_path / "am.yml")], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (sns,) = next(r for r in config["receivers"] if r["name"] == CRITICAL_RECEIVER)["sns_configs"]
    assert sns["topic_arn"] == arn and sns["sigv4"] == {"region": "us-west-2"}
    broken = copy.deepcopy(config)
    broken["route"]["routes"][3]["receiver"] = "nobody"  # a route to an undefined receiver
    (tmp_path / "bad.yml").write_text(yaml.safe_dump(broken, sort_keys=False))
    refused = subprocess.run(
        [binary(AMTOOL), "check-config", str(tmp_path / "bad.yml")], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0 and "nobody" in refused.stdout + refused.stderr


# --- the receiver in the stack config and the plan -----------------------------------------------------

GOOD = {
    "network": {"vpcCidr": "10.0.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"]},
    "gpuNodes": {"instanceType": "g6e.12xlarge", "availabilityZone": "us-west-2a", "maxSize": 2},
}
WEBHOOK = {"observability": {"alerting": {"receiver": "webhook"}}}
SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's marker of a secret value in a property struct


def test_a_webhook_receiver_needs_its_url_as_a_secret() -> None:
    from helpers import config_problems, merged, validate_values

    (problem,) = config_problems(merged(GOOD, WEBHOOK))
    assert "alertWebhookUrl" in problem and "--secret" in problem and "receiver is webhook" in problem
    (plain,) = config_problems({**merged(GOOD, WEBHOOK), "alertWebhookUrl": "https://hooks.example.invalid/x"})
    assert "set in plain text" in plain
    ok = validate_values(
        {**merged(GOOD, WEBHOOK), "alertWebhookUrl": "https://hooks.example.invalid/x"},
        secret_keys=["llm-pd-eks:alertWebhookUrl"],
    )
    assert ok.observability.alerting.receiver == "webhook"


def test_the_webhook_url_stays_secret_in_the_plan() -> None:
    from google.protobuf import json_format

    from llm_pd_eks_tools.core.stack import load_stack_config
    from llm_pd_eks_tools.plan.preview.mockrun import run_program

    config, secret_keys = load_stack_config("dev")
    key = "llm-pd-eks:observability"
    config[key] = json.dumps({**json.loads(config.get(key, "{}")), "alerting": {"receiver": "webhook"}})
    url = "https://hooks.example.invalid/services/T000/B000/day-two"
    config["llm-pd-eks:alertWebhookUrl"] = url
    run = run_program("dev", config, [*secret_keys, "llm-pd-eks:alertWebhookUrl"])
    # pages go to the webhook: only the tickets topic, and the role that publishes to it
    assert [t.name for t in run.of_type("aws:sns/topic:Topic")] == ["observability-tickets"]
    (stack,) = [r for r in run.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "kube-prometheus-stack"]
    values = stack.inputs["values"]
    # one secret inside makes the whole `values` input secret (encrypted in state, hidden in diffs)
    assert SECRET_SIG in values and SECRET_SIG in json.dumps(json_format.MessageToDict(stack.inputs_struct))
    receivers = {r["name"]: r for r in values["value"]["alertmanager"]["config"]["receivers"]}
    assert receivers[CRITICAL_RECEIVER]["webhook_configs"] == [{"url": url, "send_resolved": True}]
