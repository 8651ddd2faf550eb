"""What a change does to a stack: the offline preview of another revision against this working tree.

`python -m tools.preview.diff --base <git rev> [--stack dev]` (what `make preview-diff` runs):
checks `<rev>` out into a temporary `git worktree`, previews it and the working tree (in parallel,
each in its own process: both import a `components` package), then reports resources added,
removed and changed (input by input), policy verdicts that appeared or went away, and the change in
the figures and the estimated cost. Written to `build/preview-diff/<stack>/diff.md` and printed.

Both sides are previewed by *this* checkout's tools (so an old revision without `tools/preview.py`
still works), each with its own program, stack file and policy pack. A stack missing at the base
counts as empty. Exit status: that of the working tree's preview (1 on a mandatory violation).
"""

from __future__ import annotations

import argparse
import difflib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from tools.cli import ROOT

TOOLS = ROOT / "tools"

# Runs this checkout's `tools` against another checkout's program: `tools` is loaded from TOOLS
# explicitly, `components` then resolves from the previewed root (first on sys.path).
_BOOTSTRAP = """
import importlib.util, os, sys
tools_dir, root = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
spec = importlib.util.spec_from_file_location("tools", os.path.join(tools_dir, "__init__.py"),
                                              submodule_search_locations=[tools_dir])
module = importlib.util.module_from_spec(spec)
sys.modules["tools"] = module
spec.loader.exec_module(module)
from tools.preview.render import run_and_exit
run_and_exit(["--root", root] + sys.argv[3:])
"""


class DiffError(Exception):
    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code


def _progress(message: str) -> None:
    print(f"[preview-diff] {message}", file=sys.stderr, flush=True)


