"""Compare two stacks' config before promoting a commit from one to the other.

The deploy workflow moves one commit dev -> staging -> prod. What staging proved only carries over
to prod if prod runs the same software: chart versions, image, model, engine settings. Sizes,
counts, networks, region and secrets legitimately differ per environment.

Every config key is flattened to a dotted path (`llm-pd-eks:serving.prefill.tensorParallelSize`)
and classified by `PER_ENVIRONMENT`, a list of glob patterns. Whatever no pattern matches must be
promoted unchanged, so a key added later is checked by default (the safe side).

    python -m llm_pd_eks_tools.gates.promote_check --from staging --to prod     # exit 1 on an unpromoted difference

Meant for staging -> prod: dev serves a smaller model on smaller GPUs by design, so dev -> staging
differs in must-promote keys and is not a promotion gate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Optional

from llm_pd_eks.config import AWS_SECRET_ONLY_KEYS, PROJECT, SECRET_ONLY_KEYS, StackConfig
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, exit_with, one_line
from llm_pd_eks_tools.core.stack import load_stack_config
from llm_pd_eks_tools.core.stackfile import SECRET_PLACEHOLDER, is_secure

# Keys whose value is a secret however the stack file states it: a plain-text one is shown as
# `(plain-text secret)`, never by value (the config model refuses it as well).
SECRET_VALUE_KEYS = frozenset({f"{PROJECT}:{k}" for k in SECRET_ONLY_KEYS} | set(AWS_SECRET_ONLY_KEYS))

# Keys expected to differ between environments (fnmatch globs on `namespace:dotted.path`; `*`
# also matches dots). Everything else must be equal in both stacks.
PER_ENVIRONMENT: tuple[str, ...] = (
    "aws:*",  # region (and any provider setting): where the stack lives
    "*:network.*",  # VPC CIDR, subnet CIDRs, availability zones, NAT gateways
    "*:cluster.publicAccessCidrs",  # who may reach the API endpoint
    "*:cluster.adminPrincipalArns",  # the account's own IAM principals
    "*:cluster.previewPrincipalArns",  # the account's own preview role
    "*.instanceType",  # node sizes
    "*.availabilityZone",  # the GPU nodes' AZ follows the region
    "*.minSize",
    "*.desiredSize",
    "*.maxSize",
    "*.diskSizeGib",
    "*[rR]eplicas",  # Serve autoscaling bounds, replica counts
    "*TimeoutMinutes",  # operational patience, not behaviour
    "*:protect",  # prod is protected against `pulumi destroy`
    "*:gpuNodes.capacity*",  # a capacity reservation / Capacity Block belongs to one account and AZ
    "*:serving.weightsS3Uri",  # the weights bucket lives in each stack's own account and region
    "*:serving.weightsKmsKeyArn",  # and so does its key
    "*.rootVolume*",  # gp3 IOPS/throughput, sized per environment like the disks
    "*:deploy.*",  # the runner that reaches each stack's API endpoint
)


# An ECR registry host: <account>.dkr.ecr.<region>.amazonaws.com[.cn] (the ECR User Guide's registry URL).
_ECR_HOST = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?P<cn>\.cn)?/")


def image_without_region(value: Any) -> Any:
    """`<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>` -> `<account>.dkr.ecr.*/<repository>:<tag>`.

    ECR is regional, so each region pulls the image from its own registry; but the account stays:
    an image from another account's registry is another image (whoever owns that account decides
    what the tag holds). Anything that is not an ECR URI is compared as it is.
    """
    if not isinstance(value, str):
        return value
    match = _ECR_HOST.match(value)
    if not match:
        return value
    return f"{match['account']}.dkr.ecr.*{match['cn'] or ''}/{value[match.end() :]}"


# Values compared in a normal form: an ECR image lives in each region's own registry, so the
# account, repository and tag (or `@digest`) have to match, not the region.
NORMALIZE: tuple[tuple[str, Callable[[Any], Any]], ...] = (("*.image", image_without_region),)

PER_ENVIRONMENT_KIND = "per-environment"
MUST_PROMOTE_KIND = "must-promote"
SECRET_KIND = "secret"


class _Missing:
    """The key is not set in that stack (the program's default applies)."""

    def __repr__(self) -> str:
        return "(not set)"


MISSING: Any = _Missing()


class _Secret:
    """A `{secure: ...}` value: ciphertext differs per stack by construction."""

    def __repr__(self) -> str:
        return "(secret)"


_SECRET: Any = _Secret()


class _PlainSecret:
    """A secret-only key set in plain text: compared, but its value is never printed."""

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _PlainSecret) and other.value == self.value

    def __hash__(self) -> int:
        return hash(repr(self.value))

    def __repr__(self) -> str:
        return "(plain-text secret: store it with `pulumi config set --secret`)"


