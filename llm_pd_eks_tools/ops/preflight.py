"""Can this stack be deployed in this account and region? Ask AWS before `pulumi up` does.

The expensive surprises of this setup (no GPU capacity type in the chosen AZ, a vCPU quota of
zero for P instances, too few Elastic IPs for per-AZ NAT) surface twenty minutes into an
`up`. Each check here is a small function over injected boto3 clients returning one `Result`
(ok / FAIL / could-not-check with the reason); `run_checks` maps the validated `StackConfig`
onto them and `main` is the thin CLI:

    python -m llm_pd_eks_tools.ops.preflight --stack dev [--json] [--strict]

Credentials come from the standard boto3 chain, the region from the stack's `aws:region`, and
botocore itself honours `AWS_ENDPOINT_URL` (an emulator such as moto, or a VPC endpoint).
Time is bounded: botocore connect/read timeouts and a small retry budget per call, and a total
deadline (`--deadline`, 60 s) for the whole run, since an endpoint that drips one byte at a time
never trips a read timeout.
Exit codes (llm_pd_eks_tools/core/cli.py `Exit`): 0 all ok, or only some items could-not-check (a warning);
1 at least one FAIL; 2 the stack, its config or the environment is invalid; 5 nothing could be
verified, or (with `--strict`) anything could not.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional, Sequence
from urllib.parse import urlsplit

import boto3
from botocore.config import Config

from llm_pd_eks.config import ConfigError, StackConfig
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, exit_with, one_line, say
from llm_pd_eks_tools.core.io_safety import redact
from llm_pd_eks_tools.core.process_safety import set_run_deadline, time_left
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.ops.preflight_capacity import check_capacity, own_instances
from llm_pd_eks_tools.ops.preflight_checks import (
    CHECK_NAMES,
    EIP_QUOTA_CODE,
    check_availability_zones,
    check_efa,
    check_eip_quota,
    check_eks_version,
    check_offered,
    check_vcpu_quota,
    efa_interfaces,
    instance_type_info,
    nat_gateway_count,
    quota_value,
    run_checks,
    standard_quota_code,
)
from llm_pd_eks_tools.ops.preflight_result import (
    FAIL,
    OK,
    UNKNOWN,
    WARN,
    Result,
    Status,
    aws_errors,
    describe_error,
)

# The checks' names, re-exported: callers and tests use `llm_pd_eks_tools.ops.preflight` as the one entry.
__all__ = [
    "CHECK_NAMES",
    "EIP_QUOTA_CODE",
    "FAIL",
    "OK",
    "UNKNOWN",
    "WARN",
    "Result",
    "Status",
    "aws_errors",
    "caller_account",
    "check_availability_zones",
    "check_capacity",
    "check_efa",
    "check_eip_quota",
    "check_eks_version",
    "check_endpoint_env",
    "check_offered",
    "check_vcpu_quota",
    "client_config",
    "describe_error",
    "efa_interfaces",
    "exit_code",
    "instance_type_info",
    "load_config",
    "main",
    "make_clients",
    "nat_gateway_count",
    "own_instances",
    "quota_value",
    "render_text",
    "run_checks",
    "run_with_deadline",
    "standard_quota_code",
    "verdict",
]


def load_config(stack: str, root: Optional[Path] = None) -> StackConfig:
    """The stack's validated config, read exactly as the program reads it (secret keys included)."""
    return stack_config(stack, root or ROOT)


def make_clients(region: str):
    """(sts, ec2, service-quotas, eks, ssm, autoscaling) clients: standard credential chain, few retries,
    short timeouts."""
    cfg = client_config()
    session = boto3.session.Session()
    return tuple(
        session.client(name, region_name=region, config=cfg)
        for name in ("sts", "ec2", "service-quotas", "eks", "ssm", "autoscaling")
    )


def caller_account(sts) -> str:
    """The account the credentials belong to; also proves the endpoint and credentials work."""
    return sts.get_caller_identity()["Account"]