def default_out_dir(root: Path, stack: str) -> Path:
    return Path(root).resolve() / "build" / "preview-diff" / stack


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise DiffError(2, f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass
class Side:
    label: str
    out: Path
    exit_code: int
    stderr: str
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code in (0, 1)


def _start_preview(root: Path, stack: str, out: Path, python: str) -> subprocess.Popen:
    cmd = [python, "-c", _BOOTSTRAP, str(TOOLS), str(root), "--stack", stack, "--out", str(out), "--quiet"]
    return subprocess.Popen(cmd, cwd=str(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(label: str, proc: subprocess.Popen, out: Path) -> Side:
    _stdout, stderr = proc.communicate()
    side = Side(label, out, proc.returncode, stderr)
    if side.ok:
        side.resources = {r["urn"]: r for r in json.loads((out / "resources.json").read_text())}
        side.report = json.loads((out / "report.json").read_text())
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
    verdicts_new: list[dict[str, Any]]
    verdicts_gone: list[dict[str, Any]]
    base_report: dict[str, Any]
    head_report: dict[str, Any]
    notes: list[str]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.verdicts_new or self.verdicts_gone)


def _verdict_key(v: dict[str, Any]) -> tuple[str, str, str, str]:
    return (v["policy"], v["enforcement"], v["urn"], v["message"])


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
    old_v = {_verdict_key(v): v for v in base.report.get("verdicts", [])}
    new_v = {_verdict_key(v): v for v in head.report.get("verdicts", [])}
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
    )


# -- rendering -----------------------------------------------------------------------------------
def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _money(x: Optional[float]) -> str:
    return "n/a" if x is None else f"${x:,.2f}"


def _figure_rows(base: dict[str, Any], head: dict[str, Any]) -> list[tuple[str, str, str]]:
    def pick(report: dict[str, Any]) -> dict[str, str]:
        fig = report.get("figures") or {}
        gpu = fig.get("gpu") or {}
        cost = fig.get("cost") or {}
        kv = fig.get("kv_transfer") or {}
        has_cost = bool(cost.get("lines"))
        return {
            "GPU nodes": (
                f"{gpu['nodes']['desired']} × {gpu['instance_type']} (max {gpu['nodes']['max']})" if gpu else "none"
            ),
            "GPU availability zone": ", ".join(gpu.get("availability_zones", [])) or "n/a",
            "EFA interfaces per GPU node": str(gpu.get("efa_interfaces_per_node", "n/a")),
            "NAT gateways": str(fig.get("nat_gateways", "n/a")),
            "Cost per hour": _money(cost.get("hourly") if has_cost else None),
            "Cost per month": _money(cost.get("monthly") if has_cost else None),
            "KV transfer per request": (
                f"{kv['bytes']:,} B; EFA {kv['efa_seconds'] * 1000:.1f} ms, TCP {kv['tcp_seconds'] * 1000:.1f} ms"
                if kv.get("status") == "ok"
                else "n/a"
            ),
            "Resources": str(report.get("resource_count", 0)),
            "Policy verdicts": (
                str(len(report.get("verdicts", [])))
                if (report.get("pack") or {}).get("status") == "ran"
                else "n/a (no policy pack)"
            ),
        }

    a, b = pick(base), pick(head)
    return [(k, a[k], b[k]) for k in a]


def cost_delta(diff: Diff) -> Optional[tuple[float, float]]:
    """(hourly, monthly) change of the estimated cost, when both sides have one."""
    a = (diff.base_report.get("figures") or {}).get("cost") or {}
    b = (diff.head_report.get("figures") or {}).get("cost") or {}
    if not a.get("lines") or not b.get("lines"):
        return None
    return b["hourly"] - a["hourly"], b["monthly"] - a["monthly"]


def _md(text: str) -> str:
    return text.replace("|", "\\|")


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
        sign = "+" if delta[0] >= 0 else "−"
        out.append(
            f"Estimated cost: {sign}{_money(abs(delta[0]))}/hour, {sign}{_money(abs(delta[1]))}/month "
            "(approximate on-demand list prices)."
        )
    out += ["", "| Figure | Before | After |", "|---|---|---|"]
    for name, before, after in _figure_rows(diff.base_report, diff.head_report):
        mark = "" if before == after else " **(changed)**"
        out.append(f"| {name} | {_md(before)} | {_md(after)}{mark} |")
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
                    out.append(f"  - `{path}`: `{_short(old)}` → `{_short(new)}`")
    if diff.verdicts_new or diff.verdicts_gone:
        out += ["", "#### Policy verdicts", ""]
        for v in diff.verdicts_new:
            out.append(
                f"- new {v['enforcement']} `{v['policy']}` on `{v['urn'].split('::')[-1] or '(stack)'}`: "
                f"{v['message'].strip()}"
            )
        for v in diff.verdicts_gone:
            out.append(f"- resolved {v['enforcement']} `{v['policy']}` on `{v['urn'].split('::')[-1] or '(stack)'}`")
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
    root = Path(root).resolve()
    python = python or sys.executable
    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(root, stack)
    try:
        sha = _git(root, "rev-parse", "--verify", "--quiet", f"{base_rev}^{{commit}}")
    except DiffError:
        raise DiffError(2, f"BASE={base_rev!r} is not a commit of the repository at {root}") from None
    short = sha[:10]
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    tmp = Path(tempfile.mkdtemp(prefix="preview-diff-"))
    worktree = tmp / "base"
    progress(f"checking out {base_rev} ({short}) into a temporary worktree…")
    _git(root, "worktree", "add", "--detach", "--quiet", str(worktree), sha)
    try:
        progress(f"previewing {stack} at {short} and in the working tree (in parallel)…")
        base_proc = _start_preview(worktree, stack, out_dir / "base", python)
        head_proc = _start_preview(root, stack, out_dir / "head", python)
        base = _finish(f"`{base_rev}` ({short})", base_proc, out_dir / "base")
        head = _finish("working tree", head_proc, out_dir / "head")
    finally:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(worktree)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "-C", str(root), "worktree", "prune"], capture_output=True)
    if not head.ok:
        raise DiffError(head.exit_code, f"the working tree's preview failed:\n{head.stderr.strip()}")
    notes = []
    if not base.ok:
        first = next(
            (line for line in base.stderr.splitlines() if line.startswith("error:")), base.stderr.strip()[:300]
        )
        notes.append(
            f"The base revision could not be previewed ({first.removeprefix('error: ')}); everything counts as added."
        )
    diff = compare(stack, base, head, notes)
    (out_dir / "diff.md").write_text(render(diff))
    return diff, head.exit_code


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.preview.diff", description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare against (e.g. origin/main, HEAD~1)")
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, help="default: <root>/build/preview-diff/<stack>")
    args = parser.parse_args(argv)
    try:
        diff, code = preview_diff(args.base, args.stack, args.root, args.out)
    except DiffError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    print(render(diff), end="")
    where = args.out or default_out_dir(args.root, args.stack)
    _progress(f"written to {where / 'diff.md'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
