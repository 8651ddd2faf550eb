"""The GPU run's cluster steps on this machine's CPU, before any GPU time is spent on them.

    make realrun-dry      # about a minute: gpu_main's own raylets, deploys and Serve shutdowns, on the tools' Ray

Renders the bundle, then walks the order the routing arms take with gpu_main's own functions: the head
and role raylets as a fresh machine starts them (the role raylets declare the GPU they would hold;
nothing here uses it), a deploy of a one-replica stand-in application under the real one's name
through the same dashboard PUT, every raylet's metrics endpoint scraped, the second arm of a pair on
the same raylets (Serve shut down and waited for, then deployed again), the prefix raylets (the others
stopped), a deploy there, and `ray stop`. Each step's seconds are printed. vLLM is not here, so no
engine starts: this proves the orchestration, not the serving. It refuses to run beside a Ray cluster
already on this machine (its `ray stop` would end it).
"""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, exit_with, one_line

PROG = "realrun-dry"
STANDIN = "realrun_standin"  # the stand-in's module, beside the decode-only arm's in the bundle's runtime/
STANDIN_SOURCE = '''"""A stand-in for the served application: one replica, no engine."""
from ray import serve


@serve.deployment
class StandIn:
    def __call__(self, request):
        return "ok"


app = StandIn.bind()
'''


def standin_config(app_name: str) -> dict[str, Any]:
    return {"applications": [{"name": app_name, "route_prefix": "/", "import_path": f"{STANDIN}:app"}]}


class Steps:
    """A dry run's steps, each timed and said; a step's problem (or the SystemExit a gpu_main
    function raises) ends the run as a ToolError naming the step."""

    def __init__(self, say: Callable[[str], None], width: int = 240) -> None:
        self.say, self.width = say, width
        self.timings: list[tuple[str, float]] = []

    def __call__(self, name: str, action: Callable[[], Optional[str]]) -> None:
        started = time.monotonic()
        try:
            problem = action()
        except SystemExit as stop:
            problem = str(stop)
        if problem:
            raise ToolError(Exit.FAILED, f"{name}: {one_line(problem, self.width)}")
        self.timings.append((name, round(time.monotonic() - started, 1)))
        self.say(f"{name}: {self.timings[-1][1]} s")


def refuse_a_running_cluster() -> None:
    """A dry run ends with `ray stop`, which would end a cluster already on this machine."""
    from llm_pd_eks_sizing.realrun import gpu_main

    if gpu_main.cluster_up():
        raise ToolError(
            Exit.USAGE, "a Ray cluster already answers at 127.0.0.1:8265; stop it (`ray stop`) and run again"
        )


@contextmanager
def stand_in_cluster() -> Iterator[None]:
    """gpu_main's cluster steps with no engine tokenizer to build (nothing here reads it), and Ray
    stopped on every way out."""
    from llm_pd_eks_sizing.realrun import gpu_main

    build_tokenizer = gpu_main.build_tokenizer
    gpu_main.build_tokenizer = lambda bundle: None
    try:
        yield
    finally:
        gpu_main.ray_stop()
        gpu_main.build_tokenizer = build_tokenizer


def walk(bundle: Path, say: Callable[[str], None]) -> list[tuple[str, float]]:
    """The steps, in order, each timed; a step that fails is a ToolError (FAILED) naming it."""
    from llm_pd_eks_sizing.realrun import gpu_main

    config = standin_config("llm")
    step = Steps(say)

    def deployed() -> Optional[str]:
        status = gpu_main.deploy(config, timeout_s=180).get("applications", {}).get("llm", {}).get("status")
        return None if status == "RUNNING" else f"the stand-in application is {status or 'absent'}, not RUNNING"

    def scraped() -> Optional[str]:
        silent = [node for node, text in gpu_main.scrape().items() if "ray_" not in text]
        return f"no Ray metrics from {', '.join(silent)}" if silent else None

    def raylets(name: str, expect: str) -> Callable[[], Optional[str]]:
        def start() -> Optional[str]:
            evidence: dict[str, Any] = {}
            gpu_main.ensure_raylets(bundle, evidence, name)
            return None if evidence.get("raylets", "").startswith(expect) else f"raylets {evidence.get('raylets')}"

        return start

    with stand_in_cluster():
        step("raylets started (raylets.json)", raylets("raylets.json", "started"))
        step("first arm deployed", deployed)
        step("metrics scraped on every raylet", scraped)
        step("raylets reused, Serve shut down (raylets.json)", raylets("raylets.json", "reused"))
        step("second arm deployed", deployed)
        step("prefix raylets started, the others stopped", raylets("raylets-prefix.json", "started"))
        step("prefix arm deployed", deployed)
    return step.timings


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(
        prog=f"python -m llm_pd_eks_sizing.realrun.{PROG.replace('-', '_')}", description=__doc__.splitlines()[0]
    )
    parser.parse_args(argv)
    from llm_pd_eks_sizing.realrun.render import load_overrides, write_bundle

    refuse_a_running_cluster()
    with tempfile.TemporaryDirectory(prefix="realrun-dry-") as tmp:
        bundle = Path(tmp)
        write_bundle(bundle, load_overrides())
        (bundle / "runtime" / f"{STANDIN}.py").write_text(STANDIN_SOURCE)
        timings = walk(bundle, lambda line: print(f"{PROG}: {line}", flush=True))
    print(f"{PROG}: the cluster steps ran on Ray in {sum(s for _, s in timings):.0f} s")
    return Exit.OK


if __name__ == "__main__":
    exit_with(PROG, main)
