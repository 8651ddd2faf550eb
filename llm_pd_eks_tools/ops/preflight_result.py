"""What every preflight check returns, and how an AWS-side failure becomes a could-not-check line.

Shared by the account checks (`preflight_checks.py`) and the capacity check (`preflight_capacity.py`);
the command line is `preflight.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ReadTimeoutError,
)
from botocore.parsers import ResponseParserError

from llm_pd_eks_tools.core.cli import one_line

Status = Literal["ok", "FAIL", "could-not-check", "warning"]
OK: Status = "ok"
FAIL: Status = "FAIL"
UNKNOWN: Status = "could-not-check"
WARN: Status = "warning"  # deployable, but costs or risks something the report names (exit 0)


@dataclass(frozen=True)
class Result:
    """One preflight item."""

    check: str  # stable identifier, e.g. "gpu-offering"
    status: Status
    detail: str


# --- error handling ---------------------------------------------------------------------------------


def describe_error(exc: Exception) -> str:
    """One line for any botocore failure: no credentials, no endpoint, an API error."""
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return f"no usable AWS credentials ({exc}); configure a profile, env vars or SSO"
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        return f"cannot reach AWS: {exc}"
    if isinstance(exc, ReadTimeoutError):
        return f"the AWS endpoint did not answer in time ({exc})"
    if isinstance(exc, NoRegionError):
        return "no region"
    if isinstance(exc, ResponseParserError):
        return f"the endpoint's answer is not an AWS response ({one_line(str(exc), 120)})"
    if isinstance(exc, (KeyError, IndexError, TypeError)):  # parsed, but without the fields AWS sends
        return f"the endpoint's answer is not an AWS response (no {one_line(str(exc), 80)} in it)"
    if isinstance(exc, ConnectionClosedError):
        url = exc.kwargs.get("endpoint_url")
        return f"cannot reach AWS: the endpoint closed the connection without answering ({url})"
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", "error"))
        message = " ".join(str(err.get("Message", "")).split())
        if code.isdigit() or message.startswith("<"):
            # Not an AWS error document (a proxy's or an emulator's HTML page): the status says it all.
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", code)
            return f"{exc.operation_name}: HTTP {status} from the endpoint (not an AWS error response)"
        return f"{exc.operation_name}: {code}{': ' + message[:160] if message else ''}"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def aws_errors() -> tuple[type[Exception], ...]:
    """What a call to AWS (or whatever answers at the endpoint) can raise: botocore's errors, and an
    answer that is not an AWS response (`ResponseParserError`, or a parsed answer lacking fields)."""
    from botocore.exceptions import ClientError

    return (BotoCoreError, ClientError, ResponseParserError, KeyError, IndexError, TypeError)


def guarded(check: str, fn: Callable[[], Result]) -> Result:
    """Run one check; an AWS-side failure makes it could-not-check, never a traceback."""
    try:
        return fn()
    except aws_errors() as exc:
        return Result(check, UNKNOWN, describe_error(exc))


def error_code(exc: Exception) -> str:
    return getattr(exc, "response", {}).get("Error", {}).get("Code", "")