def project_keys() -> frozenset[str]:
    """The top-level project keys the config model knows (camelCase aliases), and the secret-only ones."""
    names = {field.alias or name for name, field in StackConfig.model_fields.items() if name != "region"}
    return frozenset(f"{PROJECT}:{n}" for n in names | set(SECRET_ONLY_KEYS))


def unknown_key(key: str) -> bool:
    """A project key no config field has (a typo): promote-check cannot call it per-environment."""
    top = re.split(r"[.\[]", key, maxsplit=1)[0]
    return top.startswith(f"{PROJECT}:") and top not in project_keys()


@dataclass(frozen=True)
class Difference:
    key: str
    source: Any
    target: Any
    kind: str  # PER_ENVIRONMENT_KIND | MUST_PROMOTE_KIND | SECRET_KIND

    @property
    def one_sided(self) -> bool:
        return self.source is MISSING or self.target is MISSING


@dataclass(frozen=True)
class Report:
    source: str
    target: str
    differences: tuple[Difference, ...]
    secrets: tuple[str, ...]  # keys that are secret in both stacks: never compared

    @property
    def unpromoted(self) -> list[Difference]:
        return [d for d in self.differences if d.kind == MUST_PROMOTE_KIND]

    @property
    def ok(self) -> bool:
        return not self.unpromoted

    def render(self) -> str:
        lines = [f"promote-check {self.source} -> {self.target}"]
        sections = (
            (MUST_PROMOTE_KIND, "must be promoted unchanged, but differ"),
            (PER_ENVIRONMENT_KIND, "per-environment (expected to differ)"),
            (SECRET_KIND, "secret on one side only"),
        )
        for kind, title in sections:
            found = [d for d in self.differences if d.kind == kind]
            if not found:
                continue
            lines.append(f"  {title}:")
            for d in found:
                note = "  [only in one stack]" if d.one_sided else ""
                if not d.one_sided and (d.source is _SECRET or d.target is _SECRET):
                    note = "  [secret on one side: cannot be compared; set it the same way in both]"
                lines.append(f"    {d.key}: {self.source}={_show(d.source)}  {self.target}={_show(d.target)}{note}")
        if self.secrets:
            lines.append(f"  secrets (per-environment, not compared): {', '.join(self.secrets)}")
        if self.ok:
            expected = len(self.differences)
            lines.append(f"OK: {self.target} runs what {self.source} ran ({expected} expected difference(s))")
        else:
            unknown = [d.key for d in self.unpromoted if unknown_key(d.key)]
            known = [d.key for d in self.unpromoted if not unknown_key(d.key)]
            parts = []
            if known:
                parts.append(
                    f"{', '.join(known)}. Make both stacks set the same value (or move the key to "
                    "PER_ENVIRONMENT in llm_pd_eks_tools/gates/promote_check.py if it truly is per-environment)"
                )
            if unknown:
                parts.append(
                    f"{', '.join(unknown)}: not a config key of this project (a typo?); remove or "
                    "correct it (`make preview` names the valid keys)"
                )
            lines.append(f"FAIL: {len(self.unpromoted)} unpromoted difference(s): " + "; ".join(parts) + ".")
        return "\n".join(lines)


def _show(value: Any) -> str:
    if value is MISSING or value is _SECRET or isinstance(value, _PlainSecret):
        return repr(value)
    return one_line(json.dumps(value) if not isinstance(value, str) else value, 100)  # a value can be huge


