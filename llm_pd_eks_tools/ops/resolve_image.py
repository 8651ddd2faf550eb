"""Pin a stack's serving image by digest: read the tag's digest from ECR Public, write `repo:tag@sha256:...`.

    python -m llm_pd_eks_tools.ops.resolve_image --stack prod [--root .] [--registry-url URL] [--timeout 30]

A tag is a name the registry can point at other bytes later; a digest names the bytes. The stack file's
`serving.image` (an ECR Public reference with a tag, e.g. llm_pd_eks/versions.py's DLC image) is looked
up anonymously, as the registry's Docker Registry HTTP API v2 token flow works for public repositories:

1. `GET <registry>/token/?scope=repository:<alias>/<repository>:pull` -> `{"token": ...}`;
2. `GET <registry>/v2/<alias>/<repository>/manifests/<tag>` with `Authorization: Bearer <token>` and an
   `Accept` naming the OCI image index and the Docker manifest list first (a multi-platform image's
   digest is its index's) and the single-image manifests after them. The digest is the sha256 of the
   body as sent, which must equal the reply's `Docker-Content-Digest` header when it has one
   (OCI distribution-spec, "Pulling manifests").

Then the `image:` line of `Pulumi.<stack>.yaml` is rewritten to `<repo>:<tag>@sha256:<hex>` through a
temporary file renamed over the original; every other byte of the file stays as it was.

The registry is https://public.ecr.aws unless --registry-url or LLM_PD_EKS_ECR_PUBLIC_URL names another
(a loopback fake in the tests). Every request shares one deadline (--timeout, total) and a reply larger
than its cap is refused. Exit: 0 pinned (or already pinned to that digest), 1 the registry has no such
tag or its reply contradicts itself, 2 bad input (stack, image, arguments), 5 the registry could not be
reached or read (offline): one line, the stack file unchanged (docs/exit-codes.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

from llm_pd_eks import versions
from llm_pd_eks.config import PROJECT
from llm_pd_eks.image_ref import ImageRef, parse_image
from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, checkout_root, exit_with, one_line, seconds
from llm_pd_eks_tools.core.stackfile import StackFileError, read, stack_file

PROG = "resolve-image"
DEFAULT_REGISTRY = "https://public.ecr.aws"
REGISTRY_ENV = "LLM_PD_EKS_ECR_PUBLIC_URL"
TOKEN_CAP = 64 * 1024  # a bearer token reply is a few KiB
MANIFEST_CAP = 4 * 1024 * 1024  # the distribution spec's suggested manifest limit ("Pushing manifests": 4 MiB)
# Most specific first: an index (multi-platform) names the image as a whole; a single manifest only
# where the tag points at one.
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


class Deadline:
    """One time budget for every request of a run: each socket wait gets what is left of it."""

    def __init__(self, seconds_: float):
        self.end = time.monotonic() + seconds_

    def left(self) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the deadline passed")
        return remaining


def _get(url: str, headers: dict[str, str], cap: int, deadline: Deadline) -> tuple[bytes, dict[str, str]]:
    """The body (at most `cap` bytes) and headers of a GET; HTTP errors raised as urllib's."""
    request = urllib.request.Request(url, headers=headers, method="GET")
    with urllib.request.urlopen(request, timeout=deadline.left()) as reply:
        body = bytearray()
        while len(body) <= cap:
            chunk = reply.read(min(64 * 1024, cap + 1 - len(body)))
            if not chunk:
                break
            body += chunk
            deadline.left()
        if len(body) > cap:
            raise ToolError(Exit.UNVERIFIED, f"{url}: the reply is larger than {cap} bytes; refused")
        return bytes(body), {k.lower(): v for k, v in reply.headers.items()}


def resolve_digest(ref: ImageRef, registry: str, deadline: Deadline) -> str:
    """`sha256:<hex>` of the manifest (list) `ref`'s tag points at on the ECR Public registry `registry`."""
    scope = urllib.parse.quote(f"repository:{ref.path}:pull", safe=":/")
    body, _ = _get(f"{registry}/token/?scope={scope}", {"Accept": "application/json"}, TOKEN_CAP, deadline)
    try:
        token = json.loads(body)["token"]
        if not isinstance(token, str) or not token:
            raise ValueError("empty token")
    except (ValueError, KeyError, TypeError) as error:
        raise ToolError(
            Exit.UNVERIFIED, f"{registry}: the token reply is not {{'token': ...}} ({one_line(str(error), 80)})"
        ) from None
    url = f"{registry}/v2/{ref.path}/manifests/{urllib.parse.quote(str(ref.tag), safe='')}"
    try:
        manifest, headers = _get(url, {"Accept": ACCEPT, "Authorization": f"Bearer {token}"}, MANIFEST_CAP, deadline)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            raise ToolError(Exit.FAILED, f"{ref.repository}: the registry has no tag {ref.tag!r} (HTTP 404)") from None
        raise
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    sent = headers.get("docker-content-digest")
    if sent is not None and sent.strip() != digest:
        raise ToolError(
            Exit.FAILED,
            f"{url}: Docker-Content-Digest {one_line(sent, 80)} is not the sha256 of the manifest sent ({digest})",
        )
    return digest


