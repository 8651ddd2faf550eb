"""`make verify` against a fake Kubernetes API server, a fake OpenAI endpoint, a fake Ray dashboard
log API and a REAL Prometheus scraping an exporter that renders metrics with Ray's own code.

Each failure the issue names (UCX backend, zero KV bytes, failed transfers, a node missing EFA
devices, P and D on one node) and a slow, off-EFA transfer make verify fail with the cause named;
the healthy cluster passes. The stack is `dev` (its GPU type from Pulumi.dev.yaml and the catalog; two
GPU nodes in us-west-2a; the KV floor per rank from `llm_pd_eks_sizing.model.kv_rank_floor_gbps`).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest
from helpers import requires_binary
from verify_fakes import (
    Cluster,
    FakeKubeApi,
    FakeOpenAi,
    FakeRayDashboard,
    PodTree,
    Prometheus,
    RayExporter,
    admission_objects,
    gpu_worker_container,
    kubeconfig_text,
    nixl_log_line,
    reading_model,
)

from llm_pd_eks import metrics as m
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.observability import NAMESPACE as MONITORING
from llm_pd_eks.observability import PROMETHEUS_PORT_NAME, PROMETHEUS_SERVICE
from llm_pd_eks.serving_names import NAMESPACE, RAY_SERVICE_NAME, SERVE_PORT
from llm_pd_eks_sizing.model import kv_rank_floor_gbps
from llm_pd_eks_tools.core.cli import Exit, run
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.ops.verify.checks import HEAD_SERVICE, Status, quantity_mib
from llm_pd_eks_tools.ops.verify.cli import exit_code, main

ENDPOINT_SERVICE_NAME = stack_config("dev").serving.endpoint_name  # KubeRay's serve Service

INSTANCE = GPU_INSTANCE_TYPES[stack_config("dev").gpu_nodes.instance_type]
FLOOR = kv_rank_floor_gbps(INSTANCE, 0.5)  # per rank: llm_pd_eks_sizing/model/'s KV model
KV_BYTES = 448 * 2**20  # one 8k-token Qwen2.5-7B request's KV cache (the preview's figure)
EFA_SECONDS = KV_BYTES * 8 / (INSTANCE.network_gbps * 1e9)  # at the node's EFA line rate
# NIXL off EFA: UCX's software path over TCP, measured at 0.324 GB/s on 2 x H100 (ai-dynamo/nixl issue
# #1021). One ideal 10 Gbit/s TCP flow would NOT fall under the per-rank floor on p4d (half an EFA
# interface per GPU at the measured NIXL efficiency is ~9.6 Gbit/s: llm_pd_eks_sizing/model/ kv_band).
TCP_SECONDS = KV_BYTES * 8 / (0.324 * 8e9)

needs_prometheus = requires_binary("prometheus")


# --- Kubernetes objects in the API's shapes --------------------------------------------------------


def node(
    name: str, zone: str = "us-west-2a", efa: str = str(INSTANCE.efa_interfaces), gpus: str = str(INSTANCE.gpus)
) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "labels": {
                "role": "gpu",
                "vpc.amazonaws.com/efa.present": "true",
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": zone,
                "node.kubernetes.io/instance-type": INSTANCE.name,
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {
                "cpu": "48",
                "memory": "392470468Ki",
                "pods": "234",
                "nvidia.com/gpu": gpus,
                "vpc.amazonaws.com/efa": efa,
                "hugepages-2Mi": "5Gi",
            },
            "allocatable": {
                "cpu": "47810m",
                "memory": "383452612Ki",
                "pods": "234",
                "nvidia.com/gpu": gpus,
                "vpc.amazonaws.com/efa": efa,
                "hugepages-2Mi": "5Gi",
            },
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
        },
    }


def daemonset(name: str, ready: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "status": {
            "desiredNumberScheduled": 2,
            "currentNumberScheduled": 2,
            "numberReady": ready,
            "numberAvailable": ready,
            "numberMisscheduled": 0,
        },
    }


def ray_service(ready: bool = True) -> dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "NonZeroServeEndpoints" if ready else "ZeroServeEndpoints",
        "message": "" if ready else "Number of serve endpoints dropped to 0",
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "llm-pd", "namespace": NAMESPACE},
        "spec": {},
        "status": {"conditions": [condition]},
    }


def pod(name: str, group: str, node_name: str, ip: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "ray.io/node-type": "worker",
                "ray.io/group": group,
                "ray.io/is-ray-node": "yes",
                "llm-pd-eks/role": group,
            },
        },
        "spec": {"nodeName": node_name, "containers": [gpu_worker_container()]},
        "status": {"phase": "Running", "podIP": ip},
    }


# --- scenarios -------------------------------------------------------------------------------------


@dataclass
class Scenario:
    nodes: list[dict[str, Any]] = field(default_factory=lambda: [node("ip-10-10-1-10"), node("ip-10-10-1-11")])
    decode_node: str = "ip-10-10-1-11"
    backend: str = "LIBFABRIC"
    transfer_seconds: Optional[float] = EFA_SECONDS  # None: no KV bytes move
    failed: int = 0
    plugins_ready: int = 2
    ray_service: Optional[bool] = True  # None: no RayService object
    endpoint_status: int = 0  # non-zero: the OpenAI endpoint answers with this HTTP status
    nixl_logged: bool = True
    fi_provider: Optional[str] = "efa"  # the worker process's FI_PROVIDER (None: unset)
    plugin_loaded: bool = True  # the worker process mapped NIXL's libplugin_LIBFABRIC.so
    efa_moves: bool = True  # the test request's KV crosses the EFA devices (their byte counters grow)
    counters_visible: bool = True  # /sys/class/infiniband is visible in the container
    # After the first request (verify's chat completion): "pulled" KV as before, "none" (decode
    # prefills itself: no pull, no failure), "failed" (every pull fails; recompute answers anyway)
    later_kv: str = "pulled"
    answer: Callable[[str], str] = reading_model  # the endpoint's model: prompt -> answer


NIXL_PLUGIN_PATH = "/opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu/plugins/libplugin_LIBFABRIC.so"
WORKER_LIBRARIES = [
    "/usr/lib/x86_64-linux-gnu/libc.so.6",
    "/opt/amazon/efa/lib/libfabric.so.1",
    "/opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu/libnixl.so",
]


def pod_tree(root: Path, scenario: Scenario) -> PodTree:
    """A worker pod: Ray's raylet, the vLLM engine worker (NIXL inside) and a shell, as /proc shows them."""
    tree = PodTree(root)
    base_env = {"PATH": "/usr/bin:/bin", "HF_TOKEN": "hf_secretvalue_never_printed", "RAY_ADDRESS": "auto"}
    tree.process(1, ["/bin/bash", "-lc", "ray start --block"], base_env, WORKER_LIBRARIES[:1])
    tree.process(212, ["/usr/bin/python3", "-m", "ray._private.workers.default_worker"], base_env, WORKER_LIBRARIES[:1])
    worker_env = dict(base_env, FI_EFA_USE_DEVICE_RDMA="1")
    if scenario.fi_provider is not None:
        worker_env["FI_PROVIDER"] = scenario.fi_provider
    libraries = WORKER_LIBRARIES + ([NIXL_PLUGIN_PATH] if scenario.plugin_loaded else [])
    tree.process(4242, ["ray::ServeReplica:llm:LLMServer:decode"], worker_env, libraries)
    if scenario.counters_visible:
        tree.counters({"tx_bytes": 10_000_000, "rx_bytes": 9_000_000, "rdma_read_bytes": 123_456})
    return tree


