"""Values a stack file ships as examples, not as anything a real `pulumi up` can use.

Every offline check passes on them, so nothing else flags them: documentation address ranges
(RFC 5737 IPv4 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24; RFC 3849 IPv6 2001:db8::/32), the
example account id `123456789012` AWS's own documentation uses, and a private-only API endpoint with
no stated runner (the Kubernetes half of `pulumi up` goes through that endpoint, so a hosted runner
outside the VPC cannot apply it).

Where a stack imports Pulumi ESC environments, their checked-in definitions (esc/<env>.yaml) are
read the same way: a value that names itself a placeholder ("set me", "changeme", ...) or uses the
example account, and a stack-file key the environment also sets (the stack file's value wins over
an imported environment's, so a placeholder `{secure: ...}` there hides the real secret).

A protected stack (`protect: true`, the flag that marks prod: its VPC and cluster survive a
`pulumi destroy`) must also pin its serving image by digest: a tag is a name the registry can point at
other bytes after staging proved it, a digest names the bytes (`make resolve-image STACK=prod` writes
it). Other stacks get the preview's WARNING for a tag without digest (`digest_warning`).

Pure functions over the validated `StackConfig`; the preview prints them as a WARNING (and a callout
in summary.md), and every workflow job that creates resources refuses a stack that has any:

    python -m llm_pd_eks_tools.gates.placeholders --stack prod [--runner LABEL] [--github-output FILE]
    python -m llm_pd_eks_tools.gates.placeholders --stack prod --preview [--runner LABEL] --github-output FILE

`--preview` judges only the runner for a cloud preview and writes runner=, refresh= and note=: a
hosted runner reaches the API only when cluster.publicAccessCidrs admits every address, otherwise
the preview runs there without refresh and says so.

Exit: 0 none, 1 some (each printed on stderr), 2 the stack cannot be read.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from llm_pd_eks.config import PROJECT, StackConfig
from llm_pd_eks.image_ref import parse_image
from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, appendable_file, exit_with, one_line
from llm_pd_eks_tools.core.io_safety import append_text

DOCUMENTATION_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)
EXAMPLE_ACCOUNT = "123456789012"
DEFAULT_RUNNER = "ubuntu-24.04"  # the GitHub-hosted runner the deploy workflow uses when none is stated
# GitHub-hosted runner labels (GitHub Docs, "GitHub-hosted runners reference": ubuntu-latest,
# ubuntu-24.04, ubuntu-22.04, ubuntu-24.04-arm, windows-*, macos-*): they run outside any VPC.
_HOSTED_RUNNER = re.compile(r"^(ubuntu|windows|macos)-[a-z0-9.-]+$")
# A runner label is one token: no whitespace or control character (a newline in it would add lines
# to $GITHUB_OUTPUT, i.e. forge other step outputs).
_RUNNER_LABEL = re.compile(r"^[^\s\x00-\x1f\x7f,]{1,100}$")
_ACCOUNT_IN = re.compile(r"(?<!\d)(\d{12})(?!\d)")
# Words a value uses to say it is not real yet ("set me: esc env set ...", "changeme", "<token>").
PLACEHOLDER_WORDS = re.compile(
    r"\b(set[ _-]?me|change[ _-]?me|replace[ _-]?me|fill[ _-]?me[ _-]?in|placeholder|todo|fixme)\b", re.IGNORECASE
)
EVERYONE = ("0.0.0.0/0", "::/0")


@dataclass(frozen=True)
class Placeholder:
    key: str  # the config key, `project:section.field`
    value: str
    why: str

    def __str__(self) -> str:
        return f"{self.key} = {one_line(self.value, 120)}: {self.why}"


def documentation_range(cidr: str) -> Optional[str]:
    """The RFC documentation range `cidr` overlaps, or None."""
    net = ipaddress.ip_network(cidr, strict=False)
    for doc in DOCUMENTATION_NETWORKS:
        if net.version == doc.version and net.overlaps(doc):
            return str(doc)
    return None


def _cidrs(config: StackConfig) -> Iterator[tuple[str, str]]:
    yield "network.vpcCidr", config.network.vpc_cidr
    for cidr in config.network.private_cidrs():
        yield "network.privateSubnetCidrs", cidr
    for cidr in config.network.public_cidrs():
        yield "network.publicSubnetCidrs", cidr
    for cidr in config.cluster.public_access_cidrs:
        yield "cluster.publicAccessCidrs", cidr


def _accounts(config: StackConfig) -> Iterator[tuple[str, str]]:
    if config.serving is not None:
        yield "serving.image", config.serving.image
    for arn in config.cluster.admin_principal_arns:
        yield "cluster.adminPrincipalArns", arn
    # getattr: `make preview-diff` runs these tools on an older revision's config model too
    for arn in getattr(config.cluster, "preview_principal_arns", []):
        yield "cluster.previewPrincipalArns", arn


def undecryptable(ciphertext: str) -> Optional[str]:
    """Why a `{secure: ...}` value cannot be a real ciphertext, or None.

    The passphrase secrets provider writes `v1:<base64 nonce>:<base64 ciphertext>` and decrypts only
    that shape (pulumi/pulumi sdk/go/common/resource/config/crypt.go, symmetricCrypter.EncryptValue /
    DecryptValue: three `:`-separated parts, `v1`, standard base64; AES-256-GCM, a 12-byte nonce and at
    least the 16-byte tag). Cloud providers' ciphertexts are opaque base64 and are only checked for
    the example words.
    """
    if PLACEHOLDER_WORDS.search(ciphertext) or re.search(r"replace|example", ciphertext, re.IGNORECASE):
        return "an example ciphertext (it names itself a placeholder); no secrets provider can decrypt it"
    if ciphertext.startswith("v1:"):
        parts = ciphertext.split(":")
        try:
            nonce, sealed = (base64.b64decode(p, validate=True) for p in parts[1:]) if len(parts) == 3 else (b"", b"")
        except binascii.Error:
            nonce, sealed = b"", b""
        if len(nonce) != 12 or len(sealed) < 16:
            return (
                "not a passphrase-provider ciphertext (v1:<base64 12-byte nonce>:<base64 ciphertext>); "
                "it cannot be decrypted"
            )
    return None


def runner_problem(label: str, private_only: bool) -> Optional[str]:
    """Why `label` cannot run `pulumi up` for this stack, or None."""
    if not _RUNNER_LABEL.match(label):
        return "not a single runner label (whitespace, a newline or a control character in it)"
    if private_only and _HOSTED_RUNNER.match(label):
        return (
            "a GitHub-hosted runner, outside the VPC, but the API endpoint is private-only "
            "(cluster.publicAccessCidrs is empty): it cannot apply the Kubernetes resources"
        )
    return None


def example_account(value: str) -> bool:
    """Whether `value` names the example AWS account (as a whole 12-digit number)."""
    return EXAMPLE_ACCOUNT in _ACCOUNT_IN.findall(value)


def find_placeholders(
    config: StackConfig,
    runner: Optional[str] = None,
    secure_values: Optional[dict[str, str]] = None,
    stack: str = "<stack>",
) -> list[Placeholder]:
    """Every example value in `config`; `runner` is a runner label stated outside the stack (workflow input);
    `secure_values` are the stack file's `{secure: ...}` ciphertexts by key
    (llm_pd_eks_tools.core.stackfile.secure_values)."""
    found = []
    for key, ciphertext in sorted((secure_values or {}).items()):
        why = undecryptable(ciphertext)
        if why:
            found.append(Placeholder(key, "secure: " + ciphertext[:40], why))
    private_only = not config.cluster.public_access_cidrs
    for where, label in (("--runner", runner), (f"{PROJECT}:deploy.runnerLabel", config.deploy.runner_label)):
        problem = runner_problem(label, private_only) if label else None
        if problem:
            found.append(Placeholder(where, repr(label), problem))
    for key, cidr in _cidrs(config):
        doc = documentation_range(cidr)
        if doc:
            rfc = "RFC 3849" if ":" in doc else "RFC 5737"
            found.append(
                Placeholder(
                    f"{PROJECT}:{key}",
                    cidr,
                    f"inside the documentation range {doc} ({rfc}); no real client or network has these addresses",
                )
            )
    for key, value in _accounts(config):
        if EXAMPLE_ACCOUNT in _ACCOUNT_IN.findall(value):
            found.append(Placeholder(f"{PROJECT}:{key}", value, f"uses the example AWS account {EXAMPLE_ACCOUNT}"))
    found += alerting_placeholders(config)
    unpinned = undigested_image(config)
    if unpinned and config.protect:
        found.append(
            Placeholder(
                f"{PROJECT}:serving.image",
                unpinned,
                "a tag without a digest on a protected (prod) stack: the registry can move the tag; "
                f"pin it with `make resolve-image STACK={stack}`",
            )
        )
    if config.protect and not config.cluster.admin_principal_arns:
        found.append(
            Placeholder(
                f"{PROJECT}:cluster.adminPrincipalArns",
                "[]",
                "a protected stack whose only cluster admin would be the deploy role (EKS's bootstrap entry for "
                "the cluster's creator): name a person's or break-glass role (docs/cluster-access.md)",
            )
        )
    if not config.cluster.public_access_cidrs and not (runner or config.deploy.runner_label):
        found.append(
            Placeholder(
                f"{PROJECT}:deploy.runnerLabel",
                "(not set)",
                "the API endpoint is private-only (cluster.publicAccessCidrs is empty) and no runner inside the VPC "
                "is stated; a hosted runner cannot reach the endpoint to apply the Kubernetes resources",
            )
        )
    return found


def undigested_image(config: StackConfig) -> Optional[str]:
    """The serving image when it is pinned by a tag alone (no `@sha256:` digest), else None."""
    if config.serving is None:
        return None
    ref = parse_image(config.serving.image)
    return config.serving.image if ref is not None and ref.digest is None else None


def digest_warning(config: StackConfig, stack: str) -> list[str]:
    """The preview's one WARNING line for a serving image pinned by tag alone (a protected stack's is a
    placeholder instead, in the placeholder block)."""
    image = undigested_image(config)
    if image is None or config.protect:
        return []
    return [
        f"WARNING: {PROJECT}:serving.image {image} has no digest: the registry can move the tag; "
        f"`make resolve-image STACK={stack}` pins it"
    ]


def string_leaves(value: object, path: str) -> Iterator[tuple[str, str]]:
    """Every string leaf of a YAML value with its dotted path."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from string_leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for number, item in enumerate(value):
            yield from string_leaves(item, f"{path}[{number}]")
    elif isinstance(value, str):
        yield path, value


