"""The fabric, as the running worker sees it: NIXL's LIBFABRIC plugin mapped, `FI_PROVIDER` in its
processes, the EFA device's byte counters moving (the module docstring of checks.py says what each
relies on)."""

from __future__ import annotations

from typing import Any

from llm_pd_eks.serving_names import NAMESPACE
from llm_pd_eks_tools.core.cli import one_line

from .kube import BadReply, HttpError, KubeClient, Unreachable
from .results import Check, Context, Expected, FabricProbe, Status


def expected_fi_provider() -> str:
    """What the worker pods are given (llm_pd_eks/ray_worker_pod.py EFA_ENV; imported when a check runs)."""
    from llm_pd_eks.ray_worker_pod import EFA_ENV

    return EFA_ENV["FI_PROVIDER"]


NIXL_LIBFABRIC_PLUGIN = "libplugin_LIBFABRIC.so"  # NIXL's plugin file name for the LIBFABRIC backend
# EFA port counters that count bytes (EFA_DEFINE_PORT_STATS; rdma_write_* on devices with RDMA write).
EFA_BYTE_COUNTERS = (
    "tx_bytes",
    "rx_bytes",
    "send_bytes",
    "recv_bytes",
    "rdma_read_bytes",
    "rdma_read_resp_bytes",
    "rdma_write_bytes",
    "rdma_write_recv_bytes",
)
# Run in the worker's Ray container (`sh -c`): one line per fact, nothing else. Only FI_* variables are
# printed from a process's environment (never its secrets).
FABRIC_PROBE = f"""\
for d in /proc/[0-9]*; do
  grep -qF '{NIXL_LIBFABRIC_PLUGIN}' "$d/maps" 2>/dev/null || continue
  pid=${{d##*/}}
  echo "proc $pid $(tr '\\000' ' ' < "$d/cmdline" 2>/dev/null | cut -c1-120)"
  tr '\\000' '\\n' < "$d/environ" 2>/dev/null | grep '^FI_' | sed "s/^/env $pid /"
done
for f in /sys/class/infiniband/*/ports/*/hw_counters/*; do
  [ -f "$f" ] || continue
  case "${{f##*/}}" in {"|".join(EFA_BYTE_COUNTERS)}) echo "counter $f $(cat "$f")";; esac
done
"""


# --- the fabric, as the running worker sees it (pod exec) ----------------------------------------


def ray_container(pod: dict[str, Any]) -> str:
    """The Ray container's name: KubeRay's RayContainerIndex (0) in the pod's containers."""
    containers = pod.get("spec", {}).get("containers") or []
    if not containers or not isinstance(containers[0], dict) or not containers[0].get("name"):
        raise BadReply(f"pod {pod['metadata']['name']} lists no containers")
    return str(containers[0]["name"])


def probe_fabric(client: KubeClient, pod: dict[str, Any]) -> FabricProbe:
    name = pod["metadata"]["name"]
    return FabricProbe.parse(client.exec_output(NAMESPACE, name, ray_container(pod), ["sh", "-c", FABRIC_PROBE]))


def check_nixl_plugin(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    """A process in each worker pod has NIXL's LIBFABRIC plugin loaded (and the counters before the request)."""
    pods = ctx.worker_pods()
    if not pods:  # a check over nothing is not a pass
        return Check("nixl-plugin", Status.UNVERIFIED, "no Running prefill/decode pod to look into")
    missing, data = [], {}
    for _role, pod in pods:
        name = pod["metadata"]["name"]
        try:
            ctx.probes[name] = probe = probe_fabric(client, pod)
        except (HttpError, Unreachable, BadReply) as exc:
            ctx.probe_errors[name] = str(exc)
            continue
        data[name] = sorted(probe.processes)
        if not probe.processes:
            missing.append(name)
    if missing:
        return Check(
            "nixl-plugin",
            Status.FAIL,
            f"no process in {', '.join(missing)} has NIXL's {NIXL_LIBFABRIC_PLUGIN} loaded: the KV "
            "connector is not on LIBFABRIC (plugin missing from the image, or it failed to load)",
            data,
        )
    if ctx.probe_errors:
        return Check(
            "nixl-plugin",
            Status.UNVERIFIED,
            "could not exec into " + "; ".join(f"{k}: {v}" for k, v in ctx.probe_errors.items()),
            data,
        )
    return Check(
        "nixl-plugin",
        Status.PASS,
        f"{NIXL_LIBFABRIC_PLUGIN} loaded in {sum(len(v) for v in data.values())} process(es) on {len(data)} pod(s)",
        data,
    )


def check_fi_provider(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    """FI_PROVIDER in the environment of the processes that loaded the plugin, as they run."""
    if not ctx.probes:
        why = "; ".join(f"{k}: {v}" for k, v in ctx.probe_errors.items()) or "no worker pod was probed"
        return Check("fi-provider", Status.UNVERIFIED, f"nothing to read: {why}")
    wrong, seen = [], {}
    for name, probe in ctx.probes.items():
        for pid in probe.processes:
            value = probe.env.get(pid, {}).get("FI_PROVIDER")
            seen[f"{name}/{pid}"] = value
            if value != expected_fi_provider():
                wrong.append(
                    f"{name} pid {pid} ({one_line(probe.processes[pid], 60)}) runs with "
                    + (f"FI_PROVIDER={value}" if value is not None else "no FI_PROVIDER")
                )
    if wrong:
        return Check(
            "fi-provider",
            Status.FAIL,
            f"{'; '.join(wrong)}; libfabric must use {expected_fi_provider()!r} (any other provider, or "
            "its own choice, can leave EFA)",
            seen,
        )
    if not seen:
        return Check("fi-provider", Status.UNVERIFIED, "no process loaded NIXL's LIBFABRIC plugin to read", seen)
    return Check(
        "fi-provider", Status.PASS, f"FI_PROVIDER={expected_fi_provider()} in all {len(seen)} NIXL process(es)", seen
    )


def check_efa_bytes(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    """The EFA devices of every prefill and decode pod counted bytes during the test request."""
    if ctx.completion_seconds is None:
        return Check("efa-bytes", Status.UNVERIFIED, "no test request was answered to measure")
    if not ctx.probes:
        return Check("efa-bytes", Status.UNVERIFIED, "no counters were read before the test request")
    moved, still, blind, errors = {}, [], [], []
    for role, pod in ctx.worker_pods():
        name = pod["metadata"]["name"]
        before = ctx.probes.get(name)
        if before is None:
            continue
        if not before.counters:
            blind.append(name)
            continue
        try:
            after = probe_fabric(client, pod)
        except (HttpError, Unreachable, BadReply) as exc:
            errors.append(f"{name}: {exc}")
            continue
        moved[name] = after.bytes_moved_since(before)
        if moved[name] <= 0:
            still.append(f"{role} pod {name}")
    if still:
        return Check(
            "efa-bytes",
            Status.FAIL,
            f"no bytes crossed the EFA devices of {', '.join(still)} during the test request: "
            "the KV cache did not travel over EFA",
            {"bytes": moved},
        )
    if blind or errors or not moved:
        why = ([f"no EFA hw_counters visible in {', '.join(blind)}"] if blind else []) + errors
        return Check("efa-bytes", Status.UNVERIFIED, "; ".join(why) or "no pod to measure", {"bytes": moved})
    return Check(
        "efa-bytes",
        Status.PASS,
        "EFA devices counted "
        + ", ".join(f"{n} ~{b / 2**20:.1f} MiB" for n, b in moved.items())
        + " during the test request",
        {"bytes": moved},
    )