# --- CLI ------------------------------------------------------------------------------------


def verdict(results: list[Result]) -> str:
    statuses = {r.status for r in results}
    return "FAIL" if FAIL in statuses else "warning" if UNKNOWN in statuses else "ok"


def render_text(stack: str, region: str, account: Optional[str], results: list[Result]) -> str:
    endpoint = redact(os.environ.get("AWS_ENDPOINT_URL", ""))
    where = f"account {account or 'unknown'}, region {region}" + (f", endpoint {endpoint}" if endpoint else "")
    width = max(len(r.check) for r in results)
    lines = [f"preflight {stack}: {where}"]
    lines += [f"  {r.status:<15}  {r.check:<{width}}  {r.detail}" for r in results]
    failed = sum(r.status == FAIL for r in results)
    unknown = sum(r.status == UNKNOWN for r in results)
    v = verdict(results)
    if v == "FAIL":
        lines.append(f"FAIL: {failed} check(s) failed" + (f", {unknown} could not be checked" if unknown else ""))
    elif v == "warning":
        rest = "the rest passed" if unknown < len(results) else "nothing was verified"
        lines.append(
            f"WARNING: {unknown} of {len(results)} check(s) could not be run ({rest}); "
            f"this stack is NOT confirmed deployable (--strict exits 5 on this)"
        )
    else:
        warned = sum(r.status == WARN for r in results)
        lines.append(f"ok: all {len(results)} checks passed" + (f", {warned} with a warning" if warned else ""))
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None, clients=None) -> int:
    """CLI entry. `clients` = (sts, ec2, service-quotas[, eks[, ssm[, autoscaling]]]) to inject; built from
    boto3 otherwise."""
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.ops.preflight", description=__doc__.split("\n")[0])
    parser.add_argument("--stack", default="dev", help="stack name (reads Pulumi.<stack>.yaml)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (and nothing else on stdout)")
    parser.add_argument("--strict", action="store_true", help="exit 5 when any item could not be checked")
    parser.add_argument(
        "--deadline",
        type=float,
        default=DEADLINE_SECONDS,
        help=f"seconds the whole run may take (default {DEADLINE_SECONDS:g})",
    )
    args = parser.parse_args(argv)
    if not 0 < args.deadline <= 3600:
        raise ToolError(Exit.USAGE, f"--deadline {args.deadline:g}: give a number of seconds between 1 and 3600")
    set_run_deadline(args.deadline)  # the whole run: the Pulumi CLI for imported environments too
    try:
        return _report(args, clients)
    finally:
        set_run_deadline(None)  # this run's alone: a process that runs the tool again starts afresh


def _report(args: Any, clients: Optional[Sequence[Any]]) -> int:
    """The checks within the run's deadline, printed; the exit code."""
    try:
        config = load_config(args.stack)
    except ConfigError as exc:
        raise ToolError(Exit.USAGE, f"Pulumi.{args.stack}.yaml: {'; '.join(exc.problems)}") from None

    if clients is None:
        check_endpoint_env(os.environ)
        try:
            clients = make_clients(config.region)
        except _client_errors() as exc:
            raise ToolError(Exit.USAGE, f"cannot create AWS clients: {describe_error(exc)}") from None
    sts, ec2, quotas, *more = clients

    eks, ssm, autoscaling = (*more, None, None, None)[:3]
    account, results, reason = run_with_deadline(
        lambda: (
            caller_account(sts),
            run_checks(config, ec2, quotas, eks=eks, stack=args.stack, ssm=ssm, autoscaling=autoscaling),
        ),
        args.deadline,
        wait=time_left(args.deadline),
    )
    results = [dataclasses.replace(r, detail=redact(r.detail)) for r in results]  # an endpoint's user:password@
    if reason is not None:
        # Credentials or endpoint unusable, or out of time: say so once and mark every item.
        say("preflight", reason)

    if args.json:
        print(
            json.dumps(
                {
                    "stack": args.stack,
                    "region": config.region,
                    "account": account,
                    "verdict": verdict(results),
                    "checks": [asdict(r) for r in results],
                },
                indent=2,
            )
        )
    else:
        print(render_text(args.stack, config.region, account, results))
    return exit_code(results, args.strict)


