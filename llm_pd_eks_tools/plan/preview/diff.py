"""What a change does to a stack: the offline preview of another revision against this working tree.

`python -m llm_pd_eks_tools.plan.preview.diff --base <git rev> [--stack dev]` (what `make preview-diff` runs):
checks `<rev>` out into a temporary `git worktree`, previews it and the working tree (in parallel,
each in its own process: both import a `llm_pd_eks` package), then reports resources added,
removed and changed (input by input), policy verdicts that appeared or went away, and the change in
the figures and the estimated cost. Written to `build/preview-diff/<stack>/diff.md` and printed.

Both sides are previewed by *this* checkout's tools (so an old revision without `llm_pd_eks_tools/plan/preview/`
still works, as long as its config model has `validate_engine_config`), each with its own program,
stack file and policy pack, and both report.json files are read back through the one `Report`
model. A stack missing at the base counts as empty. Exit status: that of the working tree's preview
(1 on a mandatory violation); 2 for a BASE that is not a commit.
"""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from llm_pd_eks_tools.core.cli import (
    ROOT,
    ArgumentParser,
    Exit,
    ToolError,
    checkout_root,
    exit_with,
    fresh_out_dir,
    one_line,
)
from llm_pd_eks_tools.core.io_safety import atomic_write
from llm_pd_eks_tools.core.process_safety import end_process, forget, run_process, spawn
from llm_pd_eks_tools.core.stackfile import existing_stack_file
from llm_pd_eks_tools.plan.cutover import plan_cutover
from llm_pd_eks_tools.plan.gpu_node_rollout import SYSTEM_COMPONENT, classify_gpu_roll, classify_node_group_roll
from llm_pd_eks_tools.plan.preview import fmt
from llm_pd_eks_tools.plan.preview.crds import crd_changes
from llm_pd_eks_tools.plan.preview.report import Report, VerdictRecord
from llm_pd_eks_tools.plan.rayservice_rollout import classify_resources

TOOLS = ROOT / "llm_pd_eks_tools"
_PREVIEW_PREFIX = "preview: "  # how llm_pd_eks_tools.core.cli.run prefixes the preview's one-line errors

# Runs this checkout's `llm_pd_eks_tools` against another checkout's program: `llm_pd_eks_tools` is loaded from TOOLS
# explicitly, `llm_pd_eks` then resolves from the previewed root (first on sys.path).
_BOOTSTRAP = """
import importlib.util, os, sys
tools_dir, root = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
spec = importlib.util.spec_from_file_location("llm_pd_eks_tools", os.path.join(tools_dir, "__init__.py"),
                                              submodule_search_locations=[tools_dir])
module = importlib.util.module_from_spec(spec)
sys.modules["llm_pd_eks_tools"] = module
spec.loader.exec_module(module)
from llm_pd_eks_tools.plan.preview.__main__ import run_and_exit
run_and_exit(["--root", root] + sys.argv[3:])
"""


def _progress(message: str) -> None:
    print(f"[preview-diff] {message}", file=sys.stderr, flush=True)


# What a preview diff writes into its directory (all a later run may remove there).
DIFF_ARTIFACTS = ("diff.md", "base", "head")


def default_out_dir(root: Path, stack: str) -> Path:
    return Path(root).resolve() / "build" / "preview-diff" / stack


GIT_TIMEOUT_S = 120.0  # a worktree of this repository is added in seconds


