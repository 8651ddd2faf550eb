"""The stack config as the Pulumi engine hands it over: `project:key` -> JSON text, `aws:` keys, secret
keys, the stack name. `load_stack_config` reads the running stack's; `validate_engine_config` is the one
entry point for the program and the tools."""

from __future__ import annotations

import difflib
import json
from typing import Any, Iterable, Mapping, Optional

from pydantic import (
    ValidationError,
)
from pydantic.alias_generators import to_camel

from .base import PROJECT, clip, shown, stack_cluster_name
from .cluster import EKS_CLUSTER_NAME
from .errors import ConfigError, _describe
from .stack import (
    ALERT_WEBHOOK_KEY,
    HF_TOKEN_KEY,
    SECRET_ONLY_KEYS,
    StackConfig,
    gated_model_problems,
    placement_problems,
)

# Config namespaces the program reads: the AWS provider's and its own. Anything else in a stack
# file is a typo (`aws-native:`, `llm-pd-eks2:`) or belongs to another program.
KNOWN_NAMESPACES = ("aws", PROJECT)
# AWS provider keys that are credentials: accepted only as Pulumi secrets (`--secret`).
AWS_SECRET_ONLY_KEYS = ("aws:secretKey", "aws:token")


def _parse_value(raw: Any) -> Any:
    """Config values arrive as strings; objects, lists, numbers and booleans as JSON text."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def validate_stack_config(
    project_values: dict[str, Any], region: Optional[str], secret_keys: Iterable[str] = ()
) -> StackConfig:
    """Validate raw project-namespace values (keys without the `project:` prefix).

    `secret_keys` are the full keys the engine marks secret (`project:key`); a secret-only key set
    in plain text is refused, so it never reaches state or a manifest unencrypted.
    """
    data = {k: _parse_value(v) for k, v in project_values.items()}
    has_hf_token = HF_TOKEN_KEY in data
    has_webhook_url = ALERT_WEBHOOK_KEY in data
    problems: list[str] = []
    secret = set(secret_keys)
    for key in SECRET_ONLY_KEYS:
        if key in data:
            data.pop(key)
            if f"{PROJECT}:{key}" not in secret:
                problems.append(
                    f"{PROJECT}:{key}: set in plain text; store it encrypted with "
                    f"`pulumi config set --secret {key} <value>`"
                )
    if "region" in data:  # would be silently replaced by aws:region below
        data.pop("region")
        problems.append(
            f"{PROJECT}:region: unknown key; the region is the AWS provider's (pulumi config set aws:region us-west-2)"
        )
    if not region:
        problems.append("aws:region: not set (pulumi config set aws:region us-west-2)")
    data["region"] = region or "us-east-1"  # stand-in so the rest still validates
    config: Optional[StackConfig] = None
    try:
        config = StackConfig.model_validate(data)
    except ValidationError as exc:
        problems.extend(line for e in exc.errors() for line in _describe(e).split("\n"))
    problems.extend(placement_problems({**data, "region": region}))
    if config is not None:
        problems.extend(gated_model_problems(config, has_hf_token))
        if config.observability.alerting.receiver == "webhook" and not has_webhook_url:
            problems.append(
                f"{PROJECT}:{ALERT_WEBHOOK_KEY}: not set, but observability.alerting.receiver is "
                f"webhook; set it with `pulumi config set --secret {ALERT_WEBHOOK_KEY} https://...`"
            )
    if problems or config is None:
        raise ConfigError(problems)
    return config


def validate_engine_config(
    config: Mapping[str, Any], secret_keys: Iterable[str] = (), stack: Optional[str] = None
) -> StackConfig:
    """Validate config in the engine's form: `project:key` -> value (objects as JSON text), `aws:region`.

    The one entry point for the program (from the runtime) and the tools (from a stack file).
    Beyond the project's keys it refuses what the engine would pass on silently: keys of other
    namespaces, AWS credentials in plain text, and (given `stack`) a stack name that makes an
    invalid EKS cluster name. Every problem is reported at once.
    """
    problems = engine_problems(config, secret_keys, stack)
    prefix = f"{PROJECT}:"
    values = {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}
    region = config.get("aws:region")
    try:
        validated = validate_stack_config(values, str(region) if region else None, secret_keys)
    except ConfigError as error:
        raise ConfigError(problems + error.problems) from None
    if problems:
        raise ConfigError(problems)
    return validated


def aws_provider_keys() -> frozenset[str]:
    """The `aws:` config keys the AWS provider reads, from pulumi_aws's own config module.

    `pulumi_aws.config.vars` has one property per provider setting (`access_key` reads
    `aws:accessKey`); their camelCase names are the keys. A key outside them (`aws:regoin`) would be
    ignored by the provider without a word.
    """
    from pulumi_aws.config import vars as aws_vars

    return frozenset(
        to_camel(name) for name, member in vars(aws_vars._ExportableConfig).items() if isinstance(member, property)
    )


def engine_problems(
    config: Mapping[str, Any], secret_keys: Iterable[str] = (), stack: Optional[str] = None
) -> list[str]:
    """What is wrong outside the project's own keys (namespaces, AWS credentials, the stack name)."""
    problems = []
    secret = set(secret_keys)
    for key in config:
        namespace = str(key).split(":", 1)[0]
        if namespace not in KNOWN_NAMESPACES:
            hint = difflib.get_close_matches(namespace[:64], KNOWN_NAMESPACES, n=1)
            problems.append(
                f"{clip(str(key), 60)}: unknown namespace {shown(namespace, 40)}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; this program reads only {' and '.join(n + ':' for n in KNOWN_NAMESPACES)} keys"
            )
    aws_keys = [str(k)[len("aws:") :] for k in config if str(k).startswith("aws:") and k != "aws:region"]
    if aws_keys:
        known = aws_provider_keys()
        for key in aws_keys:
            if key not in known:
                hint = difflib.get_close_matches(key[:64], sorted(known), n=1)
                problems.append(
                    f"aws:{clip(key, 60)}: not a setting of the AWS provider"
                    + (f" (did you mean 'aws:{hint[0]}'?)" if hint else "")
                    + "; it would be ignored"
                )
    for key in AWS_SECRET_ONLY_KEYS:
        if key in config and key not in secret:
            problems.append(
                f"{key}: a credential set in plain text; store it encrypted with "
                f"`pulumi config set --secret {key} <value>` (or use an AWS profile)"
            )
    if stack is not None and not EKS_CLUSTER_NAME.match(stack_cluster_name(stack)):
        problems.append(
            f"stack name {shown(stack, 60)} makes the EKS cluster name {shown(stack_cluster_name(stack), 60)}, "
            "which EKS refuses (letters, digits, '-' and '_', at most 100 characters); rename the stack "
            "(`pulumi stack rename`)"
        )
    return problems


def load_stack_config() -> StackConfig:
    """Read and validate the running stack's config (raises ConfigError listing every problem)."""
    from llm_pd_eks.pulumi_sdk import runtime_config

    merged: dict[str, Any] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    secret_keys = set(runtime_config.get_config_secret_keys_env())
    secret_keys.update(k for k in merged if runtime_config.is_config_secret(k))
    import pulumi

    return validate_engine_config(merged, secret_keys, stack=pulumi.get_stack())
