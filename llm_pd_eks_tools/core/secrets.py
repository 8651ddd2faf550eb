"""Every secret a tool comes to know, removed BY VALUE from every line it prints or writes.

Redacting by shape (`token: X`, `user:pass@host`, `Bearer X`: `io_safety.redact`) misses a secret
that appears in an unexpected form: a credential plugin's stderr echoing `GITHUB_TOKEN=...`, a URL
password that itself holds `@`, a `credential_process`'s JSON, plain config values in a failing
`pulumi config --json`. So each place that learns a secret registers its value here, and the runner's
streams (`process_safety.guard_streams`), its one-line errors (`cli.say`) and `atomic_write` pass all
text through `scrub`. A child process's output is never echoed whole: `child_failure` says how it
ended and its first line, scrubbed.

Values shorter than `MIN_LENGTH` are not registered: they cannot be told from ordinary words, and
removing them from every file written would damage it.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Iterable, Mapping, Optional

REDACTED = "[redacted]"
MIN_LENGTH = 6

# Environment variables whose values are credentials by their names' convention (AWS, GitHub, Pulumi,
# Hugging Face and generic *_TOKEN / *_SECRET / *_PASSWORD names).
_SECRET_NAME = re.compile(r"(?i)(SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE_KEY|API_KEY|ACCESS_KEY)")

_known: set[str] = set()
_pattern: Optional[re.Pattern[str]] = None


def register(value: object) -> None:
    """Remember `value` (a string, or the strings inside a dict or list) as a secret."""
    global _pattern
    added = False
    for text in _strings(value):
        for candidate in {text, text.strip()}:
            if len(candidate) >= MIN_LENGTH and candidate not in _known:
                _known.add(candidate)
                added = True
    if added:
        ordered = sorted(_known, key=len, reverse=True)  # the longest first: no half-removed secret
        _pattern = re.compile("|".join(re.escape(text) for text in ordered))


def register_url(url: Optional[str]) -> None:
    """Register the password (and the whole user-info) of `url`; a password may itself hold `@`."""
    if not url or "@" not in url:
        return
    authority = urllib.parse.urlsplit(str(url)).netloc
    userinfo, _, _host = authority.rpartition("@")
    if not userinfo:
        return
    register(userinfo)
    register(urllib.parse.unquote(userinfo))
    _user, sep, password = userinfo.partition(":")
    if sep:
        register(password)
        register(urllib.parse.unquote(password))


_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://\S+")


def register_urls_in(texts: Iterable[str]) -> None:
    """Register the user-info of every URL inside `texts` (a tool's arguments, `--opt=URL` included)."""
    for text in texts:
        for match in _URL.finditer(str(text)):
            register_url(match.group(0))


def register_environment(environ: Optional[Mapping[str, str]] = None) -> None:
    """Register the values of the environment's credential variables (by the names' convention)."""
    for name, value in (os.environ if environ is None else environ).items():
        if _SECRET_NAME.search(name):
            register(value)
        elif "://" in value:  # a proxy or endpoint URL with a password (HTTPS_PROXY, AWS_ENDPOINT_URL)
            register_urls_in([value])


def scrub(text: str) -> str:
    """`text` with every registered secret replaced by `[redacted]`."""
    if _pattern is None or not text:
        return text
    return _pattern.sub(REDACTED, text)


# -- secrets by their shape, for what no registration caught ------------------------------------------
# `scheme://user:pass@host`: up to the LAST `@` of the authority, so a password holding `@` goes whole.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s]*@")
_SECRET_FIELD = re.compile(
    r"(?i)((?:\"|')?\b(?:token|id-token|refresh-token|access-token|password|passwd|secret|secret_access_key|"
    r"secretaccesskey|sessiontoken|session_token|aws_secret_access_key|aws_session_token|client-key-data|"
    r"client-certificate-data|auth-provider|apikey|api_key)\b(?:\"|')?\s*[:=]\s*)(?:\"[^\"]*\"|'[^']*'|[^\s,;}]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_ENV_ASSIGNMENT = re.compile(
    r"\b([A-Z][A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|API_KEY|ACCESS_KEY)[A-Z0-9_]*=)\S+"
)


def redact(text: str) -> str:
    """`text` with every registered secret removed, then what still looks like one: `scheme://user:pass@host`
    -> `scheme://[redacted]@host`, `token: X` / `"SecretAccessKey": "X"` / `NAME_TOKEN=X` -> the name and
    `[redacted]`, `Bearer X` -> `Bearer [redacted]`."""
    text = scrub(str(text))
    text = _USERINFO.sub(lambda m: f"{m[1]}{REDACTED}@", text)
    text = _SECRET_FIELD.sub(lambda m: f"{m[1]}{REDACTED}", text)
    text = _ENV_ASSIGNMENT.sub(lambda m: f"{m[1]}{REDACTED}", text)
    return _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", text)


def known() -> int:
    """How many secret values are registered (for the tests)."""
    return len(_known)


def forget_all() -> None:
    """Drop every registered secret (a test's isolation; a tool never calls it)."""
    global _pattern
    _known.clear()
    _pattern = None


def child_failure(what: str, returncode: Optional[int], *outputs: Optional[str]) -> str:
    """How a child process ended, for a one-line message: its exit code and the first non-empty line
    of its output (stderr first), scrubbed; never the whole output."""
    first = ""
    for output in outputs:
        lines = [line.strip() for line in (output or "").splitlines() if line.strip()]
        if lines:
            first = lines[0]
            break
    from_shape = redact(first)
    ended = "was ended by a signal" if returncode is not None and returncode < 0 else f"exited {returncode}"
    cut = from_shape if len(from_shape) <= 200 else from_shape[:199] + "…"
    return f"{what} {ended}" + (f": {cut}" if cut else " with no output")


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple, set)):
        for item in value:
            yield from _strings(item)