@dataclass
class Env:
    kubeconfig: Path
    api: FakeKubeApi
    prometheus: Optional[Prometheus]


def _start(scenario: Scenario, tmp_path: Path, with_prometheus: bool) -> Iterator[Env]:
    exporter = RayExporter().wait() if with_prometheus else None
    trees = {name: pod_tree(tmp_path / name, scenario) for name in ("llm-pd-prefill-a", "llm-pd-decode-a")}

    served = []

    def on_request(prompt_tokens: int) -> None:
        later = scenario.later_kv if served else "pulled"
        served.append(prompt_tokens)
        if scenario.efa_moves and later == "pulled":
            for tree in trees.values():
                tree.add_bytes(KV_BYTES)
        if exporter is None:
            return
        moves = scenario.transfer_seconds is not None and later == "pulled"
        transfers = [[KV_BYTES, scenario.transfer_seconds]] if moves else []
        exporter.record(transfers=transfers, failed=scenario.failed + (later == "failed"), tokens=16)

    line = nixl_log_line(scenario.backend) + "\n" if scenario.nixl_logged else ""
    logs = {ip: {f"worker-{ip}-01000000-4242.out": "started\n" + line} for ip in ("10.10.1.20", "10.10.1.21")}
    openai, dashboard = FakeOpenAi(on_request, scenario.endpoint_status, scenario.answer), FakeRayDashboard(logs)
    prometheus = None
    if exporter is not None:
        prometheus = Prometheus(
            tmp_path,
            [
                (
                    exporter.target,
                    {m.PHASE_LABEL: "decode", "pod": "llm-pd-decode-a", m.NODE_LABEL: scenario.decode_node},
                )
            ],
        ).wait_ready()
    cluster = Cluster(
        nodes=scenario.nodes,
        daemonsets=[daemonset("nvidia-device-plugin"), daemonset("aws-efa-k8s-device-plugin", scenario.plugins_ready)],
        ray_service=None if scenario.ray_service is None else ray_service(scenario.ray_service),
        pods=[
            pod("llm-pd-prefill-a", "prefill", "ip-10-10-1-10", "10.10.1.20"),
            pod("llm-pd-decode-a", "decode", scenario.decode_node, "10.10.1.21"),
        ],
        services=[ENDPOINT_SERVICE_NAME, HEAD_SERVICE],
        upstreams={
            (NAMESPACE, ENDPOINT_SERVICE_NAME, str(SERVE_PORT)): openai.url,
            (NAMESPACE, HEAD_SERVICE, "dashboard"): dashboard.url,
        },
        pod_roots={name: tree.root for name, tree in trees.items()},
        admission=admission_objects(INSTANCE.name, stack_config("dev").admission_policy.mode),
    )
    if prometheus is not None:
        cluster.upstreams[(MONITORING, PROMETHEUS_SERVICE, PROMETHEUS_PORT_NAME)] = prometheus.url
    api = FakeKubeApi(cluster)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(api.kubeconfig())
    try:
        yield Env(kubeconfig, api, prometheus)
    finally:
        for part in (api, openai, dashboard, prometheus, exporter):
            if part is not None:
                part.close()


