"""`python -m llm_pd_eks_sizing.cost_audit`: run every source (each optional), derive, advise, write."""

from __future__ import annotations

import json
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable, Optional

import boto3

from llm_pd_eks.config import CapacityBlock, CapacityReservation, ConfigError, StackConfig
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, one_line, regular_file, say
from llm_pd_eks_tools.core.io_safety import redact
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.ops.preflight import _client_errors, check_endpoint_env, client_config, describe_error

from .advice import derive, gpu_quota, predicted, recommendations
from .cost_explorer import cost_explorer
from .model import Audit, Source
from .prometheus import prometheus, prometheus_queries
from .report import check_out_dir, render_markdown, write_report
from .window import parse_since

PROG = "cost-audit"


DESCRIPTION = "`make cost-audit STACK=... [SINCE=7d]`: what the stack cost, what it served, and what to change."


def progress(source: str, text: str) -> None:
    say(PROG, f"{source}: {text}")


def _guarded(audit: Audit, name: str, run: Callable[[], str]) -> None:
    """Run one source; its failure is recorded and printed, never raised."""
    started = time.monotonic()
    try:
        detail = run()
        audit.sources.append(Source(name, True, f"{detail}, {time.monotonic() - started:.1f}s"))
        progress(name, f"ok ({detail})")
    except Exception as error:  # each source is optional: name it, keep going
        reason = one_line(redact(f"{type(error).__name__}: {error}"), 200)
        audit.sources.append(Source(name, False, reason))
        progress(name, f"unavailable: {reason}")


def load_config(stack: str) -> StackConfig:
    try:
        return stack_config(stack, ROOT)
    except FileNotFoundError as error:
        raise ToolError(Exit.USAGE, one_line(str(error))) from None
    except ConfigError as error:
        raise ToolError(Exit.USAGE, one_line(f"Pulumi.{stack}.yaml: {'; '.join(error.problems)}")) from None


def capacity_label(config: StackConfig) -> str:
    capacity = config.gpu_nodes.capacity
    if isinstance(capacity, CapacityReservation):
        return f"reservation {capacity.reservation_id}"
    if isinstance(capacity, CapacityBlock):
        return f"capacity block {capacity.capacity_block_id}"
    return "on demand"


def main(
    argv: Optional[list[str]] = None, clients: Optional[tuple[Any, Any]] = None, now: Optional[datetime] = None
) -> int:
    """CLI entry. `clients` = (cost explorer, service quotas) to inject; built from boto3 otherwise."""
    parser = ArgumentParser(prog="python -m llm_pd_eks_sizing.cost_audit", description=DESCRIPTION)
    parser.add_argument("--stack", required=True, help="the stack (Pulumi.<stack>.yaml)")
    parser.add_argument(
        "--since", default="7d", help="7d: the 7 whole UTC days before today; 36h: the 36 hours up to now (default 7d)"
    )
    parser.add_argument(
        "--prometheus",
        default=os.environ.get("PROMETHEUS_URL"),
        help="the cluster Prometheus URL (default $PROMETHEUS_URL; omitted: that source is skipped)",
    )
    parser.add_argument(
        "--workload", type=regular_file, help="the workload `make size` sized (default workloads/<stack>.yaml)"
    )
    parser.add_argument("--out", type=Path, help="output folder (default build/cost-audit/<stack>)")
    parser.add_argument("--json", action="store_true", help="print report.json to stdout")
    args = parser.parse_args(argv)
    window = parse_since(args.since, now or datetime.now(UTC))
    config = load_config(args.stack)
    if args.prometheus is not None and not re.match(r"https?://[^/\s]+", args.prometheus):
        raise ToolError(Exit.USAGE, f"--prometheus {args.prometheus!r} is not a URL such as http://127.0.0.1:9090")
    workload = args.workload or ROOT / "workloads" / f"{args.stack}.yaml"
    out = args.out or ROOT / "build" / "cost-audit" / args.stack
    check_out_dir(out)  # before any source is asked: a bad --out costs nothing

    audit = Audit(
        args.stack,
        args.since,
        window.start.isoformat(timespec="minutes"),
        window.end.isoformat(timespec="minutes"),
        window_basis=window.basis(),
        capacity=capacity_label(config),
    )
    if clients is None:
        clients = _make_clients(config.region)
    ce, quotas = clients

    def run_ce() -> str:
        cost_explorer(audit, config, ce, window)
        start, end = window.ce_period()
        return f"{len(audit.spend_by_component)} component(s), {start} to {end} (End exclusive)"

    def run_prometheus() -> str:
        if args.prometheus is None:
            raise ValueError("no --prometheus URL (or PROMETHEUS_URL) given")
        prometheus(audit, args.prometheus, window.promql_range, window.end.timestamp())
        return f"{redact(args.prometheus)}, {len(prometheus_queries('1h'))} queries"

    def run_quota() -> str:
        gpu_quota(audit, config, quotas)
        return str(audit.quota["quota"])

    def run_sizing() -> str:
        if not workload.is_file():
            raise ValueError(f"{workload} not found (give --workload)")
        audit.predicted = predicted(args.stack, config, workload)
        return f"{audit.predicted['workload']}"

    progress("start", f"stack {args.stack}, {audit.start} to {audit.end}; {audit.window_basis}")
    _guarded(audit, "cost explorer", run_ce)
    _guarded(audit, "prometheus", run_prometheus)
    _guarded(audit, "service quotas", run_quota)
    _guarded(audit, "make size", run_sizing)
    derive(audit, config, window.hours)
    audit.recommendations = recommendations(audit, config, window.hours)

    report = write_report(audit, out)
    progress("done", f"wrote {out / 'report.md'}, report.json, spend.png")
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render_markdown(audit), end="")
    return Exit.OK if all(s.ok for s in audit.sources) else Exit.UNVERIFIED


def _make_clients(region: str) -> tuple[Any, Any]:
    """Cost Explorer (its endpoint is us-east-1) and Service Quotas, with preflight's short timeouts."""
    check_endpoint_env(os.environ)
    try:
        session = boto3.session.Session()
        cfg = client_config()
        return session.client("ce", region_name="us-east-1", config=cfg), session.client(
            "service-quotas", region_name=region, config=cfg
        )
    except _client_errors() as error:  # a garbled AWS config file, an unknown profile
        raise ToolError(Exit.USAGE, f"cannot create AWS clients: {describe_error(error)}") from None
