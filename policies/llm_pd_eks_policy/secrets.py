"""No literal secrets in Kubernetes objects.

A literal env value ends up in the Kubernetes object, in `kubectl get -o yaml` and in Pulumi
state diffs; secrets belong in a Kubernetes Secret referenced through `valueFrom.secretKeyRef`.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from typing import Any, Iterator

from pulumi_policy import (
    ReportViolation,
    ResourceValidationArgs,
)

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


def _literal_secrets(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """Literal secrets anywhere a Kubernetes object carries them: env (by name or value), container
    args/command (`--hf-token=...`, `--api-key X`, token shapes), ConfigMap data, and every key of a
    Ray serve config (`engine_kwargs`, `runtime_env.env_vars`), plus token shapes in any string
    (Helm values included). The verdict names where, never the value."""
    if not args.resource_type.startswith("kubernetes:") or args.resource_type == K8S_SECRET:
        return  # a Secret is where secrets belong (the engine hands the pack its plaintext)
    cfg = config_with_defaults(args, SECRET_CONFIG)
    name_re = re.compile(cfg["secretNamePattern"], re.IGNORECASE)
    value_re = any_of(tuple(cfg["secretValuePatterns"]))
    allowed = set(cfg["allowedEnvNames"])

    def literal(value: Any) -> bool:
        # Only a whole-value variable reference is not a literal: `$(VAR)` (Kubernetes expands it in
        # env, command and args), `${VAR}` or an upper-case `$VAR` (a shell's). "$hf_..." (a token
        # with a dollar in front) or "$(X)hf_..." are literals.
        return (
            isinstance(value, str)
            and bool(value.strip())
            and not is_unknown(value)
            and not _VARIABLE_REFERENCE.fullmatch(value.strip())
        )

    def secret_like(name: str, value: Any) -> bool:
        if name in allowed or not literal(value):
            return False
        return bool(name_re.search(name.replace("-", "_"))) or bool(value_re.search(value))

    props = plain(args.props)
    found: dict[str, None] = {}
    for where, container in containers(props):
        for item in known_list(dig(container, "env")) or []:
            if isinstance(item, dict) and secret_like(str(item.get("name", "")), item.get("value")):
                found[f"{where}.env {item['name']}"] = None
        line = container_command(container)  # `export HF_TOKEN=...` in a script, `env HF_TOKEN=... cmd`
        for name, value in line.assignments:
            if isinstance(value, str) and secret_like(name, value):
                found[f"{where} command line sets {name}"] = None
        for text in unreadable_settings(line, name_re):
            found[f"{where} command line the pack cannot read sets a secret-named variable ({text[:30]!r})"] = None
        for part in ("args", "command"):
            items = known_list(dig(container, part)) or []
            for i, arg in enumerate(items):
                if not isinstance(arg, str):
                    continue
                flag = _FLAG.match(arg.strip())
                if flag and flag.group(2) is not None and secret_like(flag.group(1), flag.group(2)):
                    found[f"{where}.{part}[{i}] {flag.group(1)}"] = None
                elif (
                    flag
                    and flag.group(2) is None
                    and i + 1 < len(items)
                    and secret_like(flag.group(1), items[i + 1])
                    and bool(name_re.search(flag.group(1).replace("-", "_")))
                ):
                    found[f"{where}.{part}[{i + 1}] (after {flag.group(1)})"] = None
    if args.resource_type == K8S_CONFIG_MAP:
        for key, value in (dig(props, "data") or {}).items() if isinstance(dig(props, "data"), dict) else ():
            if secret_like(str(key), value):
                found[f"data {key}"] = None
        binary = dig(props, "binaryData")
        for key, value in binary.items() if isinstance(binary, dict) else ():
            if secret_like(str(key), _base64_text(value)):
                found[f"binaryData {key}"] = None
    for ray in ray_objects(args.resource_type, props):
        if ray.kind != "RayService":
            continue
        try:
            config = serve_config(dig(ray.obj, "spec"))
        except ServeConfigError:
            config = None  # nixl-libfabric-backend reports unparsable serve configs
        for path, node in walk(config) if isinstance(config, (dict, list)) else ():
            if isinstance(node, dict):
                for key, value in node.items():
                    if secret_like(str(key), value):
                        found[f"{ray.label} serveConfigV2 {path}.{key}"] = None
    for path, node in walk(props):  # token shapes anywhere, whatever the key
        if literal(node) and value_re.search(node):
            found[f"{path} (token-shaped value)"] = None
        # a key that names a password, anywhere (Helm values, KubeRay's
        # gcsFaultToleranceOptions.redisPassword.value): its literal value is one
        for key, value in node.items() if isinstance(node, dict) else ():
            given = value.get("value") if isinstance(value, dict) else value
            if _SECRET_KEY.search(str(key)) and str(key) not in allowed and literal(given):
                found[f"{path}.{key}" if path else str(key)] = None
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
