"""The torch.distributed store ports vLLM's engines race for, held where several start in one pod.

vLLM 0.26.0's Ray executor (vllm/v1/executor/ray_executor_v2.py `RayExecutorV2._select_tcpstore_port`)
picks an engine's TCPStore port by binding and closing the first free port of a window, then listens
on it only once the worker actor is up, seconds later. For an engine that is not data parallel, as
every replica here is, the window is the same for all: VLLM_DP_MASTER_PORT's default (0) plus 100, 32
ports (read from the release wheel into tests/data/vllm/ by gen_vllm_facts). Engines that start
together in one network namespace, where the process may bind below 1024 (root), all take port 100,
and all but one fail with EADDRINUSE; Serve restarts the losers, which collide again on the next port.
Seen on one H100 with four engines starting together (docs/real-run.md, the prefix-routing arms).

A worker pod holds `gpus / tensorParallelSize` replicas (llm_pd_eks/ray_worker_pod.py), and Serve
starts the replicas one autoscaling step adds together. Where a pod can hold more than one, a small
container beside the Ray container listens on the whole window for the pod's life: each engine's scan
then finds it full and takes a port the kernel chooses (`get_open_port`), as it does where binding
below 1024 is refused. Where the sidecar may not bind either, it holds nothing and the engines cannot
collide there anyway. It runs the serving image (already on the node) with a Python one-liner.
"""

from __future__ import annotations

from typing import Any

# vLLM's TCPStore scan for a non-data-parallel engine: first port and how many it tries.
TCPSTORE_WINDOW = range(100, 132)
CONTAINER_NAME = "engine-ports"
# Requests equal to limits, as the Ray container's: the pod stays Guaranteed.
RESOURCES = {"cpu": "10m", "memory": "32Mi"}


def hold_script(ports: range) -> str:
    """Python that listens on every port of `ports` it can bind, says how many, and sleeps."""
    return (
        "import socket, time\n"
        "held = []\n"
        f"for port in range({ports.start}, {ports.stop}):\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
        "    try:\n"
        "        s.bind(('', port))\n"
        "        s.listen(1)\n"
        "        held.append(s)\n"
        "    except OSError:\n"
        "        s.close()\n"
        "print(f'holding {len(held)} of the engines\\' store ports', flush=True)\n"
        "while True:\n"
        "    time.sleep(3600)\n"
    )


def needed(replicas_per_pod: int) -> bool:
    """Engines can collide only where a pod holds more than one replica."""
    return replicas_per_pod > 1


def container(image: str) -> dict[str, Any]:
    """The container that holds TCPSTORE_WINDOW for its pod's life."""
    return {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["python3", "-c", hold_script(TCPSTORE_WINDOW)],
        "resources": {"requests": dict(RESOURCES), "limits": dict(RESOURCES)},
    }
