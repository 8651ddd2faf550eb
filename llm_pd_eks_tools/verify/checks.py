"""The checks `make verify` runs, in order, each PASS / FAIL / UNVERIFIED with the cause named.

What each one relies on:
- Nodes: the kubelet advertises `nvidia.com/gpu` and `vpc.amazonaws.com/efa` in `status.allocatable`
  only once the NVIDIA and EFA device plugins registered; hugepages-2Mi appear there once the node
  reserved them. Zone and instance type are the well-known labels `topology.kubernetes.io/zone` and
  `node.kubernetes.io/instance-type` (set by the kubelet's cloud provider on EKS).
- RayService: KubeRay sets condition `Ready` when the Serve application is healthy; it labels pods
  `ray.io/node-type` (head/worker) and `ray.io/group` (the worker group name: prefill/decode).
- NIXL backend: NIXL's Python agent logs `Backend <NAME> was instantiated` for each backend it creates
  (ai-dynamo/nixl src/api/python/_api.py, logger "nixl" to stdout). In a Ray worker that line lands in
  the worker's `worker-*.out` file, which the Ray dashboard's log API serves (`/api/v0/logs`,
  `/api/v0/logs/file`, ray/dashboard/modules/state/state_head.py).
- KV transfer: vLLM's NIXL metrics through Ray (llm_pd_eks/metrics.py), from Prometheus's HTTP API.
- The fabric, as the running worker sees it, through the pod exec API (kube.py `exec_output`) in the
  Ray container (KubeRay puts it first: ray-operator/controllers/ray/utils/constant.go,
  `RayContainerIndex = 0`, tag v1.7.0): the processes that mapped NIXL's LIBFABRIC plugin
  (`libplugin_LIBFABRIC.so` in `/proc/<pid>/maps`: the "executable mapping" check of ai-dynamo/dynamo
  v1.3.0 recipes/glm-5-nvfp4/sglang/disagg/efa/README.md), `FI_PROVIDER` in those processes'
  `/proc/<pid>/environ`, and the EFA device's port counters in sysfs
  (`/sys/class/infiniband/<dev>/ports/<port>/hw_counters/<name>`; the names are the EFA kernel driver's
  `EFA_DEFINE_PORT_STATS`, amzn/amzn-drivers kernel/linux/efa/src/efa_verbs.c, with the RDMA-write
  counters upstream Linux added in drivers/infiniband/hw/efa/efa_verbs.c) read before and after the
  test request.
"""

from __future__ import annotations

import enum
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from llm_pd_eks import metrics as m
from llm_pd_eks.catalog import GpuInstanceType
from llm_pd_eks.config import StackConfig
from llm_pd_eks.device_plugins import EFA_CHART, NVIDIA_CHART
from llm_pd_eks.device_plugins import NAMESPACE as PLUGIN_NAMESPACE
from llm_pd_eks.efa_gpu_nodes import GPU_LABELS
from llm_pd_eks.observability import NAMESPACE as MONITORING_NAMESPACE
from llm_pd_eks.observability import PROMETHEUS_PORT_NAME, PROMETHEUS_SERVICE, RAY_GROUP_LABEL, RAY_NODE_TYPE_LABEL
from llm_pd_eks.ray_worker_pod import EFA_ENV
from llm_pd_eks.serving_names import NAMESPACE, RAY_SERVICE_NAME, ROLES, SERVE_PORT
from llm_pd_eks_tools.cli import one_line
from llm_pd_eks_tools.sizing import kv_rank_floor_gbps