def _git(repo: Path, *args: str) -> str:
    try:
        done = run_process(["git", "-C", str(repo), *args], GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ToolError(Exit.USAGE, f"git {' '.join(args)}: no answer in {GIT_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        raise ToolError(Exit.USAGE, f"git {' '.join(args)}: {one_line(done.stderr.strip(), 300)}")
    return done.stdout.strip()


@dataclass
class Side:
    label: str
    out: Path
    exit_code: int
    stderr: str
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    report: Optional[Report] = None  # None when this side could not be previewed

    @property
    def ok(self) -> bool:
        return self.exit_code in (Exit.OK, Exit.FAILED)


def _start_preview(root: Path, stack: str, out: Path, python: str) -> subprocess.Popen:
    # `--opt=value`: a stack named `-canary` stays the value of --stack
    cmd = [python, "-c", _BOOTSTRAP, str(TOOLS), str(root), f"--stack={stack}", f"--out={out}", "--quiet"]
    return spawn(cmd, cwd=str(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(label: str, proc: subprocess.Popen, out: Path) -> Side:
    _stdout, stderr = proc.communicate()
    forget(proc)
    side = Side(label, out, proc.returncode, stderr)
    if side.ok:
        side.resources = {r["urn"]: r for r in json.loads((out / "resources.json").read_text())}
        side.report = Report.read(out / "report.json")
    return side


# -- comparing -----------------------------------------------------------------------------------
def _key(path: str, key: str) -> str:
    if key.replace("_", "").replace("-", "").isalnum():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"  # keys such as vpc.amazonaws.com/efa stay readable


def changed_paths(old: Any, new: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Leaf-level differences: (path, old, new); a missing side is reported as None."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new)):
            sub = _key(path, key)
            if key not in old:
                found.append((sub, None, new[key]))
            elif key not in new:
                found.append((sub, old[key], None))
            else:
                found.extend(changed_paths(old[key], new[key], sub))
        return found
    if isinstance(old, list) and isinstance(new, list):
        found = []
        for i in range(max(len(old), len(new))):
            a = old[i] if i < len(old) else None
            b = new[i] if i < len(new) else None
            found.extend(
                changed_paths(a, b, f"{path}[{i}]") if i < len(old) and i < len(new) else [(f"{path}[{i}]", a, b)]
            )
        return found
    return [] if old == new else [(path or "(value)", old, new)]


@dataclass
class Diff:
    stack: str
    base_label: str
    head_label: str
    added: list[dict[str, Any]]
    removed: list[dict[str, Any]]
    changed: list[tuple[dict[str, Any], list[tuple[str, Any, Any]]]]
    verdicts_new: list[VerdictRecord]
    verdicts_gone: list[VerdictRecord]
    base_report: Optional[Report]
    head_report: Optional[Report]
    notes: list[str]
    # (RayService name, llm_pd_eks_tools.plan.rayservice_rollout.Rollout)
    rollouts: list[tuple[str, Any]] = field(default_factory=list)
    gpu_roll: Optional[Any] = None  # llm_pd_eks_tools.plan.gpu_node_rollout.GpuRoll: what the GPU node group does
    system_roll: Optional[Any] = None  # the same for the system node group
    cutover: Optional[Any] = None  # llm_pd_eks_tools.plan.cutover.CutOver: the sequence of a node change

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.verdicts_new or self.verdicts_gone)


def compare(stack: str, base: Side, head: Side, notes: Optional[list[str]] = None) -> Diff:
    added = [head.resources[u] for u in sorted(set(head.resources) - set(base.resources))]
    removed = [base.resources[u] for u in sorted(set(base.resources) - set(head.resources))]
    changed = []
    for urn in sorted(set(base.resources) & set(head.resources)):
        a, b = base.resources[urn], head.resources[urn]
        fields = {k: a[k] for k in ("inputs", "protect", "parent", "dependencies", "property_dependencies", "provider")}
        new_fields = {k: b[k] for k in fields}
        paths = changed_paths(fields, new_fields)
        if paths:
            changed.append((b, paths))
    old_v = {v.key(): v for v in (base.report.verdicts if base.report else [])}
    new_v = {v.key(): v for v in (head.report.verdicts if head.report else [])}
    return Diff(
        stack,
        base.label,
        head.label,
        added,
        removed,
        changed,
        [new_v[k] for k in sorted(set(new_v) - set(old_v))],
        [old_v[k] for k in sorted(set(old_v) - set(new_v))],
        base.report,
        head.report,
        list(notes or []),
        classify_resources(base.resources, head.resources),
        classify_gpu_roll(base.resources, head.resources, gpu_node_price(head.report)),
        classify_node_group_roll(base.resources, head.resources, SYSTEM_COMPONENT),
        plan_cutover(base.resources, head.resources, gpu_node_price(head.report)),
    )


def gpu_node_price(report: Optional[Report]) -> Optional[float]:
    """One GPU node's hourly list price, from the preview's cost lines."""
    if report is None or report.figures.gpu is None:
        return None
    for line in report.figures.cost.lines:
        if line.item == report.figures.gpu.instance_type:
            return line.unit_hourly
    return None


# -- rendering -----------------------------------------------------------------------------------
def _figure_rows(base: Optional[Report], head: Optional[Report]) -> list[tuple[str, str, str]]:
    def pick(report: Optional[Report]) -> dict[str, str]:
        if report is None:
            return dict.fromkeys(
                (
                    "GPU nodes",
                    "GPU availability zone",
                    "EFA interfaces per GPU node",
                    "NAT gateways",
                    "Cost per hour",
                    "Cost per month",
                    "KV transfer per request",
                    "Resources",
                    "Policy verdicts",
                ),
                "n/a",
            )
        fig = report.figures
        gpu = fig.gpu
        cost = fig.cost
        kv = fig.kv_transfer
        return {
            "GPU nodes": f"{gpu.desired_size} × {gpu.instance_type} (max {gpu.max_size})" if gpu else "none",
            "GPU availability zone": ", ".join(gpu.availability_zones) if gpu else "n/a",
            "EFA interfaces per GPU node": str(gpu.efa_interfaces) if gpu else "n/a",
            "NAT gateways": str(fig.nat_gateways),
            "Cost per hour": fmt.money(cost.hourly if cost.priced else None),
            "Cost per month": fmt.money(cost.monthly if cost.priced else None),
            "KV transfer per request": (
                f"{fmt.size(kv.bytes)}; EFA {fmt.ms(kv.efa_seconds)}, TCP {fmt.ms(kv.tcp_seconds)}" if kv.ok else "n/a"
            ),
            "Resources": str(report.resource_count),
            "Policy verdicts": str(len(report.verdicts)) if report.pack.ran else "n/a (no policy pack)",
        }

    a, b = pick(base), pick(head)
    return [(k, a[k], b[k]) for k in a]


def cost_delta(diff: Diff) -> Optional[tuple[float, float]]:
    """(hourly, monthly) change of the estimated cost, when both sides have one."""
    if diff.base_report is None or diff.head_report is None:
        return None
    a, b = diff.base_report.figures.cost, diff.head_report.figures.cost
    if not a.priced or not b.priced:
        return None
    return b.hourly - a.hourly, b.monthly - a.monthly


def render(diff: Diff) -> str:
    out = [f"### Preview diff: stack `{diff.stack}`, {diff.base_label} → {diff.head_label}", ""]
    out += [f"> {note}" for note in diff.notes]
    if diff.notes:
        out.append("")
    out.append(
        f"**{len(diff.added)} to add, {len(diff.changed)} to change, {len(diff.removed)} to remove; "
        f"{len(diff.verdicts_new)} new policy verdict(s), {len(diff.verdicts_gone)} resolved.**"
    )
    delta = cost_delta(diff)
    if delta is not None:
        out.append(
            f"Estimated cost: {fmt.signed_money(delta[0])}/hour, {fmt.signed_money(delta[1])}/month "
            "(approximate on-demand list prices)."
        )
    out += [f"**Roll-out:** {rollout.describe()}" for _, rollout in diff.rollouts if rollout.kind != "no change"]
    if diff.gpu_roll is not None and diff.gpu_roll.kind != "no change":
        out.append(f"**GPU nodes:** {diff.gpu_roll.describe()}")
    if diff.system_roll is not None and diff.system_roll.kind != "no change":
        out.append(f"**System nodes:** {diff.system_roll.describe()}")
    if diff.cutover is not None:
        out += ["", "**Cut-over:**", "", *diff.cutover.lines()]
    out += [f"**CRDs:** {line}" for line in crd_changes(diff.added, diff.removed, diff.changed)]
    out += ["", "| Figure | Before | After |", "|---|---|---|"]
    for name, before, after in _figure_rows(diff.base_report, diff.head_report):
        mark = "" if before == after else " **(changed)**"
        out.append(f"| {name} | {fmt.md_cell(before)} | {fmt.md_cell(after)}{mark} |")
    if diff.added:
        out += ["", "#### Added", ""] + [f"- `{r['type']}` **{r['name']}**" for r in diff.added]
    if diff.removed:
        out += ["", "#### Removed", ""] + [f"- `{r['type']}` **{r['name']}**" for r in diff.removed]
    if diff.changed:
        out += ["", "#### Changed", ""]
        for r, paths in diff.changed:
            out.append(f"- `{r['type']}` **{r['name']}**")
            for path, old, new in paths:
                if isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new):
                    lines = difflib.unified_diff(
                        old.splitlines(), new.splitlines(), "before", "after", lineterm="", n=1
                    )
                    out += [f"  - `{path}`:", "    ```diff"] + [f"    {line}" for line in list(lines)[2:]] + ["    ```"]
                else:
                    out.append(f"  - `{path}`: `{fmt.short_value(old)}` → `{fmt.short_value(new)}`")
    if diff.verdicts_new or diff.verdicts_gone:
        out += ["", "#### Policy verdicts", ""]
        for v in diff.verdicts_new:
            out.append(
                f"- new {v.enforcement} `{v.policy}` on `{v.urn.split('::')[-1] or '(stack)'}`: {v.message.strip()}"
            )
        for v in diff.verdicts_gone:
            out.append(f"- resolved {v.enforcement} `{v.policy}` on `{v.urn.split('::')[-1] or '(stack)'}`")
    if diff.empty:
        out += ["", "No resource or verdict changes."]
    return "\n".join(out) + "\n"


# -- orchestration -------------------------------------------------------------------------------
def preview_diff(
    base_rev: str,
    stack: str,
    root: Path = ROOT,
    out_dir: Optional[Path] = None,
    python: Optional[str] = None,
    progress: Callable[[str], None] = _progress,
) -> tuple[Diff, int]:
    """Preview `base_rev` and the working tree of `root`; returns the diff and the head's exit code."""
    root = checkout_root(root)
    existing_stack_file(stack, root)  # a stack name is never a path: build/preview-diff/<stack> stays under build/
    python = python or sys.executable
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(root, stack)
    try:
        sha = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{base_rev}^{{commit}}")
    except ToolError:
        raise ToolError(Exit.USAGE, f"BASE={base_rev!r} is not a commit of the repository at {root}") from None
    short = sha[:10]
    fresh_out_dir(out_dir, DIFF_ARTIFACTS)
    tmp = Path(tempfile.mkdtemp(prefix="preview-diff-"))
    worktree = tmp / "base"
    progress(f"checking out {base_rev} ({short}) into a temporary worktree…")
    _git(root, "worktree", "add", "--detach", "--quiet", str(worktree), sha)
    base_proc: Optional[subprocess.Popen] = None
    head_proc: Optional[subprocess.Popen] = None
    try:
        progress(f"previewing {stack} at {short} and in the working tree (in parallel)…")
        base_proc = _start_preview(worktree, stack, out_dir / "base", python)
        head_proc = _start_preview(root, stack, out_dir / "head", python)
        base = _finish(f"`{base_rev}` ({short})", base_proc, out_dir / "base")
        head = _finish("working tree", head_proc, out_dir / "head")
    finally:
        for proc in (p for p in (base_proc, head_proc) if p is not None and p.poll() is None):
            end_process(proc, grace=5)  # Ctrl-C or SIGTERM mid-way: neither preview outlives the diff
        run_process(["git", "-C", str(root), "worktree", "remove", "--force", str(worktree)], GIT_TIMEOUT_S)
        shutil.rmtree(tmp, ignore_errors=True)
        run_process(["git", "-C", str(root), "worktree", "prune"], GIT_TIMEOUT_S)
    if not head.ok:
        raise ToolError(
            _exit(head.exit_code),
            f"the working tree's preview failed: {_first_error(head.stderr)} "
            f"(its summary: {out_dir / 'head' / 'summary.md'})",
        )
    notes = []
    if not base.ok:
        notes.append(
            f"The base revision could not be previewed ({_first_error(base.stderr)}); everything counts as added."
        )
    diff = compare(stack, base, head, notes)
    atomic_write(out_dir / "diff.md", render(diff))
    return diff, head.exit_code


def _first_error(stderr: str) -> str:
    """The inner preview's own error line (`preview: ...`), else its last line: one line either way."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    first = next((line for line in lines if line.startswith(_PREVIEW_PREFIX)), lines[-1] if lines else "no output")
    return one_line(first.removeprefix(_PREVIEW_PREFIX))


def _exit(code: int) -> Exit:
    try:
        return Exit(code)
    except ValueError:
        return Exit.INTERNAL


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(
        prog="python -m llm_pd_eks_tools.plan.preview.diff", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--base", required=True, help="git revision to compare against (e.g. origin/main, HEAD~1)")
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, help="default: <root>/build/preview-diff/<stack>")
    args = parser.parse_args(argv)
    diff, code = preview_diff(args.base, args.stack, args.root, args.out)
    print(render(diff), end="")
    where = args.out or default_out_dir(args.root, args.stack)
    _progress(f"written to {where / 'diff.md'}")
    return code


if __name__ == "__main__":
    exit_with("preview-diff", main)