# --- bounded time and exit codes ---------------------------------------------------


def _client_errors() -> tuple[type[Exception], ...]:
    """What creating clients can raise: botocore's errors, and ValueError for a bad endpoint or setting."""
    return (ValueError, *aws_errors())


# The whole run's budget: 7 checks of a few calls each answer in seconds against real AWS.
DEADLINE_SECONDS = 60.0


def client_config():
    """botocore Config: short connect/read timeouts and one retry, so a dead endpoint costs seconds.

    `connect_timeout`/`read_timeout` bound each socket wait; `retries` "standard" mode with
    `total_max_attempts` 2 (the first try plus one retry) keeps throttling from turning into a retry
    storm. (botocore's `max_attempts` counts retries only: `max_attempts: 2` means three requests.)
    """
    return Config(connect_timeout=5, read_timeout=10, retries={"mode": "standard", "total_max_attempts": 2})


def check_endpoint_env(environ) -> None:
    """`AWS_ENDPOINT_URL[_<SERVICE>]` must be an http(s) URL (botocore raises a bare ValueError), and
    `AWS_CA_BUNDLE` a file that exists (botocore otherwise fails later with an unrelated TLS error)."""
    for name in sorted(k for k in environ if k.startswith("AWS_ENDPOINT_URL")):
        value = environ[name]
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
            usable = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            usable = False
        if not usable:
            raise ToolError(
                Exit.USAGE,
                f"{name}={one_line(repr(redact(value)), 100)} is not a URL such as "
                "http://127.0.0.1:5000 or https://ec2.us-west-2.amazonaws.com; "
                "fix or unset it",
            )
    bundle = environ.get("AWS_CA_BUNDLE")
    if bundle and not os.path.isfile(bundle):
        raise ToolError(
            Exit.USAGE,
            f"AWS_CA_BUNDLE={one_line(repr(bundle), 100)} is not a file; point it at a "
            "PEM certificate bundle or unset it",
        )


def run_with_deadline(
    work: Callable[[], tuple[str, list[Result]]],
    deadline: float,
    wait: Optional[float] = None,
) -> tuple[Optional[str], list[Result], Optional[str]]:
    """(account, results, reason) of `work` run on a daemon thread for at most `deadline` seconds.

    When AWS fails as a whole (credentials, endpoint) or the deadline passes, every item is
    could-not-check with the reason; the abandoned thread dies with the process.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the main thread below
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="preflight-checks", daemon=True)
    thread.start()
    thread.join(deadline if wait is None else wait)  # `wait`: what is left of `deadline` when the work starts
    if thread.is_alive():
        reason = (
            f"AWS did not answer within the {deadline:g} s deadline"
            + (f" (endpoint {redact(os.environ['AWS_ENDPOINT_URL'])})" if os.environ.get("AWS_ENDPOINT_URL") else "")
            + "; nothing was verified"
        )
        return None, [Result(name, UNKNOWN, reason) for name in CHECK_NAMES], reason
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, aws_errors()):
            reason = describe_error(error)
            return None, [Result(name, UNKNOWN, reason) for name in CHECK_NAMES], reason
        raise error
    account, results = outcome["value"]
    return account, results, None


def exit_code(results: list[Result], strict: bool) -> int:
    """FAILED on any FAIL; UNVERIFIED when nothing was verified, or anything was not under --strict."""
    v = verdict(results)
    if v == "FAIL":
        return Exit.FAILED
    if v == "warning" and (strict or all(r.status == UNKNOWN for r in results)):
        return Exit.UNVERIFIED
    return Exit.OK


if __name__ == "__main__":
    exit_with("preflight", main)