def environment_placeholders(envs: list[str], root: Path) -> list[Placeholder]:
    """Placeholders in the checked-in definitions (esc/<env>.yaml) of the imported ESC environments."""
    from llm_pd_eks_tools.core.esc_imports import ESC_DIR
    from llm_pd_eks_tools.core.stackfile import parse

    found = []
    for env in envs:
        definition = root / ESC_DIR / f"{env}.yaml"
        if not definition.is_file():
            continue
        data = parse(definition.read_text(encoding="utf-8"), str(definition.relative_to(root))) or {}
        for path, value in string_leaves(data.get("values") or {}, ""):
            where = f"esc {env}: values.{path}"
            if PLACEHOLDER_WORDS.search(value):
                found.append(
                    Placeholder(where, value, "names itself a placeholder: set the real value in the environment")
                )
            elif EXAMPLE_ACCOUNT in _ACCOUNT_IN.findall(value):
                found.append(Placeholder(where, value, f"uses the example AWS account {EXAMPLE_ACCOUNT}"))
    return found


def shadowed_keys(stack_keys: list[str], envs: list[str], root: Path) -> list[Placeholder]:
    """Keys set both in the stack file and by an imported environment: the stack file's value is the one
    the program reads (Pulumi ESC docs, "Integrate with Pulumi IaC": stack configuration takes precedence
    over imported environment values), so the environment's value never takes effect."""
    from llm_pd_eks_tools.core.esc_imports import environment_keys

    from_envs = set(environment_keys(envs, root))
    return [
        Placeholder(
            key,
            "(set in the stack file)",
            f"also set by ESC {', '.join(envs)}; the stack file's value wins and hides the environment's: "
            f"remove it from the stack file (`pulumi config rm {key}`)",
        )
        for key in sorted(set(stack_keys) & from_envs)
    ]


