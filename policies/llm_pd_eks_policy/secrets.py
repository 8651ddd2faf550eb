"""No literal secrets in Kubernetes objects.

A literal env value ends up in the Kubernetes object, in `kubectl get -o yaml` and in Pulumi
state diffs; secrets belong in a Kubernetes Secret referenced through `valueFrom.secretKeyRef`.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from pulumi_policy import (
    ReportViolation,
    ResourceValidationArgs,
)

from .command_lines import CommandLine
from .common import (
    K8S_CONFIG_MAP,
    K8S_SECRET,
    config_with_defaults,
    dig,
    is_unknown,
    known_list,
    name_of,
    plain,
    resource_policy,
)
from .ray_serving import ServeConfigError, ray_objects, serve_config, walk
from .workloads import container_command, unreadable_settings

# -- literal secrets ---------------------------------------------------------------------------
SECRET_CONFIG: dict[str, dict[str, Any]] = {
    "secretNamePattern": {
        "type": "string",
        "description": "regex (case-insensitive) for env names whose literal values count as secrets",
        "default": r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?)($|_)",
    },
    "secretValuePatterns": {
        "type": "array",
        "items": {"type": "string"},
        "description": "regexes for values that are secrets whatever the env name (token formats)",
        "default": [
            r"\bhf_[A-Za-z0-9]{30,}",  # Hugging Face token
            r"\b(AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key id
            r"\bgh[pousr]_[A-Za-z0-9]{30,}",  # GitHub token
            r"\bsk-[A-Za-z0-9_-]{20,}",  # OpenAI-style API key
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
        ],
    },
    "allowedEnvNames": {
        "type": "array",
        "items": {"type": "string"},
        "description": "env names never treated as secrets",
        "default": [],
    },
}

_CONTAINER_KEYS = ("containers", "initContainers", "ephemeralContainers")
# Keys (any case, camelCase too) that end in a password's own name, not in a reference to one
# (`passwordKey`, `existingSecret` name where a secret is, and are left alone). Tokens and keys in
# free-form values are judged by their shape (`secretValuePatterns`): a chart's `token: placeholder`
# is no secret.
_SECRET_KEY = re.compile(r"(password|passwd)$", re.IGNORECASE)


def containers(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every container spec anywhere in a Kubernetes object (pods, templates, Ray groups)."""
    if isinstance(node, dict):
        for key, value in node.items():
            label = f"{path}.{key}" if path else key
            if key in _CONTAINER_KEYS and isinstance(value, list):
                for i, c in enumerate(value):
                    if isinstance(c, dict):
                        yield f"{label}[{c.get('name', i)}]", c
            else:
                yield from containers(value, label)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from containers(value, f"{path}[{i}]")


_FLAG = re.compile(r"^--?([A-Za-z0-9_.-]+)(?:=(.*))?$", re.DOTALL)


_VARIABLE_REFERENCE = re.compile(r"\$\([A-Za-z_][A-Za-z0-9_.-]*\)|\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Z_][A-Z0-9_]*")

# (where, name, value): a literal the rule judges by its name and its shape.
Candidate = tuple[str, str, Any]


def _base64_text(value: Any) -> Any:
    """ConfigMap `binaryData` values are base64 (Kubernetes API: `map[string][]byte`): the decoded
    text, or the value itself when it is not base64 (it is judged as it stands)."""
    if not isinstance(value, str) or is_unknown(value):
        return value
    try:
        return base64.b64decode(value, validate=True).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return value


