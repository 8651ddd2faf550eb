"""What every config section shares: the strict base model, the project's name, message helpers and
the CIDR check the network, cluster, deploy and serving sections apply to their blocks."""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
)
from pydantic.alias_generators import to_camel

PROJECT = "llm-pd-eks"
# An AWS region name (`us-west-2`, `us-gov-west-1`) and an availability zone's letter after it.
REGION_NAME = re.compile(r"[a-z]{2}(-gov)?-[a-z]+-\d")
_AZ_SUFFIX = re.compile(r"^[a-z]$")


# How much of a user's value a message repeats (a 100 KB value must not come back whole).
ECHO_LIMIT = 100


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` on one line, at most `limit` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def shown(value: Any, limit: int = ECHO_LIMIT) -> str:
    """`value` as a message repeats it: repr'd, on one line, at most `limit` characters."""
    return clip(repr(value), limit)


def exact_chart_version(value: str, example: str) -> str:
    """A chart version pinned exactly (`1.2.3`, or `v1.2.3` where the chart is tagged so): no ranges."""
    if not re.fullmatch(r"v?\d+\.\d+\.\d+", value):
        raise ValueError(f"{shown(value)} is not an exact chart version such as {example!r}")
    return value


def in_region(az: str, region: str) -> bool:
    """Whether `az` is an availability zone of `region` (the region's name and one letter)."""
    return az.startswith(region) and bool(_AZ_SUFFIX.match(az[len(region) :]))


def stack_cluster_name(stack: str) -> str:
    """The EKS cluster's name for a stack: the one formula `__main__` and the checks share."""
    return f"{PROJECT}-{stack}"


def _special_purpose(net: ipaddress.IPv4Network) -> Optional[str]:
    """Why a block can be neither a VPC nor a subnet nor an API allow-list entry, if it cannot."""
    for label, flag in (
        ("loopback", net.is_loopback),
        ("multicast", net.is_multicast),
        ("link-local", net.is_link_local),
        ("reserved (240.0.0.0/4)", net.is_reserved),
    ):
        if flag:
            return label
    if net.prefixlen and net.subnet_of(ipaddress.IPv4Network("0.0.0.0/8")):
        return "'this network' (0.0.0.0/8)"
    return None


def ipv4_network(value: str) -> ipaddress.IPv4Network:
    """`value` as an IPv4 block AWS routes (a VPC, a subnet, an allow-list entry), or ValueError saying why not."""
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{shown(value)} is not a valid CIDR block ({shown(str(exc))})") from None
    if not isinstance(net, ipaddress.IPv4Network):
        raise ValueError(f"{shown(value)} is not an IPv4 CIDR block")
    special = _special_purpose(net)
    if special:
        raise ValueError(
            f"{value} is a {special} block, which AWS does not route; use a private block such as 10.0.0.0/16"
        )
    return net


class Strict(BaseModel):
    """Base for every config section: camelCase keys, unknown keys refused, immutable.

    Strict: `maxSize: true` or `maxSize: "3"` is refused rather than coerced to 1 or 3, and only the
    camelCase spelling is accepted (`max_size` is an unknown key), so one key has one spelling.
    """

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=False, frozen=True, strict=True
    )