_IMAGE_LINE = r"^(?P<lead>[ \t]+image:[ \t]*)(?P<quote>['\"]?){value}(?P=quote)(?P<tail>[ \t]*(#[^\n]*)?)$"


def pinned_text(text: str, image: str, pinned: str, name: str) -> str:
    """`text` with the one `image: <image>` line's value replaced by `pinned`, nothing else touched."""
    pattern = re.compile(_IMAGE_LINE.format(value=re.escape(image)), re.MULTILINE)
    matches = list(pattern.finditer(text))
    if len(matches) != 1:
        raise ToolError(
            Exit.USAGE,
            f"{name}: expected one `image: {one_line(image, 120)}` line, found {len(matches)}; set serving.image "
            "as a plain `image:` value under llm-pd-eks:serving",
        )
    m = matches[0]
    return text[: m.start()] + f"{m['lead']}{m['quote']}{pinned}{m['quote']}{m['tail']}" + text[m.end() :]


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path` (mode kept)."""
    mode = path.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def stack_image(stack: str, root: Path) -> tuple[Path, str, ImageRef]:
    """The stack file, its `serving.image` value, and that value's parts (refused unless ECR Public with a tag)."""
    try:
        path = stack_file(stack, root)
        serving = read(stack, root).get(f"{PROJECT}:serving")
    except (StackFileError, FileNotFoundError) as error:
        raise ToolError(Exit.USAGE, f"cannot read stack {stack!r}: {one_line(str(error))}") from None
    image = serving.get("image") if isinstance(serving, dict) else None
    if not isinstance(image, str):
        raise ToolError(Exit.USAGE, f"{path.name}: no serving.image to resolve")
    ref = parse_image(image)
    if ref is None or not ref.public:
        raise ToolError(
            Exit.USAGE,
            f"{path.name}: serving.image {one_line(image, 120)} is not an ECR Public image; only those resolve "
            "without credentials (for a private ECR image: aws ecr describe-images --image-ids imageTag=<tag>)",
        )
    if not ref.tag:
        raise ToolError(Exit.USAGE, f"{path.name}: serving.image {image} has no tag to resolve")
    return path, image, ref


def registry_url(flag: Optional[str]) -> str:
    url = (flag or os.environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY).rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ToolError(Exit.USAGE, f"registry URL {one_line(url, 120)!r} is not an http(s) base URL")
    return url


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.ops.resolve_image", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--registry-url", help=f"registry base URL (default {DEFAULT_REGISTRY}, or ${REGISTRY_ENV})")
    parser.add_argument("--timeout", type=seconds, default=30.0, help="seconds for all requests together")
    args = parser.parse_args(argv)
    root = checkout_root(args.root)
    registry = registry_url(args.registry_url)
    path, image, ref = stack_image(args.stack, root)
    try:
        digest = resolve_digest(ref, registry, Deadline(args.timeout))
    except urllib.error.HTTPError as error:
        raise ToolError(
            Exit.UNVERIFIED,
            f"could not resolve {ref.repository}:{ref.tag} at {registry}: HTTP {error.code}; {path.name} is unchanged",
        ) from None
    except (urllib.error.URLError, OSError, TimeoutError, ValueError) as error:
        why = getattr(error, "reason", None) or error
        raise ToolError(
            Exit.UNVERIFIED,
            f"could not resolve {ref.repository}:{ref.tag} at {registry} ({one_line(str(why), 120)}); "
            f"{path.name} is unchanged",
        ) from None
    pinned = ref.with_digest(digest)
    if pinned == image:
        print(f"{path.name}: serving.image is already {pinned}")
    else:
        write_atomically(path, pinned_text(path.read_bytes().decode("utf-8"), image, pinned, path.name))
        print(f"{path.name}: serving.image {image} -> {pinned}")
    if (ref.repository, ref.tag) == (versions.DLC_REGISTRY, versions.DLC_TAG) and versions.DLC_DIGEST != digest:
        print(
            f"llm_pd_eks/versions.py: set DLC_DIGEST = {digest!r} so every copy agrees "
            "(tests/stack/test_versions_agree.py)",
            file=sys.stderr,
        )
    return Exit.OK


if __name__ == "__main__":
    exit_with(PROG, main)