def verify(env: Env, capsys, *extra: str) -> tuple[int, dict[str, Any], str]:
    code = run(
        "verify",
        main,
        [
            "--stack",
            "dev",
            "--kubeconfig",
            str(env.kubeconfig),
            "--json",
            "--timeout",
            "120",
            "--kv-wait",
            "20",
            *extra,
        ],
    )
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip().startswith("{") else {}, err


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


@pytest.fixture(autouse=True)
def verify_writes_under_tmp(tmp_path, monkeypatch):
    """verify.json goes to a temporary directory: tests never write into the checkout."""
    import llm_pd_eks_tools.ops.verify.cli

    monkeypatch.setattr(llm_pd_eks_tools.ops.verify.cli, "OUT_DIR", tmp_path / "build-verify")


# --- end to end ------------------------------------------------------------------------------------


@needs_prometheus
def test_healthy_cluster_passes_every_check(tmp_path, capsys):
    env_iter = _start(Scenario(), tmp_path, with_prometheus=True)
    env = next(env_iter)
    try:
        code, report, err = verify(env, capsys)
    finally:
        env_iter.close()
    checks = by_name(report)
    assert code == Exit.OK, [c for c in report["checks"] if c["status"] != "PASS"]
    assert all(c["status"] == "PASS" for c in report["checks"]), report
    assert checks["kv-throughput"]["data"]["floor_gbps"] == FLOOR
    assert checks["kv-throughput"]["data"]["gbps"] > FLOOR
    assert "LIBFABRIC" in checks["nixl-backend"]["detail"]
    assert err == ""


@needs_prometheus
@pytest.mark.parametrize(
    "scenario, check, words",
    [
        (Scenario(transfer_seconds=None), "kv-bytes", "not disaggregating"),
        (Scenario(failed=1), "kv-failures", "1 failed NIXL KV transfer"),
        (Scenario(transfer_seconds=TCP_SECONDS), "kv-throughput", "NIXL is not on EFA"),
    ],
    ids=["zero-kv-bytes", "failed-transfers", "slow-tcp-transfers"],
)
def test_kv_failures_fail_verify_naming_the_cause(scenario, check, words, tmp_path, capsys):
    env_iter = _start(scenario, tmp_path, with_prometheus=True)
    env = next(env_iter)
    # no transfer ever comes: 8 s of 1 s scrapes after the request say so as well as verify's 20 s
    absent = ("--kv-wait", "8") if scenario.transfer_seconds is None else ()
    try:
        code, report, err = verify(env, capsys, *absent)
    finally:
        env_iter.close()
    found = by_name(report)[check]
    assert code == Exit.FAILED
    assert found["status"] == "FAIL" and words in found["detail"], found
    assert check in err  # the one-line summary names the failed check


