"""Secrets are removed by value, whatever shape they come in (llm_pd_eks_tools/core/secrets.py)."""

from __future__ import annotations

import pytest

from llm_pd_eks_tools.core import secrets


@pytest.fixture(autouse=True)
def isolated():
    secrets.forget_all()
    yield
    secrets.forget_all()


def test_a_registered_value_is_removed_wherever_it_appears():
    secrets.register("hunter2-value")
    assert secrets.scrub("a=hunter2-value; again: xhunter2-valuex") == "a=[redacted]; again: x[redacted]x"


def test_the_values_of_a_mapping_are_registered():
    secrets.register({"token": "tok-abcdef-123", "nested": ["pass-word-99"]})
    assert secrets.scrub("tok-abcdef-123 pass-word-99") == "[redacted] [redacted]"


def test_a_value_too_short_to_tell_from_a_word_is_not_registered():
    secrets.register("dev")
    assert secrets.known() == 0 and secrets.scrub("dev stack") == "dev stack"


def test_a_url_password_holding_at_signs_goes_whole():
    url = "http://user:p@ss@w0rd@prometheus.example:9090/api"
    secrets.register_url(url)
    text = secrets.redact(f"cannot reach {url}; the password was p@ss@w0rd")
    assert "p@ss" not in text and "w0rd" not in text
    assert "prometheus.example:9090" in text


def test_urls_inside_arguments_are_registered():
    secrets.register_urls_in(["--prometheus=https://admin:Sup3rSecret@host/x"])
    assert secrets.scrub("Sup3rSecret") == "[redacted]"


def test_credential_variables_of_the_environment_are_registered_by_name():
    secrets.register_environment(
        {"GITHUB_TOKEN": "ghp_0123456789", "STACK": "production", "HTTPS_PROXY": "http://u:proxypass1@p:3128"}
    )
    text = secrets.scrub("ghp_0123456789 production proxypass1")
    assert text == "[redacted] production [redacted]"


def test_a_child_failure_is_its_code_and_first_line_scrubbed():
    secrets.register("exec-token-777")
    line = secrets.child_failure("credential plugin 'aws'", 1, "error: exec-token-777 expired\nGITHUB_TOKEN=ghp_zzz\n")
    assert line == "credential plugin 'aws' exited 1: error: [redacted] expired"
    assert secrets.child_failure("it", -15, "") == "it was ended by a signal with no output"


@pytest.mark.parametrize(
    "text, hidden",
    [
        ('{"SecretAccessKey": "abc/def+ghi", "SessionToken": "zzz"}', ["abc/def+ghi", "zzz"]),
        ("GITHUB_TOKEN=ghp_abcdef AWS_SESSION_TOKEN=FwoGZX", ["ghp_abcdef", "FwoGZX"]),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9", ["eyJhbGciOiJIUzI1NiJ9"]),
    ],
)
def test_what_looks_like_a_secret_is_redacted_by_shape(text, hidden):
    out = secrets.redact(text)
    assert all(value not in out for value in hidden), out
