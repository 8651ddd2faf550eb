"""The engines' TCPStore ports, held in a pod that holds several replicas (llm_pd_eks/engine_ports.py).

The window is the released vLLM's own scan (read from the wheel into tests/data/vllm/ by
gen_vllm_facts); the container's script is run here on a free window and must hold every port of it;
the stacks get the container exactly where a worker pod holds more than one replica.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

from helpers import DATA, RAY_SERVICE, bindable, free_port_window

from llm_pd_eks import engine_ports
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.versions import DLC_VLLM_VERSION
from llm_pd_eks_sizing.realrun import gpu_main
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun

SCRIPT_START_S = 30  # a Python start and 4 binds, on a loaded 2-core machine


def test_the_window_is_the_released_vllms_tcpstore_scan_and_the_real_runs() -> None:
    scan = json.loads((DATA / "vllm" / f"engine-args-{DLC_VLLM_VERSION}.json").read_text())["tcpstore_scan"]
    assert engine_ports.TCPSTORE_WINDOW == range(scan["first_port"], scan["first_port"] + scan["window"])
    assert (
        gpu_main.TCPSTORE_WINDOW == engine_ports.TCPSTORE_WINDOW
    )  # the GPU run's copy (it imports nothing of the program)
    assert scan["first_port"] < 1024  # a port only root may bind where unprivileged ports start at 1024


def test_the_containers_script_holds_every_port_of_its_window_until_it_is_stopped() -> None:
    window = free_port_window(4)  # away from the real window, which only root may bind
    proc = subprocess.Popen([sys.executable, "-c", engine_ports.hold_script(window)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], SCRIPT_START_S)
        assert ready, f"the script said nothing in {SCRIPT_START_S} s"
        line = proc.stdout.readline()  # printed once every bind was tried
        assert line.startswith("holding 4 ")
        assert not any(bindable(p) for p in window)  # vLLM's bind-and-close finds each one taken
        assert proc.poll() is None  # and it stays, for the pod's life
    finally:
        proc.kill()
        proc.wait(timeout=SCRIPT_START_S)
    assert all(bindable(p) for p in window)


def worker_groups(run: ProgramRun) -> dict[str, dict]:
    groups = run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return {g["groupName"]: g for g in groups}


def test_a_worker_pod_gets_the_container_exactly_where_it_holds_more_than_one_replica(run: ProgramRun) -> None:
    config = stack_config(run.stack)
    assert config.serving is not None
    gpus = GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type].gpus
    seen = set()
    for role, group in worker_groups(run).items():
        per_pod = config.serving.groups()[role].replicas_per_node(gpus)
        seen.add(per_pod > 1)
        containers = group["template"]["spec"]["containers"]
        assert containers[0]["name"] == "ray-worker"  # KubeRay takes the first container as Ray's
        beside = [c for c in containers if c["name"] == engine_ports.CONTAINER_NAME]
        assert len(beside) == (1 if per_pod > 1 else 0), (role, per_pod)
        for c in beside:
            assert c["image"] == containers[0]["image"]  # the serving image, already on the node
            assert c["resources"]["requests"] == c["resources"]["limits"]  # the pod stays Guaranteed
            assert c["command"][:2] == ["python3", "-c"]
            assert (
                f"range({engine_ports.TCPSTORE_WINDOW.start}, {engine_ports.TCPSTORE_WINDOW.stop})" in c["command"][2]
            )
    assert seen == {run.stack == "dev"}  # dev's TP-1 replicas share a p4d pod; staging and prod fill one a pod


def test_vllms_own_port_choice_as_root_was_100_alone_and_the_kernels_beside_the_container() -> None:
    """The saved run on an H100 machine as root: vLLM 0.26.0's RayExecutorV2._select_tcpstore_port gave
    port 100 every time (so engines starting together collide), and a kernel-chosen port, outside the
    window, each time while this module's script held the window beside it."""
    saved = json.loads((gpu_main_data() / "tcpstore-scan.json").read_text())
    assert saved["vllm"] == DLC_VLLM_VERSION and saved["uid"] == 0
    assert saved["without_holder"] == [engine_ports.TCPSTORE_WINDOW.start] * 3
    assert saved["holder_said"] == f"holding {len(engine_ports.TCPSTORE_WINDOW)} of the engines' store ports"
    assert not set(saved["with_holder"]) & set(engine_ports.TCPSTORE_WINDOW)
    assert len(set(saved["with_holder"])) == 3


def gpu_main_data() -> Path:
    from llm_pd_eks_sizing.realrun import evidence

    return evidence.DATA / "2026-12-06T0747Z"
