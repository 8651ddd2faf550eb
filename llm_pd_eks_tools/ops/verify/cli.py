"""`python -m llm_pd_eks_tools.ops.verify --stack dev [--kubeconfig PATH] [--json] [--timeout 600]`.

See llm_pd_eks_tools/ops/verify/__init__.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

from llm_pd_eks.catalog import gpu_instance_type
from llm_pd_eks.config import ConfigError
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, non_negative_seconds, one_line, seconds
from llm_pd_eks_tools.core.io_safety import atomic_write, redact
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.core.stackfile import stack_file

from .checks import Check, Expected, Status, run_checks
from .kube import Deadline, KubeClient, kubeconfig_from_stack, load_kubeconfig, read_kubeconfig

DEFAULT_TIMEOUT = 600.0  # seconds, the whole run
OUT_DIR = ROOT / "build" / "verify"


def exit_code(results: list[Check]) -> Exit:
    statuses = {c.status for c in results}
    if Status.FAIL in statuses:
        return Exit.FAILED
    if Status.UNVERIFIED in statuses:
        return Exit.UNVERIFIED
    return Exit.OK


def render_table(stack: str, results: list[Check], code: Exit) -> str:
    width = max(len(c.name) for c in results)
    lines = [f"verify {stack}", ""]
    lines += [f"  {c.status.value:<10} {c.name:<{width}}  {one_line(c.detail, 200)}" for c in results]
    lines += ["", f"RESULT: {code.name} (exit {int(code)})"]
    return "\n".join(lines)


def report(stack: str, results: list[Check], code: Exit) -> dict:
    return {
        "stack": stack,
        "result": code.name,
        "exit_code": int(code),
        "checks": [{"name": c.name, "status": c.status.value, "detail": c.detail, "data": c.data} for c in results],
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.ops.verify", description=__doc__.split("\n")[0])
    parser.add_argument("--stack", default="dev", help="stack name (reads Pulumi.<stack>.yaml for what to expect)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else `pulumi stack output`)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    parser.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, help="total seconds for the whole run")
    parser.add_argument(
        "--kv-wait", type=non_negative_seconds, default=90.0, help="seconds to wait for KV metrics to be scraped"
    )
    parser.add_argument(
        "--reference",
        help="an aggregated deployment's OpenAI base URL: the traffic gate's answers must equal its answers",
    )
    parser.add_argument("--out", type=Path, help="where verify.json goes (default: build/verify/<stack>)")
    args = parser.parse_args(argv)

    stack_file(args.stack, ROOT)  # a stack name is never a path: build/verify/<stack> stays under build/
    out = args.out if args.out is not None else OUT_DIR / args.stack
    if out.exists() and not out.is_dir():
        raise ToolError(Exit.USAGE, f"--out {out} is not a directory; give a directory for verify.json")
    # the program's config and catalog: imported here, past the arguments (they import Pulumi's SDKs)

    try:
        config = stack_config(args.stack)
    except FileNotFoundError as exc:
        raise ToolError(Exit.USAGE, str(exc)) from None
    except ConfigError as exc:
        raise ToolError(Exit.USAGE, f"stack {args.stack}: {one_line(str(exc))}") from None
    expected = Expected.from_config(config, gpu_instance_type(config.gpu_nodes.instance_type))

    deadline = Deadline(args.timeout)
    path = args.kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        text = read_kubeconfig(path)
    else:
        text = kubeconfig_from_stack(args.stack, deadline.request_timeout())
    client = KubeClient(load_kubeconfig(text, deadline), deadline)

    results = run_checks(client, expected, kv_wait_seconds=args.kv_wait, reference_url=args.reference)
    for check in results:  # a server URL's user:password@, a token quoted back by a proxy
        check.detail = redact(check.detail)
    code = exit_code(results)
    body = report(args.stack, results, code)
    try:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write((out / "verify.json"), json.dumps(body, indent=2) + "\n")
    except OSError as exc:  # the checks ran: print them, then say the file could not be written
        print(json.dumps(body, indent=2) if args.json else render_table(args.stack, results, code))
        raise ToolError(Exit.USAGE, f"--out {out}: cannot write verify.json ({exc.strerror})") from None
    print(json.dumps(body, indent=2) if args.json else render_table(args.stack, results, code))
    if code != Exit.OK:
        failed = [c.name for c in results if c.status != Status.PASS]
        print(f"verify: {code.name.lower()}: {', '.join(failed)}", file=sys.stderr)
    return int(code)