@pytest.mark.parametrize(
    "scenario, check, words",
    [
        (Scenario(backend="UCX"), "nixl-backend", "NIXL backend UCX, not LIBFABRIC"),
        (
            Scenario(nodes=[node("ip-10-10-1-10"), node("ip-10-10-1-11", efa="0")]),
            "gpu-nodes",
            f"ip-10-10-1-11 offers 0 EFA device(s), the catalog says {INSTANCE.efa_interfaces}",
        ),
        (Scenario(decode_node="ip-10-10-1-10"), "pd-separate-nodes", "share node(s) ip-10-10-1-10"),
        (
            Scenario(nodes=[node("ip-10-10-1-10"), node("ip-10-10-1-11", zone="us-west-2b")]),
            "gpu-nodes",
            "is in us-west-2b, not the GPU AZ us-west-2a",
        ),
        (Scenario(nodes=[node("ip-10-10-1-10")]), "gpu-nodes", "1 GPU node(s) Ready, the stack expects 2"),
        (
            Scenario(nodes=[node("ip-10-10-1-10"), node("ip-10-10-1-11", gpus="0")]),
            "gpu-nodes",
            f"ip-10-10-1-11 offers 0 GPU(s), the catalog says {INSTANCE.gpus}",
        ),
        (Scenario(plugins_ready=1), "device-plugins", "aws-efa-k8s-device-plugin ready on 1 of 2 node(s)"),
        (Scenario(ray_service=False), "rayservice-ready", "not Ready: Number of serve endpoints dropped to 0"),
        (Scenario(ray_service=None), "rayservice-ready", "no RayService llm-serving/llm-pd"),
        (Scenario(endpoint_status=500), "chat-completion", "HTTP 500"),
    ],
    ids=[
        "ucx-backend",
        "node-missing-efa",
        "p-and-d-on-one-node",
        "node-in-another-az",
        "node-missing",
        "node-without-gpus",
        "efa-plugin-not-ready",
        "rayservice-not-ready",
        "rayservice-missing",
        "endpoint-500",
    ],
)
def test_cluster_failures_fail_verify_naming_the_cause(scenario, check, words, tmp_path, capsys):
    env_iter = _start(scenario, tmp_path, with_prometheus=False)
    env = next(env_iter)
    try:
        code, report, _ = verify(env, capsys, "--kv-wait", "0")
    finally:
        env_iter.close()
    found = by_name(report)[check]
    assert code == Exit.FAILED
    assert found["status"] == "FAIL" and words in found["detail"], found
    # without Prometheus behind the proxy the KV checks say so instead of guessing
    assert by_name(report)["kv-bytes"]["status"] == "UNVERIFIED"


def test_no_nixl_log_line_is_unverified_not_pass(tmp_path, capsys):
    env_iter = _start(Scenario(nixl_logged=False), tmp_path, with_prometheus=False)
    env = next(env_iter)
    try:
        code, report, _ = verify(env, capsys, "--kv-wait", "0")
    finally:
        env_iter.close()
    found = by_name(report)["nixl-backend"]
    assert code == Exit.UNVERIFIED
    assert found["status"] == "UNVERIFIED" and "llm-pd-decode-a" in found["detail"]


def test_hugepages_are_checked_once_the_catalog_has_a_figure():
    """The catalog's `efa_hugepages_2mi_mib`: the check reads it and bites on a short node."""
    from llm_pd_eks_tools.ops.verify.checks import Context, Expected, check_nodes

    class Nodes:
        def get_items(self, path, **query):
            return [node("a"), node("b")]  # 5Gi each

    def expected(hugepages):
        return Expected(
            gpu_nodes=2,
            availability_zone="us-west-2a",
            instance=INSTANCE,
            hugepages_mib=hugepages,
            model_id=None,
            endpoint_service=None,
            floor_gbps=FLOOR,
        )

    assert check_nodes(Nodes(), expected(5120), Context()).status == Status.PASS
    short = check_nodes(Nodes(), expected(8192), Context())
    assert short.status == Status.FAIL and "a has 5Gi hugepages-2Mi, the catalog says 8192Mi" in short.detail


def test_table_output_lists_every_check(tmp_path, capsys):
    env_iter = _start(Scenario(backend="UCX"), tmp_path, with_prometheus=False)
    env = next(env_iter)
    try:
        code = run("verify", main, ["--stack", "dev", "--kubeconfig", str(env.kubeconfig), "--kv-wait", "0"])
    finally:
        env_iter.close()
    out = capsys.readouterr().out
    assert code == Exit.FAILED
    assert "FAIL       nixl-backend" in out and "PASS       gpu-nodes" in out
    assert out.rstrip().endswith("RESULT: FAILED (exit 1)")


