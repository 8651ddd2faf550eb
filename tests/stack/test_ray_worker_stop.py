"""A worker pod stops Ray before Kubernetes kills it: preStop `ray stop --grace-period`, inside the pod's grace.

The hook's command line is parsed by Ray's own `ray stop` (ray.scripts.scripts.stop, the installed
Ray's click command), and the grace period compared with the pod's terminationGracePeriodSeconds,
which the kubelet counts from the start of the preStop hook (Kubernetes docs, Pod Lifecycle,
"Termination of Pods").
"""

from __future__ import annotations

import json
import shlex

from click.core import ParameterSource
from helpers import DATA, RAY_SERVICE

from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun


def worker_pods(run: ProgramRun) -> dict[str, dict]:
    groups = run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return {g["groupName"]: g["template"]["spec"] for g in groups}


def ray_stop_params(command: list[str]) -> tuple[dict, ParameterSource | None]:
    from ray.scripts.scripts import stop

    shell, flag, line = command
    assert (shell, flag) == ("/bin/sh", "-c")
    argv = shlex.split(line)
    assert argv[:2] == ["ray", "stop"]
    ctx = stop.make_context("stop", argv[2:])
    return ctx.params, ctx.get_parameter_source("grace_period")


def test_workers_stop_ray_in_a_pre_stop_hook_within_the_pod_grace(run: ProgramRun):
    for role, pod in worker_pods(run).items():
        container = pod["containers"][0]
        params, source = ray_stop_params(container["lifecycle"]["preStop"]["exec"]["command"])
        # SIGTERM first (not `--force`), with the grace period written out rather than Ray's default
        assert params["force"] is False, role
        assert source is ParameterSource.COMMANDLINE, role
        # the kubelet's grace covers the whole hook and the SIGTERM after it
        assert pod["terminationGracePeriodSeconds"] > params["grace_period"], role


def test_ray_stop_waits_at_least_as_long_as_serve_s_graceful_replica_shutdown(run: ProgramRun):
    from ray.serve._private.constants import DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S

    for role, pod in worker_pods(run).items():
        container = pod["containers"][0]
        params, _ = ray_stop_params(container["lifecycle"]["preStop"]["exec"]["command"])
        assert params["grace_period"] >= DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S, role


def test_the_hook_is_the_dlc_s_own_ray_stop(run: ProgramRun):
    # The AWS Ray LLM DLC's KubeRay test stops its workers the same way (tests/data/dlc-ray-llm, SOURCE).
    dlc = json.loads((DATA / "dlc-ray-llm" / "eks-multi-node-pods.json").read_text())["worker"]
    dlc_shell, dlc_flag, dlc_line = dlc["lifecycle"]["preStop"]["exec"]["command"]
    for role, pod in worker_pods(run).items():
        container = pod["containers"][0]
        shell, flag, line = container["lifecycle"]["preStop"]["exec"]["command"]
        assert (shell, flag) == (dlc_shell, dlc_flag), role
        assert shlex.split(line)[:2] == shlex.split(dlc_line)[:2] == ["ray", "stop"], role