@functools.lru_cache(maxsize=16)
def any_of(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex matching where any of `patterns` does: one scan of a long value instead of one a pattern."""
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else re.compile(r"(?!x)x")


def _literal(value: Any) -> bool:
    """A value written into the object, not one filled in later.

    Only a whole-value variable reference is not a literal: `$(VAR)` (Kubernetes expands it in env,
    command and args), `${VAR}` or an upper-case `$VAR` (a shell's). "$hf_..." (a token with a dollar
    in front) or "$(X)hf_..." are literals."""
    return (
        isinstance(value, str)
        and bool(value.strip())
        and not is_unknown(value)
        and not _VARIABLE_REFERENCE.fullmatch(value.strip())
    )


@dataclass(frozen=True)
class _SecretRules:
    """What the policy config calls a secret: a name that says so, a value shaped like a token, and
    the names never judged. Built once a resource, so every reader judges by the same config."""

    names: re.Pattern[str]
    shapes: re.Pattern[str]
    allowed: frozenset[str]

    @classmethod
    def of(cls, cfg: dict[str, Any]) -> _SecretRules:
        names = re.compile(cfg["secretNamePattern"], re.IGNORECASE)
        return cls(names, any_of(tuple(cfg["secretValuePatterns"])), frozenset(cfg["allowedEnvNames"]))

    def secret_named(self, name: str) -> bool:
        return bool(self.names.search(name.replace("-", "_")))

    def token_shaped(self, value: Any) -> bool:
        return _literal(value) and bool(self.shapes.search(value))

    def secret_like(self, name: str, value: Any) -> bool:
        """A literal under a secret's name, or shaped like a token, unless the name is allowed."""
        if name in self.allowed or not _literal(value):
            return False
        return self.secret_named(name) or bool(self.shapes.search(value))

    def judged(self, candidates: Iterable[Candidate]) -> Iterator[str]:
        """Where each secret-like candidate sits."""
        return (where for where, name, value in candidates if self.secret_like(name, value))


def _env_secrets(where: str, container: Any, rules: _SecretRules) -> Iterator[str]:
    """Each `env` entry whose literal `value` is secret-like, by its name. Judged here, not as a
    candidate: the verdict names the entry, and one without a `name` (which Kubernetes requires) is
    a shape the rule cannot judge."""
    for item in known_list(dig(container, "env")) or []:
        if isinstance(item, dict) and rules.secret_like(str(item.get("name", "")), item.get("value")):
            yield f"{where}.env {item['name']}"


def _command_line_values(where: str, line: CommandLine) -> Iterator[Candidate]:
    """Variables a command line sets: `export HF_TOKEN=...` in a script, `env HF_TOKEN=... cmd`."""
    for name, value in line.assignments:
        yield f"{where} command line sets {name}", name, value


def _unreadable_lines(where: str, line: CommandLine, rules: _SecretRules) -> Iterator[str]:
    """Command lines that may set a secret-named variable in a way the reader cannot follow: the
    rule cannot clear them, so they count."""
    for text in unreadable_settings(line, rules.names):
        yield f"{where} command line the pack cannot read sets a secret-named variable ({text[:30]!r})"


def _flag_values(where: str, container: Any, rules: _SecretRules) -> Iterator[Candidate]:
    """Flag values in `args`/`command`: `--hf-token=...` under the flag's name, and `--api-key X`,
    whose next word counts only after a flag that names a secret (`--model X` passes)."""
    for part in ("args", "command"):
        items = known_list(dig(container, part)) or []
        for i, arg in enumerate(items):
            flag = _FLAG.match(arg.strip()) if isinstance(arg, str) else None
            if flag and flag.group(2) is not None:
                yield f"{where}.{part}[{i}] {flag.group(1)}", flag.group(1), flag.group(2)
            elif flag and i + 1 < len(items) and rules.secret_named(flag.group(1)):
                yield f"{where}.{part}[{i + 1}] (after {flag.group(1)})", flag.group(1), items[i + 1]


def _config_map_values(props: Any) -> Iterator[Candidate]:
    """A ConfigMap's `data` as written, and its `binaryData` decoded."""
    data, binary = dig(props, "data"), dig(props, "binaryData")
    for key, value in data.items() if isinstance(data, dict) else ():
        yield f"data {key}", str(key), value
    for key, value in binary.items() if isinstance(binary, dict) else ():
        yield f"binaryData {key}", str(key), _base64_text(value)


def _serve_config_values(resource_type: str, props: Any) -> Iterator[Candidate]:
    """Every key of a RayService's serve config (`engine_kwargs`, `runtime_env.env_vars`); one that
    cannot be parsed is reported by nixl-libfabric-backend, not here."""
    for ray in ray_objects(resource_type, props):
        if ray.kind != "RayService":
            continue
        try:
            config = serve_config(dig(ray.obj, "spec"))
        except ServeConfigError:
            config = None
        for path, node in walk(config) if isinstance(config, (dict, list)) else ():
            for key, value in node.items() if isinstance(node, dict) else ():
                yield f"{ray.label} serveConfigV2 {path}.{key}", str(key), value


def _anywhere(props: Any, rules: _SecretRules) -> Iterator[str]:
    """Token shapes in any string whatever its key (Helm values included), and a literal under any
    key that names a password (KubeRay's `gcsFaultToleranceOptions.redisPassword.value` too)."""
    for path, node in walk(props):
        if rules.token_shaped(node):
            yield f"{path} (token-shaped value)"
        for key, value in node.items() if isinstance(node, dict) else ():
            given = value.get("value") if isinstance(value, dict) else value
            if _SECRET_KEY.search(str(key)) and str(key) not in rules.allowed and _literal(given):
                yield f"{path}.{key}" if path else str(key)


def _secret_places(resource_type: str, props: Any, rules: _SecretRules) -> Iterator[str]:
    """Where each literal secret sits, in the order the verdict lists them: container by container
    (env, command line, flags), a ConfigMap's data, serve configs, then anywhere."""
    for where, container in containers(props):
        yield from _env_secrets(where, container, rules)
        line = container_command(container)
        yield from rules.judged(_command_line_values(where, line))
        yield from _unreadable_lines(where, line, rules)
        yield from rules.judged(_flag_values(where, container, rules))
    if resource_type == K8S_CONFIG_MAP:
        yield from rules.judged(_config_map_values(props))
    yield from rules.judged(_serve_config_values(resource_type, props))
    yield from _anywhere(props, rules)


def _literal_secrets(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Literal secrets anywhere a Kubernetes object carries them. The verdict names where, never the value."""
    if not args.resource_type.startswith("kubernetes:") or args.resource_type == K8S_SECRET:
        return  # a Secret is where secrets belong (the engine hands the pack its plaintext)
    rules = _SecretRules.of(config_with_defaults(args, SECRET_CONFIG))
    found = dict.fromkeys(_secret_places(args.resource_type, plain(args.props), rules))
    if found:
        report(
            f"{name_of(args)} carries literal secret-looking values: "
            f"{', '.join(found)}. Fix: put them in a Kubernetes Secret (from `pulumi config set --secret`) "
            f"and reference it with env valueFrom.secretKeyRef (or envFrom.secretRef)."
        )


no_literal_secrets = resource_policy(
    name="no-literal-secrets-in-pods",
    description="Kubernetes objects carry no literal secret-looking values (env, args, ConfigMaps, serve "
    "configs, Helm values); secrets come from Secrets.",
    validate=_literal_secrets,
    config=SECRET_CONFIG,
)

POLICIES = [no_literal_secrets]