# --- unreachable, bad input ------------------------------------------------------------------------


def test_unreachable_cluster_is_unverified_without_a_traceback(tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubeconfig_text(f"http://127.0.0.1:{port}"))
    code = run("verify", main, ["--stack", "dev", "--kubeconfig", str(kubeconfig), "--timeout", "20"])
    out, err = capsys.readouterr()
    assert code == Exit.UNVERIFIED
    assert "Traceback" not in out + err
    assert "UNVERIFIED api-server" in out and "cluster unreachable" in out


def test_wrong_token_is_not_a_pass(tmp_path, capsys):
    env_iter = _start(Scenario(), tmp_path, with_prometheus=False)
    env = next(env_iter)
    try:
        env.kubeconfig.write_text(env.api.kubeconfig(token="wrong"))
        code, report, _ = verify(env, capsys, "--kv-wait", "0")
    finally:
        env_iter.close()
    api_server = by_name(report)["api-server"]
    assert code == Exit.UNVERIFIED and api_server["status"] == "UNVERIFIED"
    assert "refused the request: HTTP 401" in api_server["detail"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--stack", "nope", "--kubeconfig", "x"], "no stack file Pulumi.nope.yaml"),
        (["--stack", "dev", "--kubeconfig", "/nonexistent/kubeconfig"], "no such kubeconfig /nonexistent/kubeconfig"),
        (
            ["--stack", "dev", "--timeout", "0", "--kubeconfig", "x"],
            "--timeout: '0' must be a finite number of seconds above 0",
        ),
        (["--stack", "dev", "--timeout", "nan", "--kubeconfig", "x"], "'nan' must be a finite number"),
        (["--stack", "dev", "--kv-wait", "inf", "--kubeconfig", "x"], "--kv-wait: 'inf' must be a finite number"),
        (["--stack", "/tmp", "--kubeconfig", "x"], "is not a Pulumi stack name"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv, words, capsys):
    assert run("verify", main, argv) == Exit.USAGE
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_not_a_kubeconfig_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "kubeconfig"
    bad.write_text("clusters: 3\n")
    assert run("verify", main, ["--stack", "dev", "--kubeconfig", str(bad)]) == Exit.USAGE
    assert "not a usable kubeconfig" in capsys.readouterr().err


# --- small pieces -----------------------------------------------------------------------------------


def test_exit_code_table():
    from llm_pd_eks_tools.ops.verify.checks import Check

    passed, failed, unknown = (
        Check("a", Status.PASS, ""),
        Check("b", Status.FAIL, ""),
        Check("c", Status.UNVERIFIED, ""),
    )
    assert exit_code([passed]) == Exit.OK
    assert exit_code([passed, unknown]) == Exit.UNVERIFIED
    assert exit_code([passed, unknown, failed]) == Exit.FAILED


@pytest.mark.parametrize("value, mib", [("5Gi", 5120), ("5120Mi", 5120), ("0", 0), ("1048576Ki", 1024)])
def test_quantities(value, mib):
    assert quantity_mib(value) == mib


def test_nixl_line_is_recognised_only_as_nixl_writes_it():
    from llm_pd_eks_tools.ops.verify.checks import NIXL_BACKEND_LINE

    assert NIXL_BACKEND_LINE.findall(nixl_log_line("LIBFABRIC")) == ["LIBFABRIC"]
    assert NIXL_BACKEND_LINE.findall("Backend UCX was requested") == []


def test_tls_api_server_is_trusted_only_through_the_kubeconfig_ca(tmp_path, capsys):
    """EKS serves its API over TLS with the CA in `certificate-authority-data`: verified, not skipped."""
    from verify_fakes import TlsKubeApi, self_signed

    api = TlsKubeApi(Cluster(nodes=Scenario().nodes), tmp_path)
    try:
        good, wrong = tmp_path / "good", tmp_path / "wrong"
        good.write_text(api.kubeconfig())
        other = tmp_path / "other"
        other.mkdir()
        wrong.write_text(api.kubeconfig(ca=self_signed(other)[2]))  # someone else's certificate
        for path, status in ((good, "PASS"), (wrong, "UNVERIFIED")):
            run(
                "verify",
                main,
                ["--stack", "dev", "--kubeconfig", str(path), "--json", "--kv-wait", "0", "--timeout", "30"],
            )
            report = json.loads(capsys.readouterr().out)
            assert by_name(report)["api-server"]["status"] == status, report
            if status == "PASS":
                assert by_name(report)["gpu-nodes"]["status"] == "PASS"
            else:
                assert "CERTIFICATE_VERIFY_FAILED" in by_name(report)["api-server"]["detail"]
    finally:
        api.close()


def test_a_stalled_api_server_ends_at_the_total_deadline_as_unverified(tmp_path, capsys):
    api = FakeKubeApi(Cluster(nodes=Scenario().nodes, stall_seconds=5))
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(api.kubeconfig())
        code = run("verify", main, ["--stack", "dev", "--kubeconfig", str(kubeconfig), "--json", "--timeout", "1"])
    finally:
        api.close()
    report = json.loads(capsys.readouterr().out)
    assert code == Exit.UNVERIFIED
    assert {c["status"] for c in report["checks"]} == {"UNVERIFIED"}
    assert "timed out" in by_name(report)["api-server"]["detail"]


# --- the fabric, as the running worker sees it ------------------------------------------------------


def fabric_run(scenario: Scenario, tmp_path: Path, capsys) -> tuple[int, dict[str, dict[str, Any]]]:
    env_iter = _start(scenario, tmp_path, with_prometheus=False)
    env = next(env_iter)
    try:
        code, report, _ = verify(env, capsys, "--kv-wait", "0")
    finally:
        env_iter.close()
    return code, by_name(report)


def test_the_fabric_is_proved_from_the_running_worker(tmp_path, capsys):
    _, checks = fabric_run(Scenario(), tmp_path, capsys)
    plugin, provider, moved = checks["nixl-plugin"], checks["fi-provider"], checks["efa-bytes"]
    assert plugin["status"] == "PASS" and plugin["data"] == {"llm-pd-prefill-a": ["4242"], "llm-pd-decode-a": ["4242"]}
    assert provider["status"] == "PASS" and set(provider["data"].values()) == {"efa"}
    assert moved["status"] == "PASS"
    # each pod has two devices, each with five byte counters that grew by one request's KV bytes
    assert moved["data"]["bytes"] == {"llm-pd-prefill-a": 10 * KV_BYTES, "llm-pd-decode-a": 10 * KV_BYTES}


@pytest.mark.parametrize(
    "scenario, check, status, words",
    [
        (
            Scenario(fi_provider="tcp"),
            "fi-provider",
            "FAIL",
            "pid 4242 (ray::ServeReplica:llm:LLMServer:decode) runs with FI_PROVIDER=tcp",
        ),
        (Scenario(fi_provider=None), "fi-provider", "FAIL", "runs with no FI_PROVIDER"),
        (Scenario(plugin_loaded=False), "nixl-plugin", "FAIL", "has NIXL's libplugin_LIBFABRIC.so loaded"),
        (Scenario(efa_moves=False), "efa-bytes", "FAIL", "no bytes crossed the EFA devices of prefill pod"),
        (Scenario(counters_visible=False), "efa-bytes", "UNVERIFIED", "no EFA hw_counters visible in llm-pd-prefill-a"),
        (Scenario(endpoint_status=500), "efa-bytes", "UNVERIFIED", "no test request was answered"),
    ],
    ids=["provider-tcp", "provider-unset", "plugin-not-loaded", "no-efa-bytes", "no-counters", "no-request"],
)
def test_fabric_faults_are_named(scenario, check, status, words, tmp_path, capsys):
    code, checks = fabric_run(scenario, tmp_path, capsys)
    assert checks[check]["status"] == status and words in checks[check]["detail"], checks[check]
    assert code == (Exit.FAILED if status == "FAIL" or scenario.endpoint_status else Exit.UNVERIFIED)


def test_the_probe_prints_no_secret_of_the_worker(tmp_path, capsys):
    """The worker's environment holds HF_TOKEN; only FI_* variables leave the pod."""
    env_iter = _start(Scenario(), tmp_path, with_prometheus=False)
    env = next(env_iter)
    try:
        run("verify", main, ["--stack", "dev", "--kubeconfig", str(env.kubeconfig), "--json", "--kv-wait", "0"])
    finally:
        env_iter.close()
    out, err = capsys.readouterr()
    assert "hf_secretvalue_never_printed" not in out + err
    assert "FI_EFA_USE_DEVICE_RDMA" not in out  # read, but only FI_PROVIDER is reported


def test_a_check_over_zero_pods_is_not_a_pass(tmp_path, capsys):
    env_iter = _start(Scenario(), tmp_path, with_prometheus=False)
    env = next(env_iter)
    try:
        env.api.cluster.pods = []
        code, report, _ = verify(env, capsys, "--kv-wait", "0")
    finally:
        env_iter.close()
    checks = by_name(report)
    assert code == Exit.FAILED and checks["pd-separate-nodes"]["status"] == "FAIL"
    for name in ("nixl-backend", "nixl-plugin", "fi-provider", "efa-bytes"):
        assert checks[name]["status"] == "UNVERIFIED", checks[name]
    assert "on 0 pod(s)" not in json.dumps(report)


RAY_SERVICE_PATH = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayservices/{RAY_SERVICE_NAME}"


# --- garbage, huge and trickling replies ------------------------------------------------------------


@pytest.mark.parametrize(
    "path, body, check",
    [
        ("/version", b"<html>gateway</html>", "api-server"),
        ("/version", b"[1, 2]", "api-server"),
        ("/api/v1/nodes", b"not json at all", "gpu-nodes"),
        ("/api/v1/nodes", b"[]", "gpu-nodes"),
        ("/api/v1/nodes", json.dumps({"kind": "NodeList", "items": {"a": 1}}).encode(), "gpu-nodes"),
        ("/api/v1/nodes", json.dumps({"kind": "NodeList", "items": [1, "two"]}).encode(), "gpu-nodes"),
        (
            "/api/v1/nodes",
            json.dumps({"kind": "NodeList", "items": [{"metadata": [], "status": 3}]}).encode(),
            "gpu-nodes",
        ),
        (
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            json.dumps({"items": [{"metadata": {"labels": []}}]}).encode(),
            "pd-separate-nodes",
        ),
        ("/apis/apps/v1/namespaces/kube-system/daemonsets", b"\x00\xff" * 50, "device-plugins"),
        (RAY_SERVICE_PATH, json.dumps({"kind": "RayServiceList", "items": []}).encode(), "rayservice-ready"),
        (
            RAY_SERVICE_PATH,
            json.dumps({"kind": "RayService", "status": {"conditions": {"Ready": "True"}}}).encode(),
            "rayservice-ready",
        ),
        (
            RAY_SERVICE_PATH,
            json.dumps({"kind": "RayService", "status": {"conditions": [{"type": "Ready", "status": True}]}}).encode(),
            "rayservice-ready",
        ),
    ],
    ids=[
        "version-html",
        "version-list",
        "nodes-not-json",
        "nodes-list",
        "items-mapping",
        "items-scalars",
        "node-wrong-types",
        "pod-labels-list",
        "daemonsets-binary",
        "rayservice-a-list",
        "rayservice-conditions-mapping",
        "rayservice-status-not-a-string",
    ],
)
def test_garbage_from_the_api_server_is_unverified_not_a_crash(path, body, check, tmp_path, capsys):
    env_iter = _start(Scenario(), tmp_path, with_prometheus=False)
    env = next(env_iter)
    try:
        env.api.cluster.garbage[path] = body
        code, report, err = verify(env, capsys, "--kv-wait", "0")
    finally:
        env_iter.close()
    assert code in (Exit.UNVERIFIED, Exit.FAILED) and "Traceback" not in err and "internal error" not in err
    assert by_name(report)[check]["status"] == "UNVERIFIED", by_name(report)[check]


def test_a_reply_larger_than_the_cap_is_refused_unread(tmp_path, capsys, monkeypatch):
    import llm_pd_eks_tools.ops.verify.kube

    monkeypatch.setattr(llm_pd_eks_tools.ops.verify.kube, "MAX_RESPONSE_BYTES", 4096)
    env_iter = _start(Scenario(), tmp_path, with_prometheus=False)
    env = next(env_iter)
    try:
        env.api.cluster.garbage["/api/v1/nodes"] = json.dumps(
            {"kind": "NodeList", "items": [node(f"ip-10-10-{i // 250}-{i % 250}") for i in range(40)]}
        ).encode()
        _, report, _ = verify(env, capsys, "--kv-wait", "0")
    finally:
        env_iter.close()
    nodes = by_name(report)["gpu-nodes"]
    assert nodes["status"] == "UNVERIFIED" and "more than the 4096 read" in nodes["detail"]


def test_a_body_that_trickles_in_ends_at_the_deadline(tmp_path, capsys):
    """One byte every 0.2 s of a ~300-byte NodeList would take a minute; --timeout 4 ends the run."""
    import time

    env_iter = _start(Scenario(), tmp_path, with_prometheus=False)
    env = next(env_iter)
    try:
        env.api.cluster.drip = ("/api/v1/nodes", 0.2)
        started = time.monotonic()
        code = run(
            "verify",
            main,
            ["--stack", "dev", "--kubeconfig", str(env.kubeconfig), "--json", "--timeout", "4", "--kv-wait", "0"],
        )
        elapsed = time.monotonic() - started
    finally:
        env_iter.close()
    report = json.loads(capsys.readouterr().out)
    assert code == Exit.UNVERIFIED
    assert "timed out" in by_name(report)["gpu-nodes"]["detail"]
    assert elapsed < 45  # bounded by the deadline, not by the drip (generous for a loaded machine)


# --- broken kubeconfigs -----------------------------------------------------------------------------


EXEC_API = "client.authentication.k8s.io/v1beta1"


def kubeconfig_with(cluster: dict[str, Any], user: Optional[dict[str, Any]] = None) -> str:
    import yaml

    return yaml.safe_dump(
        {
            "current-context": "c",
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": user or {"token": "t"}}],
        }
    )


@pytest.mark.parametrize(
    "content, words",
    [
        (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), "is not UTF-8 text"),
        (
            kubeconfig_with({"server": "https://10.0.0.1", "certificate-authority-data": "%%%not-base64%%%"}).encode(),
            "certificate-authority-data, client-certificate-data or client-key-data is not base64",
        ),
        (
            kubeconfig_with({"server": "https://10.0.0.1", "certificate-authority-data": "aGVsbG8="}).encode(),
            "not a usable certificate",
        ),
        (
            kubeconfig_with({"server": "https://10.0.0.1", "certificate-authority": "/nonexistent/ca.crt"}).encode(),
            "File does not exist: /nonexistent/ca.crt",
        ),
        (kubeconfig_with({"server": "10.0.0.1:443"}).encode(), "is not an https:// URL"),
        (kubeconfig_with({"server": "https://10.0.0.1:port"}).encode(), "Port could not be cast"),
        (kubeconfig_with({"server": "https://[::1"}).encode(), "Invalid IPv6 URL"),
        (
            kubeconfig_with(
                {"server": "https://10.0.0.1", "insecure-skip-tls-verify": True},
                {"exec": {"apiVersion": EXEC_API, "command": "aws", "env": [{"name": "AWS_PROFILE"}]}},
            ).encode(),
            "Expected key value in kube-config/users[name=u]/user/exec/env/0",
        ),
        (
            kubeconfig_with({"server": "https://10.0.0.1"}, {"exec": {"apiVersion": EXEC_API, "args": ["x"]}}).encode(),
            "exec: malformed request. missing key 'command'",
        ),
        (
            kubeconfig_with({"server": "https://10.0.0.1"}, {"exec": {"command": "aws", "args": ["x"]}}).encode(),
            "exec: malformed request. missing key 'apiVersion'",
        ),
        (
            kubeconfig_with({"server": "https://10.0.0.1", "insecure-skip-tls-verify": "false"}).encode(),
            "insecure-skip-tls-verify is not true or false",
        ),
        (kubeconfig_with({"certificate-authority-data": "aGVsbG8="}).encode(), "Expected key server in"),
        (kubeconfig_with({"server": "https://10.0.0.1"}, {"token": 12345}).encode(), "token is not a string"),
    ],
    ids=[
        "binary",
        "ca-data-not-base64",
        "ca-data-not-pem",
        "ca-file-missing",
        "server-no-scheme",
        "server-bad-port",
        "server-bad-ipv6",
        "exec-env-no-value",
        "exec-no-command",
        "exec-no-api-version",
        "skip-tls-verify-a-string",
        "cluster-no-server",
        "token-number",
    ],
)
def test_broken_kubeconfigs_are_usage_errors(content, words, tmp_path, capsys):
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    code = run("verify", main, ["--stack", "dev", "--kubeconfig", str(path), "--timeout", "10"])
    err = capsys.readouterr().err
    assert code == Exit.USAGE, err
    assert words in err and err.count("\n") == 1 and "internal error" not in err, err


def test_verify_json_goes_where_out_says(tmp_path, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        kubeconfig.write_text(kubeconfig_text(f"http://127.0.0.1:{s.getsockname()[1]}"))
    out = tmp_path / "reports"
    run("verify", main, ["--stack", "dev", "--kubeconfig", str(kubeconfig), "--timeout", "10", "--out", str(out)])
    capsys.readouterr()
    assert json.loads((out / "verify.json").read_text())["result"] == "UNVERIFIED"
    (tmp_path / "afile").write_text("x")
    assert (
        run("verify", main, ["--stack", "dev", "--kubeconfig", str(kubeconfig), "--out", str(tmp_path / "afile")])
        == Exit.USAGE
    )
    assert "is not a directory" in capsys.readouterr().err
