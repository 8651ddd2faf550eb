"""How long one `pulumi up` may run at most, from the plan's own wait limits: the figure every CI
credential and job limit must outlast.

An `up` fails half-way (and leaves a pending operation in the stack) when its AWS credentials, its
Pulumi Cloud token or its job expires before the engine has finished waiting. The engine waits, per
resource, at most that resource's timeout, and it starts a resource only after everything it
depends on; so the longest `up` is the longest chain of waits through the plan's dependency graph.

Wait limits (the larger of create and update: an `up` may do either):
- `aws:eks/cluster:Cluster` (inside pulumi-eks's `eks:index:Cluster`): 30 min create, 60 min update
  (terraform-provider-aws internal/service/eks/cluster.go, `Timeouts`; pulumi-aws bridges it, the
  program sets none).
- `aws:eks/nodeGroup:NodeGroup`: 60 min create and update (internal/service/eks/node_group.go).
- `aws:eks/addon:Addon`: 20 min create and update (internal/service/eks/addon.go).
- `aws:ec2/natGateway:NatGateway`: 10 min create (internal/service/ec2/vpc_nat_gateway.go).
- `kubernetes:helm.sh/v3:Release`: its `timeout` input, 300 s when unset (pulumi-kubernetes
  helm.v3.Release: "Time in seconds to wait for any individual kubernetes operation").
- any Kubernetes object with the `pulumi.com/timeoutSeconds` annotation: that many seconds
  (pulumi-kubernetes await logic); the RayService carries `serving.readyTimeoutMinutes` this way.
Everything else (IAM, subnets, launch templates, ConfigMaps) is a single API call of seconds.

Deletes come last: the engine deletes what an `up` replaced (create-before-delete, its default) or
dropped only after every create and update, one after the other on the chain's end. A GPU cut-over
(llm_pd_eks/gpu_cutover.py) is such an `up`: the old node group's delete waits up to 60 min
(`aws:eks/nodeGroup:NodeGroup` delete timeout, internal/service/eks/node_group.go), after the new
group, the new Ray cluster and the RayService's switch. So the figure adds the longest delete wait
of any resource type the plan holds (DELETE_MINUTES_BY_TYPE). The job's own steps (checkout,
virtualenvs, CLI, promote-check, preflight, `make verify`) get JOB_STEPS_MINUTES on top.

    python -m llm_pd_eks_tools.plan.up_budget          # every stack's chain and the figure

The figure is whole hours (`ci_budget_minutes`): `.github/workflows/*.yml` (`timeout-minutes`,
`role-duration-seconds`, the Pulumi token's `token-expiration`) and `esc/*/*.yaml` (`duration`)
carry it, tests/stack/test_up_budget.py keeps them equal to it. Exit: 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from llm_pd_eks_tools.core import stackfile
from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit
from llm_pd_eks_tools.plan.preview.mockrun import run_program

if TYPE_CHECKING:
    from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration

WAIT_MINUTES_BY_TYPE = {
    "aws:eks/cluster:Cluster": 60.0,
    # pulumi-eks's component: the aws:eks/cluster:Cluster above is its child, created by the eks
    # plugin (a remote component: under the mocks its children are not registered, so it counts here)
    "eks:index:Cluster": 60.0,
    "aws:eks/nodeGroup:NodeGroup": 60.0,
    "aws:eks/addon:Addon": 20.0,
    "aws:ec2/natGateway:NatGateway": 10.0,
}
# Delete wait limits (terraform-provider-aws `Timeouts` Delete) of the types an `up` may replace or drop.
DELETE_MINUTES_BY_TYPE = {
    "aws:eks/nodeGroup:NodeGroup": 60.0,
    "aws:eks/addon:Addon": 40.0,
}
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
HELM_DEFAULT_TIMEOUT_S = 300
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
JOB_STEPS_MINUTES = 20.0  # checkout, two virtualenvs, the CLI, promote-check, preflight, `make verify`
# The ceilings the figure must stay under: a GitHub-hosted job runs at most 6 h (GitHub Docs,
# "Usage limits": job execution time), an IAM role session at most 12 h (IAM MaxSessionDuration).
HOSTED_JOB_LIMIT_MINUTES = 360
ROLE_SESSION_LIMIT_MINUTES = 720


def wait_minutes(reg: "Registration") -> float:
    """The longest the engine waits for this one resource."""
    if reg.type == HELM_RELEASE:
        return float(reg.inputs.get("timeout") or HELM_DEFAULT_TIMEOUT_S) / 60
    if reg.type.startswith("kubernetes:"):
        annotations = (reg.inputs.get("metadata") or {}).get("annotations") or {}
        if TIMEOUT_ANNOTATION in annotations:
            return float(annotations[TIMEOUT_ANNOTATION]) / 60
    return WAIT_MINUTES_BY_TYPE.get(reg.type, 0.0)


@dataclass(frozen=True)
class Chain:
    """The longest chain of waits of one plan: its total and the resources on it, first to last."""

    stack: str
    minutes: float
    names: tuple[str, ...]
    # the longest delete the same `up` may run after the chain (a cut-over's old node group)
    delete_minutes: float = 0.0


def longest_chain(run: "ProgramRun") -> Chain:
    """The heaviest path through the dependency graph (dependsOn, property dependencies, the provider;
    a dependency on a component means all its descendants, as the engine expands it)."""
    children: dict[str, list[str]] = {}
    for r in run.resources:
        children.setdefault(r.parent, []).append(r.urn)
    by_urn = {r.urn: r for r in run.resources}

    def expanded(urn: str) -> set[str]:
        out, todo = set(), [urn]
        while todo:
            u = todo.pop()
            if u not in out:
                out.add(u)
                todo.extend(children.get(u, []))
        return out

    @cache
    def finish(urn: str) -> tuple[float, tuple[str, ...]]:
        reg = by_urn.get(urn)
        if reg is None:
            return 0.0, ()
        direct = set(reg.dependencies) | {u for deps in reg.property_dependencies.values() for u in deps}
        if reg.provider:
            direct.add(reg.provider.rsplit("::", 1)[0])  # a provider reference is `<urn>::<id>`
        before: tuple[float, tuple[str, ...]] = (0.0, ())
        for dep in sorted(direct):
            for d in sorted(expanded(dep)):
                if d != urn:
                    before = max(before, finish(d))
        own = wait_minutes(reg)
        return before[0] + own, before[1] + ((reg.name,) if own else ())

    best = max((finish(r.urn) for r in run.resources), default=(0.0, ()))
    return Chain(run.stack, round(best[0], 2), best[1], trailing_delete_minutes(run))


def trailing_delete_minutes(run: "ProgramRun") -> float:
    """The longest delete wait of any resource the plan holds: what a replacement or a cut-over's
    retired copy adds after everything else (deletes run last)."""
    return max((DELETE_MINUTES_BY_TYPE.get(r.type, 0.0) for r in run.resources), default=0.0)


def ci_budget_minutes(chains: Iterable[Chain]) -> int:
    """The longest chain of any stack, with the delete that may follow it, plus the job's own steps,
    rounded up to whole hours."""
    longest = max((c.minutes + c.delete_minutes for c in chains), default=0.0)
    return int(math.ceil((longest + JOB_STEPS_MINUTES) / 60) * 60)


def stack_chains(root: Optional[Path] = None, stacks: Optional[list[str]] = None) -> list[Chain]:
    """Every stack's longest chain, from its offline plan."""
    base = root or ROOT
    return [longest_chain(run_program(s, root=base)) for s in (stacks or stackfile.stacks(base))]


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.plan.up_budget", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    chains = stack_chains()
    for chain in chains:
        print(
            f"{chain.stack}: {chain.minutes:g} min: {' -> '.join(chain.names)}; "
            f"then up to {chain.delete_minutes:g} min of deletes"
        )
    print(
        f"CI budget: {ci_budget_minutes(chains)} min "
        f"(longest chain and its deletes + {JOB_STEPS_MINUTES:g} min of job steps, whole hours)"
    )
    return Exit.OK


if __name__ == "__main__":
    from llm_pd_eks_tools.core.cli import exit_with

    exit_with("up_budget", main)
