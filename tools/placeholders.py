"""Values a stack file ships as examples, not as anything a real `pulumi up` can use.

Every offline check passes on them, so nothing else flags them: documentation address ranges
(RFC 5737 IPv4 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24; RFC 3849 IPv6 2001:db8::/32), the
example account id `123456789012` AWS's own documentation uses, and a private-only API endpoint with
no stated runner (the Kubernetes half of `pulumi up` goes through that endpoint, so a hosted runner
outside the VPC cannot apply it).

Pure functions over the validated `StackConfig`; the preview prints them as a WARNING (and a callout
in summary.md), and the deploy workflow refuses `up` on a stack that has any:

    python -m tools.placeholders --stack prod [--runner LABEL] [--github-output FILE]

Exit: 0 none, 1 some (each printed on stderr), 2 the stack cannot be read.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from dataclasses import dataclass
from typing import Iterator, Optional

from components.config import PROJECT, StackConfig
from tools.cli import ArgumentParser, Exit, ToolError, exit_with, one_line

DOCUMENTATION_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)
EXAMPLE_ACCOUNT = "123456789012"
DEFAULT_RUNNER = "ubuntu-24.04"  # the GitHub-hosted runner the deploy workflow uses when none is stated
_ACCOUNT_IN = re.compile(r"(?<!\d)(\d{12})(?!\d)")


@dataclass(frozen=True)
class Placeholder:
    key: str  # the config key, `project:section.field`
    value: str
    why: str

    def __str__(self) -> str:
        return f"{self.key} = {one_line(self.value, 120)}: {self.why}"


def documentation_range(cidr: str) -> Optional[str]:
    """The RFC documentation range `cidr` overlaps, or None."""
    net = ipaddress.ip_network(cidr, strict=False)
    for doc in DOCUMENTATION_NETWORKS:
        if net.version == doc.version and net.overlaps(doc):
            return str(doc)
    return None


def _cidrs(config: StackConfig) -> Iterator[tuple[str, str]]:
    yield "network.vpcCidr", config.network.vpc_cidr
    for cidr in config.network.private_cidrs():
        yield "network.privateSubnetCidrs", cidr
    for cidr in config.network.public_cidrs():
        yield "network.publicSubnetCidrs", cidr
    for cidr in config.cluster.public_access_cidrs:
        yield "cluster.publicAccessCidrs", cidr


def _accounts(config: StackConfig) -> Iterator[tuple[str, str]]:
    if config.serving is not None:
        yield "serving.image", config.serving.image
    for arn in config.cluster.admin_principal_arns:
        yield "cluster.adminPrincipalArns", arn


def find_placeholders(config: StackConfig, runner: Optional[str] = None) -> list[Placeholder]:
    """Every example value in `config`; `runner` is a runner label stated outside the stack (workflow input)."""
    found = []
    for key, cidr in _cidrs(config):
        doc = documentation_range(cidr)
        if doc:
            rfc = "RFC 3849" if ":" in doc else "RFC 5737"
            found.append(Placeholder(f"{PROJECT}:{key}", cidr, f"inside the documentation range {doc} ({rfc}); "
                                                               "no real client or network has these addresses"))
    for key, value in _accounts(config):
        if EXAMPLE_ACCOUNT in _ACCOUNT_IN.findall(value):
            found.append(Placeholder(f"{PROJECT}:{key}", value, f"uses the example AWS account {EXAMPLE_ACCOUNT}"))
    if not config.cluster.public_access_cidrs and not (runner or config.deploy.runner_label):
        found.append(Placeholder(
            f"{PROJECT}:deploy.runnerLabel", "(not set)",
            "the API endpoint is private-only (cluster.publicAccessCidrs is empty) and no runner inside the VPC "
            "is stated; a hosted runner cannot reach the endpoint to apply the Kubernetes resources"))
    return found


def runner_label(config: StackConfig, runner: Optional[str] = None) -> str:
    """The runner `pulumi up` should run on: the workflow's input, the stack's, or the hosted default."""
    return runner or config.deploy.runner_label or DEFAULT_RUNNER


def warning_lines(config: StackConfig) -> list[str]:
    """The preview's WARNING block (empty when the stack has no placeholders)."""
    found = find_placeholders(config)
    if not found:
        return []
    return [f"WARNING: {len(found)} placeholder value(s): fine for an offline preview, refused by the deploy "
            "workflow"] + [f"  - {p}" for p in found]


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="python -m tools.placeholders", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--runner", default="", help="runner label given to the deploy workflow, if any")
    parser.add_argument("--github-output", help="append `runner=<label>` to this file (GITHUB_OUTPUT)")
    args = parser.parse_args(argv)
    from components.config import ConfigError
    from tools.preview.mockrun import stack_config

    try:
        config = stack_config(args.stack)
    except (FileNotFoundError, ConfigError) as error:
        raise ToolError(Exit.USAGE, f"cannot read stack {args.stack!r}: {one_line(str(error))}") from None
    found = find_placeholders(config, args.runner or None)
    label = runner_label(config, args.runner or None)
    if args.github_output:
        with open(args.github_output, "a") as out:
            out.write(f"runner={label}\n")
    for p in found:
        print(f"placeholder: {p}", file=sys.stderr)
    if found:
        print(f"stack {args.stack}: {len(found)} placeholder value(s); replace them before `pulumi up`",
              file=sys.stderr)
        return Exit.FAILED
    print(f"stack {args.stack}: no placeholder values; pulumi up runs on {label}")
    return Exit.OK


if __name__ == "__main__":
    exit_with("placeholders", main)
