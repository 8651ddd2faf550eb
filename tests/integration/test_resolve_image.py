"""resolve-image against a loopback fake of ECR Public's token and manifest endpoints."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, QuietHTTPServer

from llm_pd_eks import versions
from llm_pd_eks_tools.core.cli import Exit, run
from llm_pd_eks_tools.ops.resolve_image import ACCEPT, MANIFEST_CAP, main, pinned_text

PATH = versions.DLC_REGISTRY.removeprefix("public.ecr.aws/")
INDEX = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"digest": "sha256:" + "1" * 64, "platform": {"os": "linux", "architecture": "amd64"}}],
    },
    indent=3,
).encode()
DIGEST = "sha256:" + hashlib.sha256(INDEX).hexdigest()


class FakeRegistry(BaseHTTPRequestHandler):
    """The anonymous pull flow: a token for the repository's pull scope, then the manifest for that token."""

    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        s = self.server
        s.seen.append((self.path, dict(self.headers)))
        if self.path == f"/token/?scope=repository:{PATH}:pull":
            return self.reply(200, json.dumps({"token": "tok-123"}).encode(), {})
        if self.path == f"/v2/{PATH}/manifests/{s.tag}" and self.headers.get("Authorization") == "Bearer tok-123":
            return self.reply(200, s.body, s.headers)
        if self.path.startswith(f"/v2/{PATH}/manifests/"):
            return self.reply(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', {})
        self.reply(401, b"", {})

    def reply(self, code: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def registry():
    server = QuietHTTPServer(("127.0.0.1", 0), FakeRegistry)
    server.seen, server.tag, server.body = [], versions.DLC_TAG, INDEX
    server.headers = {"Docker-Content-Digest": DIGEST, "Content-Type": "application/vnd.oci.image.index.v1+json"}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()
    assert not server.errors


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.prod.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def resolve(checkout: Path, url: str, *extra: str) -> int:
    return run("resolve-image", main, ["--stack", "prod", "--root", str(checkout), "--registry-url", url, *extra])


def test_the_tag_is_pinned_by_its_digest_and_nothing_else_changes(registry, checkout, capsys):
    before = (checkout / "Pulumi.prod.yaml").read_bytes()
    assert resolve(checkout, registry.url) == Exit.OK
    after = (checkout / "Pulumi.prod.yaml").read_bytes()
    old = f"image: {versions.DLC_IMAGE_TAG}\n".encode()
    assert after == before.replace(old, f"image: {versions.DLC_IMAGE_TAG}@{DIGEST}\n".encode())
    assert after != before
    assert f"-> {versions.DLC_IMAGE_TAG}@{DIGEST}" in capsys.readouterr().out
    (token, manifest) = registry.seen
    assert "Authorization" not in token[1]  # the token itself is asked for anonymously
    assert manifest[1]["Accept"] == ACCEPT and manifest[1]["Authorization"] == "Bearer tok-123"
    assert ACCEPT.startswith(
        "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list"
    )
    assert not list(checkout.glob(".Pulumi.prod.yaml.*"))  # the temporary file was renamed, not left behind
    # again: the same digest, the file untouched
    assert resolve(checkout, registry.url) == Exit.OK
    assert (checkout / "Pulumi.prod.yaml").read_bytes() == after
    assert "already" in capsys.readouterr().out


def test_the_resolved_stack_passes_the_prod_digest_gate(registry, checkout):
    from llm_pd_eks_tools.core.stack import stack_config
    from llm_pd_eks_tools.gates.placeholders import find_placeholders

    assert any(p.key.endswith("serving.image") for p in find_placeholders(stack_config("prod", checkout)))
    assert resolve(checkout, registry.url) == Exit.OK
    assert not any(p.key.endswith("serving.image") for p in find_placeholders(stack_config("prod", checkout)))


def test_a_digest_header_that_is_not_the_bodys_is_refused(registry, checkout, capsys):
    registry.headers["Docker-Content-Digest"] = "sha256:" + "0" * 64
    before = (checkout / "Pulumi.prod.yaml").read_bytes()
    assert resolve(checkout, registry.url) == Exit.FAILED
    assert "is not the sha256 of the manifest sent" in capsys.readouterr().err
    assert (checkout / "Pulumi.prod.yaml").read_bytes() == before


def test_without_a_digest_header_the_bodys_sha256_is_the_digest(registry, checkout):
    del registry.headers["Docker-Content-Digest"]
    assert resolve(checkout, registry.url) == Exit.OK
    assert f"@{DIGEST}\n" in (checkout / "Pulumi.prod.yaml").read_text()


def test_an_unknown_tag_fails_in_one_line(registry, checkout, capsys):
    registry.tag = "other"
    assert resolve(checkout, registry.url) == Exit.FAILED
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"no tag {versions.DLC_TAG!r}" in err


def test_a_reply_over_the_cap_is_refused(registry, checkout, capsys):
    registry.body = b" " * (MANIFEST_CAP + 1)
    registry.headers.pop("Docker-Content-Digest")
    assert resolve(checkout, registry.url) == Exit.UNVERIFIED
    assert f"larger than {MANIFEST_CAP} bytes" in capsys.readouterr().err


def test_an_unreachable_registry_is_one_line_and_unverified(checkout, capsys):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    before = (checkout / "Pulumi.prod.yaml").read_bytes()
    assert resolve(checkout, f"http://127.0.0.1:{port}", "--timeout", "5") == Exit.UNVERIFIED
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"resolve-image: could not resolve {versions.DLC_IMAGE_TAG} at http://127.0.0.1:{port}")
    assert err.endswith("Pulumi.prod.yaml is unchanged")
    assert (checkout / "Pulumi.prod.yaml").read_bytes() == before


def test_a_registry_that_never_answers_is_bounded_by_the_deadline(checkout, capsys):
    with socket.socket() as listener:  # accepts connections (the backlog) but never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        assert resolve(checkout, url, "--timeout", "0.5") == Exit.UNVERIFIED
    assert "could not resolve" in capsys.readouterr().err


def test_the_registry_url_comes_from_the_environment(registry, checkout, monkeypatch):
    monkeypatch.setenv("LLM_PD_EKS_ECR_PUBLIC_URL", registry.url)
    assert run("resolve-image", main, ["--stack", "prod", "--root", str(checkout)]) == Exit.OK
    assert registry.seen


@pytest.mark.parametrize(
    "image, words",
    [
        ("210987654321.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.0", "not an ECR Public image"),
        (f"{versions.DLC_REGISTRY}@{DIGEST}", "has no tag to resolve"),
    ],
)
def test_an_image_it_cannot_resolve_anonymously_is_a_usage_error(checkout, capsys, image, words):
    path = checkout / "Pulumi.prod.yaml"
    path.write_text(path.read_text().replace(versions.DLC_IMAGE_TAG, image))
    assert resolve(checkout, "http://127.0.0.1:9") == Exit.USAGE
    assert words in capsys.readouterr().err


def test_pinned_text_keeps_quotes_comments_and_line_endings():
    text = "config:\r\n  llm-pd-eks:serving:\r\n    image: 'a:b'  # the DLC\r\n    maxModelLen: 1\r\n"
    assert pinned_text(text, "a:b", "a:b@d", "x") == text.replace("'a:b'", "'a:b@d'")
    with pytest.raises(Exception, match="expected one"):
        pinned_text(text + "    image: a:b\n", "a:b", "a:b@d", "x")