def own_placeholders(stack: str, root: Path) -> list[Placeholder]:
    """What the stack file itself holds (beyond StackConfig): values that name themselves placeholders,
    and keys an imported environment also sets."""
    from llm_pd_eks_tools.core.esc_imports import imported_environments
    from llm_pd_eks_tools.core.stackfile import read

    raw = read(stack, root)
    keys = [k if ":" in k else f"{PROJECT}:{k}" for k in raw]
    found = [
        Placeholder(k if ":" in k else f"{PROJECT}:{k}", f"{path}: {value}", "names itself a placeholder")
        for k, item in raw.items()
        if not (isinstance(item, dict) and "secure" in item)
        for path, value in string_leaves(item, k)
        if PLACEHOLDER_WORDS.search(value)
    ]
    envs = imported_environments(stack, root)
    return found + (shadowed_keys(keys, envs, root) if envs else [])


def stack_file_placeholders(stack: str, root: Path) -> list[Placeholder]:
    """The stack file's own placeholders and its imported environments' checked-in definitions' (offline:
    the deploy gate judges what ESC resolves instead, llm_pd_eks_tools/gates/deploy_gate.py)."""
    from llm_pd_eks_tools.core.esc_imports import imported_environments

    return own_placeholders(stack, root) + environment_placeholders(imported_environments(stack, root), root)


