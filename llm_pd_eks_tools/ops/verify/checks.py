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

import re
import time
from typing import Any, Callable, Optional

from llm_pd_eks import metrics as m
from llm_pd_eks.serving_names import NAMESPACE, RAY_SERVICE_NAME, ROLES, SERVE_PORT
from llm_pd_eks_tools.core.cli import one_line

from .admission import check_admission_policy
from .canary import GATE_CHECK_NAMES
from .fabric import check_efa_bytes, check_fi_provider, check_nixl_plugin
from .gate import run_gate
from .kube import BadReply, HttpError, KubeClient, Unreachable
from .results import Check, Context, Expected, FabricProbe, Status, catalog_hugepages_mib, quantity_mib

__all__ = ["Check", "Context", "Expected", "FabricProbe", "Status", "catalog_hugepages_mib", "quantity_mib"]


def program_names() -> Any:
    """The program's labels and names the checks look for, imported when a check runs: their modules
    import Pulumi's AWS and Kubernetes SDKs, which `make verify --help` or a bad argument never needs."""
    from types import SimpleNamespace

    from llm_pd_eks import device_plugins, efa_gpu_nodes, observability

    return SimpleNamespace(
        GPU_LABELS=efa_gpu_nodes.GPU_LABELS,
        PLUGIN_NAMESPACE=device_plugins.NAMESPACE,
        CHARTS=(device_plugins.NVIDIA_CHART.name, device_plugins.EFA_CHART.name),
        MONITORING_NAMESPACE=observability.NAMESPACE,
        PROMETHEUS_SERVICE=observability.PROMETHEUS_SERVICE,
        PROMETHEUS_PORT_NAME=observability.PROMETHEUS_PORT_NAME,
        RAY_GROUP_LABEL=observability.RAY_GROUP_LABEL,
        RAY_NODE_TYPE_LABEL=observability.RAY_NODE_TYPE_LABEL,
    )


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


# --- cluster ------------------------------------------------------------------------------------


def check_nodes(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    selector = ",".join(f"{k}={v}" for k, v in program_names().GPU_LABELS.items())
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
    names = program_names()
    sets = client.get_items(f"/apis/apps/v1/namespaces/{names.PLUGIN_NAMESPACE}/daemonsets")
    problems, found = [], {}
    for chart in names.CHARTS:
        matching = [d for d in sets if d["metadata"]["name"].startswith(chart)]
        if not matching:
            problems.append(f"no {chart} DaemonSet in {names.PLUGIN_NAMESPACE}")
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
    names = program_names()
    pods = client.get_items(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"{names.RAY_NODE_TYPE_LABEL}=worker")
    for role in ROLES:
        ctx.pods[role] = [
            p
            for p in pods
            if p["metadata"].get("labels", {}).get(names.RAY_GROUP_LABEL) == role
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


# --- KV transfer (Prometheus) -------------------------------------------------------------------


def prom_query(client: KubeClient, expr: str) -> Optional[float]:
    """One instant query through the API server's proxy to Prometheus; None when the result is empty."""
    names = program_names()
    path = KubeClient.service_proxy(
        names.MONITORING_NAMESPACE, names.PROMETHEUS_SERVICE, names.PROMETHEUS_PORT_NAME, "/api/v1/query"
    )
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
    ("admission-policy", check_admission_policy),  # the GPU-pod policy, and every live pod judged by its CEL
    ("nixl-plugin", check_nixl_plugin),  # also reads the EFA counters before the test request
    ("fi-provider", check_fi_provider),
    ("chat-completion", check_chat_completion),
    ("efa-bytes", check_efa_bytes),
    ("nixl-backend", check_nixl_backend),
)
KV_CHECK_NAMES = ("kv-bytes", "kv-failures", "kv-throughput")
ALL_CHECK_NAMES = ("api-server", *(name for name, _ in CLUSTER_CHECKS), *KV_CHECK_NAMES, *GATE_CHECK_NAMES)


def run_checks(
    client: KubeClient, exp: Expected, kv_wait_seconds: float = 90.0, reference_url: Optional[str] = None
) -> list[Check]:
    """Every check in order, the traffic gate last (gate.py); an unreachable API server stops the run
    (the rest UNVERIFIED)."""
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
    try:
        results.extend(
            run_gate(client, exp, ctx, results, lambda expr: prom_query(client, expr), reference_url, kv_wait_seconds)
        )
    except TimeoutError as exc:
        return results + unverified_rest(str(exc))
    except (Unreachable, HttpError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        done = {c.name for c in results}
        results.extend(
            Check(n, Status.UNVERIFIED, f"the traffic gate could not run: {exc}")
            for n in GATE_CHECK_NAMES
            if n not in done
        )
    return results