from .kube import BadReply, HttpError, KubeClient, Unreachable

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
HUGEPAGES_RESOURCE = "hugepages-2Mi"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
HEAD_SERVICE = f"{RAY_SERVICE_NAME}-head-svc"  # KubeRay: <RayService name>-head-svc, port "dashboard"
NIXL_BACKEND_LINE = re.compile(r"NIXL\s+\w+\s+\S+\s+Backend (\w+) was instantiated")
EXPECTED_BACKEND = "LIBFABRIC"
NIXL_LOG_GLOB = "worker-*.out"
NIXL_LOG_LINES = "100000"
# ~3,000 words, some 4,000 tokens: enough KV blocks that the transfer is measurable.
LONG_PROMPT_WORDS = 3000
COMPLETION_SECONDS = 180.0  # one request may queue behind a cold engine; still bounded by the total deadline
EXPECTED_FI_PROVIDER = EFA_ENV["FI_PROVIDER"]  # what the worker pods are given (llm_pd_eks/ray_worker_pod.py)
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


class Status(enum.StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    UNVERIFIED = "UNVERIFIED"


@dataclass
class Check:
    name: str
    status: Status
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Expected:
    """What the stack config and the GPU catalog say the cluster must look like."""

    gpu_nodes: int
    availability_zone: str
    instance: GpuInstanceType
    hugepages_mib: Optional[int]
    model_id: Optional[str]
    endpoint_service: Optional[str]  # KubeRay's serve Service (`spec.serveService.metadata.name`)
    floor_gbps: float

    @classmethod
    def from_config(cls, config: StackConfig, instance: GpuInstanceType) -> "Expected":
        return cls(
            gpu_nodes=config.gpu_nodes.min_size,  # at least: Cluster Autoscaler owns the count above it
            availability_zone=config.gpu_nodes.availability_zone,
            instance=instance,
            hugepages_mib=catalog_hugepages_mib(instance),
            model_id=config.serving.model_id if config.serving else None,
            endpoint_service=config.serving.endpoint_name if config.serving else None,
            # per rank, from the one KV-transfer model (llm_pd_eks_tools/sizing/: kv_band)
            floor_gbps=kv_rank_floor_gbps(instance, config.observability.kv_throughput_floor_fraction),
        )


def catalog_hugepages_mib(instance: GpuInstanceType) -> Optional[int]:
    """2 MiB hugepages the catalog says an EFA GPU node reserves (`efa_hugepages_2mi_mib`).

    Read by name so this check starts biting the moment the catalog carries the figure.
    """
    value = getattr(instance, "efa_hugepages_2mi_mib", None)
    return int(value) if value is not None else None


@dataclass
class Context:
    """What earlier checks found that later ones use."""

    pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # role -> worker pods
    completion_seconds: Optional[float] = None
    probes: dict[str, "FabricProbe"] = field(default_factory=dict)  # pod name -> before the test request
    probe_errors: dict[str, str] = field(default_factory=dict)  # pod name -> why it could not be probed

    def worker_pods(self) -> list[tuple[str, dict[str, Any]]]:
        return [(role, pod) for role in ROLES for pod in self.pods.get(role, [])]


def quantity_mib(value: str) -> float:
    """A Kubernetes memory quantity in MiB (binary and decimal suffixes)."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?|k)?", value.strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    return float(match[1]) * units.get(match[2] or "", 1) / 2**20


# --- cluster ------------------------------------------------------------------------------------


def check_nodes(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    selector = ",".join(f"{k}={v}" for k, v in GPU_LABELS.items())
    nodes = client.get_items("/api/v1/nodes", labelSelector=selector)
    problems, rows = [], []
    ready = 0
    for node in nodes:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels", {})
        alloc = node.get("status", {}).get("allocatable", {})
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        ready += conditions.get("Ready") == "True"
        row = {
            "node": name,
            "zone": labels.get(ZONE_LABEL),
            "type": labels.get(INSTANCE_TYPE_LABEL),
            "gpus": alloc.get(GPU_RESOURCE),
            "efa": alloc.get(EFA_RESOURCE),
            "hugepages": alloc.get(HUGEPAGES_RESOURCE),
        }
        rows.append(row)
        if conditions.get("Ready") != "True":
            problems.append(f"{name} is not Ready")
        if row["zone"] != exp.availability_zone:
            problems.append(f"{name} is in {row['zone']}, not the GPU AZ {exp.availability_zone}")
        if row["type"] != exp.instance.name:
            problems.append(f"{name} is a {row['type']}, not {exp.instance.name}")
        if str(row["gpus"]) != str(exp.instance.gpus):
            problems.append(f"{name} offers {row['gpus'] or 0} GPU(s), the catalog says {exp.instance.gpus}")
        if str(row["efa"]) != str(exp.instance.efa_interfaces):
            problems.append(
                f"{name} offers {row['efa'] or 0} EFA device(s), the catalog says {exp.instance.efa_interfaces}"
            )
        if exp.hugepages_mib is not None and quantity_mib(str(row["hugepages"] or "0")) < exp.hugepages_mib:
            problems.append(f"{name} has {row['hugepages'] or 0} hugepages-2Mi, the catalog says {exp.hugepages_mib}Mi")
    if ready < exp.gpu_nodes:
        problems.insert(0, f"{ready} GPU node(s) Ready, the stack expects {exp.gpu_nodes}")
    if problems:
        return Check("gpu-nodes", Status.FAIL, "; ".join(problems), {"nodes": rows})
    detail = (
        f"{ready} × {exp.instance.name} in {exp.availability_zone}: {exp.instance.gpus} GPU(s), "
        f"{exp.instance.efa_interfaces} EFA device(s) each"
    )
    if exp.hugepages_mib is None:
        detail += " (hugepages: no catalog figure to check)"
    return Check("gpu-nodes", Status.PASS, detail, {"nodes": rows})


def check_device_plugins(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    sets = client.get_items(f"/apis/apps/v1/namespaces/{PLUGIN_NAMESPACE}/daemonsets")
    problems, found = [], {}
    for chart in (NVIDIA_CHART.name, EFA_CHART.name):
        matching = [d for d in sets if d["metadata"]["name"].startswith(chart)]
        if not matching:
            problems.append(f"no {chart} DaemonSet in {PLUGIN_NAMESPACE}")
            continue
        status = matching[0].get("status", {})
        desired, ready = status.get("desiredNumberScheduled", 0), status.get("numberReady", 0)
        found[chart] = f"{ready}/{desired}"
        if desired < exp.gpu_nodes or ready < desired:
            problems.append(f"{chart} ready on {ready} of {desired} node(s), {exp.gpu_nodes} GPU node(s) expected")
    if problems:
        return Check("device-plugins", Status.FAIL, "; ".join(problems), found)
    return Check("device-plugins", Status.PASS, ", ".join(f"{k} {v}" for k, v in found.items()), found)


def check_ray_service(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    try:
        rs = client.get_object(f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayservices/{RAY_SERVICE_NAME}")
    except HttpError as exc:
        if exc.status == 404:
            return Check("rayservice-ready", Status.FAIL, f"no RayService {NAMESPACE}/{RAY_SERVICE_NAME}")
        raise
    conditions = {c["type"]: c for c in _ray_service_conditions(rs)}
    ready = conditions.get("Ready", {})
    if ready.get("status") != "True":
        why = ready.get("message") or ready.get("reason") or "no Ready condition yet"
        return Check("rayservice-ready", Status.FAIL, f"RayService not Ready: {why}")
    return Check("rayservice-ready", Status.PASS, f"{NAMESPACE}/{RAY_SERVICE_NAME} Ready")


def _ray_service_conditions(rs: dict[str, Any]) -> list[dict[str, Any]]:
    """The RayService's `status.conditions` (metav1.Condition: `type` and `status` strings); a reply in
    any other shape is a BadReply, so the check is UNVERIFIED, never a FAIL about a RayService it never saw."""
    path = f"RayService {NAMESPACE}/{RAY_SERVICE_NAME}"
    if rs.get("kind") != "RayService":
        raise BadReply(f"{path}: the reply is a {one_line(str(rs.get('kind')), 40)!r}, not a RayService")
    status = rs.get("status", {})
    conditions = status.get("conditions", []) if isinstance(status, dict) else None
    if not isinstance(conditions, list) or not all(
        isinstance(c, dict) and isinstance(c.get("type"), str) and isinstance(c.get("status"), str) for c in conditions
    ):
        raise BadReply(f"{path}: status.conditions is not a list of conditions with `type` and `status` strings")
    return conditions


def check_pd_placement(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    pods = client.get_items(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"{RAY_NODE_TYPE_LABEL}=worker")
    for role in ROLES:
        ctx.pods[role] = [
            p
            for p in pods
            if p["metadata"].get("labels", {}).get(RAY_GROUP_LABEL) == role
            and p.get("status", {}).get("phase") == "Running"
        ]
    nodes = {role: {p["spec"].get("nodeName") for p in ctx.pods[role]} for role in ROLES}
    missing = [role for role in ROLES if not ctx.pods[role]]
    if missing:
        return Check("pd-separate-nodes", Status.FAIL, f"no Running {' / '.join(missing)} worker pod")
    shared = nodes["prefill"] & nodes["decode"]
    data = {role: sorted(n for n in names if n) for role, names in nodes.items()}
    if shared:
        return Check(
            "pd-separate-nodes",
            Status.FAIL,
            f"prefill and decode share node(s) {', '.join(sorted(shared))}: their KV never crosses EFA",
            data,
        )
    return Check(
        "pd-separate-nodes",
        Status.PASS,
        f"prefill on {', '.join(data['prefill'])}; decode on {', '.join(data['decode'])}",
        data,
    )


# --- the endpoint ------------------------------------------------------------------------------


def long_prompt() -> str:
    words = (
        "The prefill phase reads every token of this prompt once; the decode phase then receives the KV "
        "cache over the network and continues. "
    ).split()
    return " ".join(words[i % len(words)] for i in range(LONG_PROMPT_WORDS)) + "\nSummarise the text in one sentence."


def endpoint_service(client: KubeClient, name: str) -> str:
    """The endpoint: the serve Service KubeRay creates from `spec.serveService` under the stack's name."""
    names = {s["metadata"]["name"] for s in client.get_items(f"/api/v1/namespaces/{NAMESPACE}/services")}
    if name not in names:
        raise LookupError(
            f"the endpoint Service {name} (serving.endpointName) does not exist in {NAMESPACE}; "
            "KubeRay creates it once the RayService's serve application is ready"
        )
    return name


def check_chat_completion(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    if exp.model_id is None or exp.endpoint_service is None:
        return Check("chat-completion", Status.UNVERIFIED, "the stack sets no `serving`: nothing to ask")
    try:
        service = endpoint_service(client, exp.endpoint_service)
    except LookupError as exc:
        return Check("chat-completion", Status.FAIL, str(exc))
    path = KubeClient.service_proxy(NAMESPACE, service, str(SERVE_PORT), "/v1/chat/completions")
    payload = {
        "model": exp.model_id,
        "max_tokens": 16,
        "temperature": 0,
        "messages": [{"role": "user", "content": long_prompt()}],
    }
    started = time.monotonic()
    try:
        reply = client.post_json(path, payload, cap=COMPLETION_SECONDS)
    except HttpError as exc:
        return Check("chat-completion", Status.FAIL, f"the endpoint answered {exc}")
    ctx.completion_seconds = round(time.monotonic() - started, 3)
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return Check("chat-completion", Status.FAIL, "the reply has no choices[0].message.content")
    if not content:
        return Check("chat-completion", Status.FAIL, "the reply's message is empty")
    usage = reply.get("usage") or {}
    return Check(
        "chat-completion",
        Status.PASS,
        f"{usage.get('prompt_tokens', '?')} prompt tokens answered in {ctx.completion_seconds}s via {service}",
        {"seconds": ctx.completion_seconds, "usage": usage, "service": service},
    )


# --- NIXL backend (logs) -------------------------------------------------------------------------


def nixl_backends(client: KubeClient, pod_ip: str) -> list[str]:
    """Backends NIXL instantiated on the Ray node at `pod_ip`, from the workers' stdout logs."""
    api = KubeClient.service_proxy(NAMESPACE, HEAD_SERVICE, "dashboard", "/api/v0/logs")
    listing = client.get_object(api, node_ip=pod_ip, glob=NIXL_LOG_GLOB)
    files = [str(f) for files in (listing.get("data", {}).get("result") or {}).values() for f in files]
    found: list[str] = []
    for name in files:
        text = client.get_text(api + "/file", node_ip=pod_ip, filename=name, lines=NIXL_LOG_LINES)
        found.extend(NIXL_BACKEND_LINE.findall(text))
    return found


def check_nixl_backend(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    if not ctx.pods:
        return Check("nixl-backend", Status.UNVERIFIED, "no prefill/decode pods found to read logs from")
    per_pod, problems, unknown = {}, [], []
    for role in ROLES:
        for pod in ctx.pods.get(role, []):
            name, ip = pod["metadata"]["name"], pod.get("status", {}).get("podIP")
            backends = sorted(set(nixl_backends(client, ip))) if ip else []
            per_pod[name] = backends
            if not backends:
                unknown.append(name)
            elif backends != [EXPECTED_BACKEND]:
                problems.append(
                    f"{role} pod {name}: NIXL backend {', '.join(backends)}, not {EXPECTED_BACKEND} "
                    "(UCX falls back to TCP: KV transfers leave EFA)"
                )
    if problems:
        return Check("nixl-backend", Status.FAIL, "; ".join(problems), per_pod)
    if not per_pod:  # a check over nothing is not a pass
        return Check("nixl-backend", Status.UNVERIFIED, "no Running prefill/decode pod to read NIXL's logs from")
    if unknown:
        return Check(
            "nixl-backend",
            Status.UNVERIFIED,
            f"no 'Backend ... was instantiated' line in the Ray worker logs of {', '.join(unknown)}",
            per_pod,
        )
    return Check("nixl-backend", Status.PASS, f"{EXPECTED_BACKEND} on {len(per_pod)} pod(s)", per_pod)


# --- the fabric, as the running worker sees it (pod exec) ----------------------------------------


@dataclass
class FabricProbe:
    """What FABRIC_PROBE printed in one pod."""

    processes: dict[str, str] = field(default_factory=dict)  # pid -> command line, for each plugin user
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # pid -> FI_* variables
    counters: dict[str, int] = field(default_factory=dict)  # sysfs path -> value

    @classmethod
    def parse(cls, text: str) -> "FabricProbe":
        probe = cls()
        for line in text.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "proc":
                pid, _, command = rest.partition(" ")
                probe.processes[pid] = command.strip()
            elif kind == "env":
                pid, _, assignment = rest.partition(" ")
                name, _, value = assignment.partition("=")
                probe.env.setdefault(pid, {})[name] = value
            elif kind == "counter":
                path, _, value = rest.rpartition(" ")
                if value.strip().isdigit():
                    probe.counters[path] = int(value)
        return probe

    def bytes_moved_since(self, before: "FabricProbe") -> int:
        """Bytes the pod's EFA devices counted since `before` (a counter that went down: reset, not counted)."""
        return sum(
            max(0, value - before.counters[path]) for path, value in self.counters.items() if path in before.counters
        )


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
            if value != EXPECTED_FI_PROVIDER:
                wrong.append(
                    f"{name} pid {pid} ({one_line(probe.processes[pid], 60)}) runs with "
                    + (f"FI_PROVIDER={value}" if value is not None else "no FI_PROVIDER")
                )
    if wrong:
        return Check(
            "fi-provider",
            Status.FAIL,
            f"{'; '.join(wrong)}; libfabric must use {EXPECTED_FI_PROVIDER!r} (any other provider, or "
            "its own choice, can leave EFA)",
            seen,
        )
    if not seen:
        return Check("fi-provider", Status.UNVERIFIED, "no process loaded NIXL's LIBFABRIC plugin to read", seen)
    return Check(
        "fi-provider", Status.PASS, f"FI_PROVIDER={EXPECTED_FI_PROVIDER} in all {len(seen)} NIXL process(es)", seen
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


# --- KV transfer (Prometheus) -------------------------------------------------------------------


def prom_query(client: KubeClient, expr: str) -> Optional[float]:
    """One instant query through the API server's proxy to Prometheus; None when the result is empty."""
    path = KubeClient.service_proxy(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT_NAME, "/api/v1/query")
    reply = client.get_object(path, query=expr)
    if reply.get("status") != "success":
        raise HttpError(200, path, str(reply.get("error")))
    result = reply["data"]["result"]
    if not result:
        return None
    return float(result[0]["value"][1])


KV_COUNT = f'sum({m.NIXL_BYTES}_count{{{m.PHASE_LABEL}="decode"}})'
KV_BYTES = f'sum({m.NIXL_BYTES}_sum{{{m.PHASE_LABEL}="decode"}})'
KV_FAILED = f"sum({m.NIXL_FAILED_TRANSFERS})"
# Over the service's lifetime: total bytes over total transfer seconds (vLLM's own "Throughput").
KV_GBPS = f"sum({m.NIXL_BYTES}_sum) * 8 / 1e9 / sum({m.NIXL_XFER_TIME}_sum)"


def check_kv_transfer(
    client: KubeClient, exp: Expected, ctx: Context, wait_seconds: float = 90.0, poll_seconds: float = 5.0
) -> list[Check]:
    """KV bytes > 0 (waiting for the scrape that follows our request), failures = 0, throughput ≥ floor."""
    end = time.monotonic() + min(wait_seconds, client.deadline.left())
    poll_seconds = min(poll_seconds, max(0.5, wait_seconds / 10))
    count = prom_query(client, KV_COUNT)
    while not count and time.monotonic() < end:
        time.sleep(min(poll_seconds, max(0.0, end - time.monotonic())))
        count = prom_query(client, KV_COUNT)
    moved = prom_query(client, KV_BYTES) or 0.0
    checks = []
    if not count:
        checks.append(
            Check(
                "kv-bytes", Status.FAIL, "decode received no KV blocks over NIXL: prefill/decode are not disaggregating"
            )
        )
    else:
        checks.append(
            Check(
                "kv-bytes",
                Status.PASS,
                f"{count:.0f} transfer(s), ~{moved / 2**20:.1f} MiB",
                {"transfers": count, "bytes": moved},
            )
        )
    failed = prom_query(client, KV_FAILED) or 0.0
    checks.append(
        Check("kv-failures", Status.FAIL, f"{failed:.0f} failed NIXL KV transfer(s)", {"failed": failed})
        if failed > 0
        else Check("kv-failures", Status.PASS, "no failed NIXL KV transfers", {"failed": failed})
    )
    gbps = prom_query(client, KV_GBPS) if count else None
    if gbps is None or gbps != gbps:  # empty or NaN: nothing transferred
        checks.append(
            Check(
                "kv-throughput",
                Status.UNVERIFIED if count else Status.FAIL,
                "no KV transfer to measure",
                {"floor_gbps": exp.floor_gbps},
            )
        )
    elif gbps < exp.floor_gbps:
        checks.append(
            Check(
                "kv-throughput",
                Status.FAIL,
                f"{gbps:.2f} Gbit/s per transfer, below the {exp.floor_gbps} Gbit/s floor of "
                f"{exp.instance.name}: NIXL is not on EFA",
                {"gbps": gbps, "floor_gbps": exp.floor_gbps},
            )
        )
    else:
        checks.append(
            Check(
                "kv-throughput",
                Status.PASS,
                f"{gbps:.2f} Gbit/s per transfer ≥ floor {exp.floor_gbps} Gbit/s ({exp.instance.name})",
                {"gbps": gbps, "floor_gbps": exp.floor_gbps},
            )
        )
    return checks


ClusterCheck = Callable[[KubeClient, Expected, Context], Check]
CLUSTER_CHECKS: tuple[tuple[str, ClusterCheck], ...] = (
    ("gpu-nodes", check_nodes),
    ("device-plugins", check_device_plugins),
    ("rayservice-ready", check_ray_service),
    ("pd-separate-nodes", check_pd_placement),
    ("nixl-plugin", check_nixl_plugin),  # also reads the EFA counters before the test request
    ("fi-provider", check_fi_provider),
    ("chat-completion", check_chat_completion),
    ("efa-bytes", check_efa_bytes),
    ("nixl-backend", check_nixl_backend),
)
KV_CHECK_NAMES = ("kv-bytes", "kv-failures", "kv-throughput")
ALL_CHECK_NAMES = ("api-server", *(name for name, _ in CLUSTER_CHECKS), *KV_CHECK_NAMES)


def run_checks(client: KubeClient, exp: Expected, kv_wait_seconds: float = 90.0) -> list[Check]:
    """Every check in order; an unreachable API server stops the run (the rest UNVERIFIED)."""
    ctx = Context()
    results: list[Check] = []

    def unverified_rest(reason: str) -> list[Check]:
        done = {c.name for c in results}
        return [Check(name, Status.UNVERIFIED, reason) for name in ALL_CHECK_NAMES if name not in done]

    try:
        version = client.get_object("/version")
        git_version = one_line(str(version.get("gitVersion", "?")), 60)
        results.append(Check("api-server", Status.PASS, f"Kubernetes {git_version}"))
    except BadReply as exc:  # something answers, but not a Kubernetes API server
        results.append(Check("api-server", Status.UNVERIFIED, f"not a Kubernetes API server's reply: {exc}"))
        return results + unverified_rest("the API server's replies are not the Kubernetes API's")
    except (Unreachable, TimeoutError) as exc:
        results.append(Check("api-server", Status.UNVERIFIED, f"cluster unreachable: {exc}"))
        return results + unverified_rest("cluster unreachable")
    except HttpError as exc:  # 401/403: the kubeconfig's credentials are not (or no longer) accepted
        results.append(Check("api-server", Status.UNVERIFIED, f"API server refused the request: {exc}"))
        return results + unverified_rest("API server refused the request")
    for name, check in CLUSTER_CHECKS:
        try:
            results.append(check(client, exp, ctx))
        except TimeoutError as exc:
            return results + unverified_rest(str(exc))
        except (Unreachable, HttpError, ValueError, KeyError) as exc:
            results.append(Check(name, Status.UNVERIFIED, f"could not check: {type(exc).__name__}: {exc}"))
        except (TypeError, AttributeError, IndexError) as exc:  # a reply of the wrong shape, deep inside
            results.append(
                Check(
                    name,
                    Status.UNVERIFIED,
                    f"could not check: the API server's reply is not in the "
                    f"Kubernetes API's shape ({type(exc).__name__}: {exc})",
                )
            )
    try:
        results.extend(check_kv_transfer(client, exp, ctx, wait_seconds=kv_wait_seconds))
    except TimeoutError as exc:
        return results + unverified_rest(str(exc))
    except (Unreachable, HttpError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        results.extend(
            Check(n, Status.UNVERIFIED, f"Prometheus not answering usably: {exc}")
            for n in KV_CHECK_NAMES
            if n not in {c.name for c in results}
        )
    return results