def reaches_api(config: StackConfig, label: str) -> Optional[str]:
    """Why a runner with `label` cannot reach the stack's API endpoint, or None."""
    return api_unreachable(config.cluster.public_access_cidrs, label)


def api_unreachable(cidrs: list[str], label: str) -> Optional[str]:
    """Why a runner with `label` cannot reach an API endpoint open to `cidrs` (cluster.publicAccessCidrs),
    or None. A runner the stack or the workflow names is taken to be placed for it; a GitHub-hosted one
    comes from GitHub's shared address ranges, so it reaches only an endpoint open to every address."""
    if not _HOSTED_RUNNER.match(label):
        return None
    if not cidrs:
        return f"the API endpoint is private-only and {label} is a GitHub-hosted runner outside the VPC"
    if not any(c in EVERYONE for c in cidrs):
        return (
            f"the API endpoint admits only cluster.publicAccessCidrs ({', '.join(cidrs)}), and {label} is a "
            "GitHub-hosted runner from GitHub's shared ranges; set DEPLOY_RUNNER_<STACK> or deploy.runnerLabel "
            "to a runner that is allowed"
        )
    return None


def alerting_placeholders(config: StackConfig) -> list[Placeholder]:
    """Alerting that would reach nobody, or page without a runbook (only where observability is deployed)."""
    if not (config.serving_layer and config.observability.enabled):
        return []
    alerting, found = config.observability.alerting, []
    if alerting.runbook_base_url is None:
        found.append(
            Placeholder(
                f"{PROJECT}:observability.alerting.runbookBaseUrl",
                "(not set)",
                "alerts would carry no runbook link: set the absolute URL of docs/operations.md",
            )
        )
    severities = {s.severity for s in alerting.sns_subscriptions}
    key = f"{PROJECT}:observability.alerting"
    if alerting.receiver == "sns" and "critical" not in severities:
        found.append(
            Placeholder(
                f"{key}.snsSubscriptions",
                "(no severity critical)",
                "the pages topic has no subscription: every page would reach nobody "
                "(add {protocol: email, endpoint: ..., severity: critical}, or use receiver webhook)",
            )
        )
    if "warning" not in severities:
        found.append(
            Placeholder(
                f"{key}.snsSubscriptions",
                "(no severity warning)",
                "the tickets topic has no subscription: every ticket would reach nobody "
                "(add {protocol: email, endpoint: ..., severity: warning})",
            )
        )
    if alerting.heartbeat_url is None:
        found.append(
            Placeholder(
                f"{key}.heartbeatUrl",
                "(not set)",
                "no dead-man's switch: a dead Prometheus or Alertmanager would page nobody; set the https ping "
                "URL of an external heartbeat receiver",
            )
        )
    return found


