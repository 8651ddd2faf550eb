"""The previewed node changes docs/day-two.md shows, generated from the program's own plans.

    python -m llm_pd_eks_tools.plan.cutover_examples          # print them
    python -m llm_pd_eks_tools.plan.cutover_examples --write  # rewrite their blocks in docs/day-two.md

Each example is two mock runs of a checked-in stack with one section changed, compared the way
`make preview-diff` compares two revisions (llm_pd_eks_tools/plan/preview/diff.py): the node groups' rolls,
the RayService's roll-out and the cut-over sequence. tests/stack/test_cutover_examples.py keeps the
document's blocks equal to what this prints.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from llm_pd_eks.config import PROJECT
from llm_pd_eks.prices import load_prices
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, exit_with
from llm_pd_eks_tools.core.io_safety import atomic_write
from llm_pd_eks_tools.core.stack import load_stack_config, stack_config
from llm_pd_eks_tools.plan.cutover import plan_cutover
from llm_pd_eks_tools.plan.gpu_node_rollout import (
    NO_CHANGE,
    SYSTEM_COMPONENT,
    classify_gpu_roll,
    classify_node_group_roll,
)
from llm_pd_eks_tools.plan.preview.harness import resource_records
from llm_pd_eks_tools.plan.preview.mockrun import run_program
from llm_pd_eks_tools.plan.rayservice_rollout import classify_resources

DOC = ROOT / "docs" / "day-two.md"


@dataclass(frozen=True)
class Example:
    title: str
    stack: str
    before: dict[str, dict[str, Any]]  # config section -> keys changed from the stack file
    after: dict[str, dict[str, Any]]


EXAMPLES = {
    "gpu-cutover": Example("`gpuNodes.diskSizeGib` 100 → 600 on prod", "prod", {}, {"gpuNodes": {"diskSizeGib": 600}}),
    "minor-upgrade": Example(
        "`cluster.kubernetesVersion` 1.34 → 1.35 on prod",
        "prod",
        {"cluster": {"kubernetesVersion": "1.34"}},
        {"cluster": {"kubernetesVersion": "1.35"}},
    ),
}


def _records(stack: str, sections: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    config, secret_keys = load_stack_config(stack)
    for section, changes in sections.items():
        key = f"{PROJECT}:{section}"
        config[key] = json.dumps({**json.loads(config.get(key, "{}")), **changes})
    return {r["urn"]: r for r in resource_records(run_program(stack, config, secret_keys))}


def _hourly(stack: str) -> Optional[float]:
    cfg = stack_config(stack)
    return load_prices().regions.get(cfg.region, {}).get("instances", {}).get(cfg.gpu_nodes.instance_type)


def example_lines(name: str) -> list[str]:
    """What the preview diff says of example `name`: the rolls, then the cut-over sequence."""
    ex = EXAMPLES[name]
    old, new = _records(ex.stack, ex.before), _records(ex.stack, ex.after)
    hourly = _hourly(ex.stack)
    out = [f"Preview of {ex.title}:", ""]
    for label, roll in (
        ("System nodes", classify_node_group_roll(old, new, SYSTEM_COMPONENT)),
        ("GPU nodes", classify_gpu_roll(old, new, hourly)),
    ):
        if roll.kind != NO_CHANGE:
            out.append(f"- **{label}:** {roll.describe()}")
    out += [f"- **Roll-out:** {r.describe()}" for _, r in classify_resources(old, new) if r.kind != NO_CHANGE]
    plan = plan_cutover(old, new, hourly)
    if plan is not None:
        out += ["", "**Cut-over:**", "", *plan.lines()]
    return out


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- cutover-example:{name} -->\n)(.*?)(<!-- /cutover-example:{name} -->)", re.S)


def _replacement(body: str) -> Callable[[re.Match[str]], str]:
    return lambda m: m.group(1) + body + m.group(3)


def rewrite(text: str) -> str:
    """`text` (day-two.md) with every example block regenerated."""
    for name in EXAMPLES:
        body = "```text\n" + "\n".join(example_lines(name)) + "\n```\n"
        text, count = _block(name).subn(_replacement(body), text)
        if count != 1:
            raise ValueError(f"{DOC.name}: no block for example {name!r}")
    return text


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(
        prog="python -m llm_pd_eks_tools.plan.cutover_examples", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--write", action="store_true", help=f"rewrite the example blocks in {DOC.name}")
    args = parser.parse_args(argv)
    if args.write:
        atomic_write(DOC, rewrite(DOC.read_text()))
        print(f"cutover_examples: rewrote the examples in {DOC.relative_to(ROOT)}")
        return 0
    for name in EXAMPLES:
        print("\n".join(example_lines(name)), end="\n\n")
    return 0


if __name__ == "__main__":
    exit_with("cutover-examples", main)
