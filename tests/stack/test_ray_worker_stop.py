"""A worker pod drains its node before Ray stops: preStop `ray drain-node` with a deadline, a bounded wait
for the node's Serve replicas to leave, then `ray stop --grace-period`, all inside the pod's grace.

The hook's `ray` command lines are parsed by the installed Ray's own click commands
(ray.scripts.scripts `drain_node` and `stop`), and the whole hook is run by /bin/sh against stand-in
`ray`, `python3` and `pgrep` programs that record what they were asked, so the order and the bounds are
the shell's, not a reading of the text. The kubelet counts terminationGracePeriodSeconds from the start
of the preStop hook (Kubernetes docs, Pod Lifecycle, "Termination of Pods").
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from click.core import ParameterSource
from helpers import RAY_SERVICE

from llm_pd_eks import serve_limits
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.ray_service import ray_service_spec
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun


def worker_pods(run: ProgramRun) -> dict[str, dict]:
    groups = run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return {g["groupName"]: g["template"]["spec"] for g in groups}


def hook(pod: dict) -> str:
    shell, flag, script = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    return script


def ray_lines(script: str) -> dict[str, list[str]]:
    """The `ray <command>` invocations of the script, by command, as argv (the node id variable kept)."""
    found = {}
    for line in script.splitlines():
        words = shlex.split(line.strip().removeprefix('if [ -n "$NODE_ID" ] && ').removesuffix("; then"))
        if words[:1] == ["ray"]:
            found[words[1]] = words[2:]
    return found


def test_workers_drain_with_rays_own_drain_node_then_stop_within_the_pod_grace(run: ProgramRun) -> None:
    from ray.scripts.scripts import drain_node, stop

    for role, pod in worker_pods(run).items():
        lines = ray_lines(hook(pod))
        assert list(lines) == ["drain-node", "stop"], role
        drain = drain_node.make_context("drain-node", list(lines["drain-node"])).params
        stopping = stop.make_context("stop", list(lines["stop"]))
        assert drain["reason"] == "DRAIN_NODE_REASON_PREEMPTION", role  # idle termination refuses a busy node
        assert drain["node_id"] == "$NODE_ID", role
        assert stopping.params["force"] is False and stopping.get_parameter_source("grace_period") is (
            ParameterSource.COMMANDLINE
        )
        deadline = drain["deadline_remaining_seconds"]
        # the kubelet's grace covers the id lookup, the whole drain and `ray stop` with the SIGTERM after it
        budget = serve_limits.NODE_ID_LOOKUP_S + deadline + 2 * stopping.params["grace_period"]
        assert pod["terminationGracePeriodSeconds"] >= budget, role


def test_the_drain_lasts_at_least_serves_graceful_replica_shutdown_and_the_stop_too(run: ProgramRun) -> None:
    from ray.scripts.scripts import drain_node, stop
    from ray.serve._private.constants import DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S

    for role, pod in worker_pods(run).items():
        lines = ray_lines(hook(pod))
        deadline = drain_node.make_context("drain-node", list(lines["drain-node"])).params["deadline_remaining_seconds"]
        grace = stop.make_context("stop", list(lines["stop"])).params["grace_period"]
        assert deadline > DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S and grace >= DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S, role


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_a_change_of_the_request_limits_leaves_the_worker_pods_alone(stack: str) -> None:
    # a pod template change is a new Ray cluster: the stop hook and grace do not follow maxModelLen
    config = stack_config(stack)
    serving, instance = config.serving, GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type]
    assert serving is not None
    shorter = serving.model_copy(update={"max_model_len": serving.max_model_len // 2})
    assert serve_limits.request_timeout_s(shorter) < serve_limits.request_timeout_s(serving)
    before = ray_service_spec(serving, instance, region=config.region)
    after = ray_service_spec(shorter, instance, region=config.region)
    assert before["rayClusterConfig"] == after["rayClusterConfig"]  # only serveConfigV2 differs
    assert before["serveConfigV2"] != after["serveConfigV2"]


def _stand_ins(folder: Path, node_id: str, drain_rc: int, replicas_for: int) -> Path:
    """`python3` printing a node id, `ray` logging its argv and answering `drain-node` with drain_rc,
    `pgrep` finding a replica for its first `replicas_for` calls, `sleep` returning at once."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    log = folder / "log"
    scripts = {
        "python3": f"#!/bin/sh\necho 'a log line'\necho {node_id}\n",
        "ray": f'#!/bin/sh\necho "ray $*" >> {log}\n[ "$1" = drain-node ] && exit {drain_rc}\nexit 0\n',
        "pgrep": (
            f"#!/bin/sh\nn=$(cat {folder}/pgrep 2>/dev/null || echo 0)\necho $((n + 1)) > {folder}/pgrep\n"
            f'echo "pgrep $*" >> {log}\n[ $n -lt {replicas_for} ] && exit 0\nexit 1\n'
        ),
        "sleep": "#!/bin/sh\nexit 0\n",
        "timeout": '#!/bin/sh\nshift\nexec "$@"\n',
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _run_hook(tmp_path: Path, drain_rc: int, replicas_for: int) -> list[str]:
    bin_dir = _stand_ins(tmp_path, "0a1b2c", drain_rc, replicas_for)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(serve_limits.pre_stop_command(), env=env, check=True, timeout=60)
    return (tmp_path / "log").read_text().splitlines()


def test_the_hook_drains_its_own_node_waits_for_the_replicas_to_leave_then_stops_ray(tmp_path: Path) -> None:
    log = _run_hook(tmp_path, drain_rc=0, replicas_for=3)
    assert log[0].startswith("ray drain-node --node-id 0a1b2c --reason DRAIN_NODE_REASON_PREEMPTION")
    # three polls still find a replica, the fourth finds none, then Ray stops
    assert [line.split()[0] for line in log[1:]] == ["pgrep"] * 4 + ["ray"]
    assert log[-1] == f"ray stop --grace-period {serve_limits.RAY_STOP_GRACE_S}"


def test_a_refused_drain_still_stops_ray_without_waiting(tmp_path: Path) -> None:
    log = _run_hook(tmp_path, drain_rc=1, replicas_for=1000)
    assert [line.split()[1] for line in log] == ["drain-node", "stop"]


def test_the_wait_ends_at_the_deadline_when_replicas_never_leave(tmp_path: Path) -> None:
    log = _run_hook(tmp_path, drain_rc=0, replicas_for=10**6)
    polls = sum(1 for line in log if line.startswith("pgrep"))
    assert polls == serve_limits.DRAIN_DEADLINE_S // 2  # one poll every two (stand-in) seconds
    assert log[-1].startswith("ray stop")