def runner_label(config: StackConfig, runner: Optional[str] = None) -> str:
    """The runner `pulumi up` should run on: the workflow's input, the stack's, or the hosted default."""
    return runner or config.deploy.runner_label or DEFAULT_RUNNER


def warning_lines(
    config: StackConfig, secure_values: Optional[dict[str, str]] = None, stack: str = "<stack>"
) -> list[str]:
    """The preview's WARNING block (empty when the stack has no placeholders)."""
    found = find_placeholders(config, secure_values=secure_values, stack=stack)
    if not found:
        return []
    return [
        f"WARNING: {len(found)} placeholder value(s): fine for an offline preview, refused by the deploy workflow"
    ] + [f"  - {p}" for p in found]


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.gates.placeholders", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--runner", default="", help="runner label given to the deploy workflow, if any")
    parser.add_argument(
        "--github-output", type=appendable_file, help="append `runner=<label>` to this file (GITHUB_OUTPUT)"
    )
    parser.add_argument(
        "--preview", action="store_true", help="judge the runner for a cloud preview only: runner=, refresh=, note="
    )
    args = parser.parse_args(argv)
    from llm_pd_eks.config import ConfigError
    from llm_pd_eks_tools.core.cli import ROOT
    from llm_pd_eks_tools.core.stack import stack_config
    from llm_pd_eks_tools.core.stackfile import secure_values

    try:
        config = stack_config(args.stack)
        extra = [] if args.preview else stack_file_placeholders(args.stack, ROOT)
    except (FileNotFoundError, ConfigError) as error:
        raise ToolError(Exit.USAGE, f"cannot read stack {args.stack!r}: {one_line(str(error))}") from None
    label = runner_label(config, args.runner or None)
    if args.preview:
        return _preview(args.stack, config, label, args.github_output)
    found = find_placeholders(config, args.runner or None, secure_values(args.stack, ROOT), args.stack) + extra
    if args.github_output and not any(p.key in ("--runner", f"{PROJECT}:deploy.runnerLabel") for p in found):
        append_text(args.github_output, f"runner={label}\n")
    for p in found:
        print(f"placeholder: {p}", file=sys.stderr)
    if found:
        print(
            f"stack {args.stack}: {len(found)} placeholder value(s); replace them before `pulumi up`", file=sys.stderr
        )
        return Exit.FAILED
    print(f"stack {args.stack}: no placeholder values; pulumi up runs on {label}")
    return Exit.OK


def _preview(stack: str, config: StackConfig, label: str, github_output: Optional[str]) -> int:
    problem = runner_problem(label, private_only=False)
    if problem:
        raise ToolError(Exit.USAGE, f"runner {label!r}: {problem}")
    why = reaches_api(config, label)
    note = f"{why}: the preview shows the plan against the last recorded state, not the live resources" if why else ""
    if github_output:
        append_text(
            github_output, f"runner={label}\nrefresh={'false' if why else 'true'}\nnote={one_line(note, 400)}\n"
        )
    print(f"stack {stack}: preview on {label}, " + (f"no refresh: {note}" if why else "with refresh"))
    return Exit.OK


if __name__ == "__main__":
    exit_with("placeholders", main)