def classify(key: str, per_environment: Iterable[str] = PER_ENVIRONMENT) -> str:
    """PER_ENVIRONMENT_KIND if any glob matches `key`, else MUST_PROMOTE_KIND."""
    return PER_ENVIRONMENT_KIND if any(fnmatchcase(key, p) for p in per_environment) else MUST_PROMOTE_KIND


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    """Objects become dotted paths; lists of objects become `key[i].field`; other lists are leaves
    (an AZ list is one value). A `{secure: ...}` object is a secret leaf."""
    if is_secure(value):
        yield prefix, _SECRET
    elif isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _flatten(f"{prefix}.{k}", v)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            yield from _flatten(f"{prefix}[{i}]", v)
    else:
        yield prefix, value


def flatten(config: dict[str, str], secret_keys: Iterable[str]) -> dict[str, Any]:
    """Engine config (`ns:key` -> string, objects as JSON text) -> `ns:dotted.path` -> value."""
    secret = set(secret_keys)
    flat: dict[str, Any] = {}
    for key, raw in config.items():
        if key in secret or raw == SECRET_PLACEHOLDER:
            flat[key] = _SECRET
            continue
        if key in SECRET_VALUE_KEYS:
            flat[key] = _PlainSecret(raw)
            continue
        value: Any = raw
        if raw[:1] in ("{", "["):
            try:
                value = json.loads(raw)
            except ValueError:
                pass
        flat.update(_flatten(key, value))
    return flat


def _normalize(key: str, value: Any) -> Any:
    for pattern, normal_form in NORMALIZE:
        if fnmatchcase(key, pattern):
            return normal_form(value)
    return value


def compare_configs(
    source: str,
    source_flat: dict[str, Any],
    target: str,
    target_flat: dict[str, Any],
    per_environment: Iterable[str] = PER_ENVIRONMENT,
) -> Report:
    patterns = tuple(per_environment)
    differences: list[Difference] = []
    secrets: list[str] = []
    for key in sorted(source_flat.keys() | target_flat.keys()):
        a, b = source_flat.get(key, MISSING), target_flat.get(key, MISSING)
        if a is _SECRET and b is _SECRET:
            secrets.append(key)
            continue
        if a is _SECRET and b is MISSING:
            # the source ran with this secret (e.g. the hfToken of a gated model); the target would not
            differences.append(Difference(key, a, b, MUST_PROMOTE_KIND))
            continue
        if a is _SECRET or b is _SECRET:
            # Secret on one side and plain text on the other cannot be compared; for a key that must
            # be promoted that is a failure, not a pass. A secret only one stack sets
            # (a token) is per-environment.
            one_sided = a is MISSING or b is MISSING
            kind = SECRET_KIND if one_sided else classify(key, patterns)
            differences.append(Difference(key, a, b, SECRET_KIND if kind == PER_ENVIRONMENT_KIND else kind))
            continue
        if a == b:
            continue
        if a is not MISSING and b is not MISSING and _normalize(key, a) == _normalize(key, b):
            # e.g. the same image tag in each region's own registry
            differences.append(Difference(key, a, b, PER_ENVIRONMENT_KIND))
            continue
        differences.append(Difference(key, a, b, classify(key, patterns)))
    return Report(source, target, tuple(differences), tuple(secrets))


def compare_stacks(source: str, target: str, root: Path = ROOT) -> Report:
    """Read `Pulumi.<source>.yaml` and `Pulumi.<target>.yaml` under `root` and compare them."""
    src_config, src_secrets = load_stack_config(source, root)
    dst_config, dst_secrets = load_stack_config(target, root)
    return compare_configs(source, flatten(src_config, src_secrets), target, flatten(dst_config, dst_secrets))


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.gates.promote_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", required=True, help="the stack the commit was proven on")
    parser.add_argument("--to", dest="target", required=True, help="the stack it is promoted to")
    parser.add_argument("--root", type=Path, default=ROOT, help="directory holding Pulumi.<stack>.yaml")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        raise ToolError(Exit.USAGE, f"--root {one_line(str(args.root), 100)} is not a directory")
    # A malformed stack file raises StackFileError (one line, Exit.USAGE) via llm_pd_eks_tools.core.stackfile.
    report = compare_stacks(args.source, args.target, args.root)
    print(report.render())
    return Exit.OK if report.ok else Exit.FAILED


if __name__ == "__main__":
    exit_with("promote-check", main)
