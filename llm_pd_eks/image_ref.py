"""An ECR or ECR Public image reference, `repository[:tag][@sha256:<64 hex>]`, taken apart.

The grammar is the OCI distribution reference's (distribution/reference `reference.go`:
`name[:tag][@digest]`, a tag of `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`), narrowed to the two registries
the project pulls from and to sha256 digests (the only algorithm ECR writes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_TAG = r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
_DIGEST = r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
_REPOSITORY = r"(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>
ECR_IMAGE = re.compile(
    r"^(?P<registry>(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z]{2}(-gov)?-[a-z]+-\d)\.amazonaws\.com(\.cn)?)"
    rf"/{_REPOSITORY}{_TAG}{_DIGEST}$"
)
# ECR Public: public.ecr.aws/<registry alias>/<repository>
ECR_PUBLIC_IMAGE = re.compile(
    rf"^(?P<registry>public\.ecr\.aws)/(?P<alias>[a-z0-9][a-z0-9_-]{{1,254}})/{_REPOSITORY}{_TAG}{_DIGEST}$"
)


@dataclass(frozen=True)
class ImageRef:
    registry: str  # the host
    path: str  # the repository path on that host (ECR Public: `<alias>/<repository>`)
    tag: Optional[str]
    digest: Optional[str]  # sha256:<64 hex>

    @property
    def repository(self) -> str:
        """`registry/path`, the reference without tag and digest."""
        return f"{self.registry}/{self.path}"

    @property
    def public(self) -> bool:
        return self.registry == "public.ecr.aws"

    def with_digest(self, digest: str) -> str:
        return f"{self.repository}" + (f":{self.tag}" if self.tag else "") + f"@{digest}"


def parse_image(value: str) -> Optional[ImageRef]:
    """The parts of an ECR / ECR Public reference, or None when `value` is neither."""
    match = ECR_IMAGE.match(value) or ECR_PUBLIC_IMAGE.match(value)
    if not match:
        return None
    path = match["repository"] if "alias" not in match.groupdict() else f"{match['alias']}/{match['repository']}"
    return ImageRef(match["registry"], path, match["tag"], match["digest"])
