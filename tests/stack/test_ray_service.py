"""The serving layer each stack registers: device plugins, KubeRay and the prefill/decode RayService.

The RayService is read back from what the engine would receive (the recorded registration), then
judged by Ray's own schemas (`ServeDeploySchema`, `LLMConfig`) and KubeRay's CRD. Expected values
come from the stack file, the GPU catalog and the other registrations (node groups), never from
the code under test.
"""

from __future__ import annotations

import json

import pytest
import yaml
from google.protobuf import json_format
from helpers import (
    DATA,
    MOVED_TO_RAID0,
    NODE_GROUP,
    RAY_SERVICE,
    engine_config_with,
    rayservice_schema,
    rayservice_validator,
)

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.gpu_cutover import NODE_GROUP_LABEL
from llm_pd_eks.models import MODELS
from llm_pd_eks.pulumi_sdk import rpc
from llm_pd_eks_tools.core.stack import load_stack_config, stack_config
from llm_pd_eks_tools.core.stackfile import PROJECT
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration, run_program

RELEASE = "kubernetes:helm.sh/v3:Release"
SERVICE = "kubernetes:core/v1:Service"
SECRET = "kubernetes:core/v1:Secret"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
K8S_PROVIDER = "pulumi:providers:kubernetes"
GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"

CRD = DATA / "kuberay" / "ray.io_rayservices.yaml"  # vendored: tests/data/kuberay/SOURCE


def ints(obj):
    """Numbers cross the wire as doubles; give whole numbers back their integer type."""
    if isinstance(obj, dict):
        return {k: ints(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [ints(v) for v in obj]
    if isinstance(obj, float) and obj.is_integer():
        return int(obj)
    return obj


def ray_service(run: ProgramRun) -> Registration:
    return run.one(RAY_SERVICE)


def serve_config(run: ProgramRun) -> dict:
    return yaml.safe_load(ray_service(run).inputs["spec"]["serveConfigV2"])


def pd_args(run: ProgramRun) -> dict:
    (app,) = serve_config(run)["applications"]
    return app["args"]


def workers(run: ProgramRun) -> dict[str, dict]:
    groups = ints(ray_service(run).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"])
    return {g["groupName"]: g for g in groups}


def container(group: dict) -> dict:
    c = group["template"]["spec"]["containers"][0]  # the Ray container (KubeRay: the first)
    return c


# --- Ray's own schemas --------------------------------------------------------------------------


def test_serve_config_is_valid_for_ray_serve(run: ProgramRun):
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(serve_config(run))
    (app,) = schema.applications
    assert app.import_path == "ray.serve.llm:build_pd_openai_app"
    assert set(app.args) >= {"prefill_config", "decode_config"}


def test_both_llm_configs_are_valid_ray_llm_configs_for_the_configured_model(run: ProgramRun):
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    cfg = stack_config(run.stack)
    instance = GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type]
    args = pd_args(run)
    parsed = {role: LLMConfig.model_validate(args[f"{role}_config"]) for role in ("prefill", "decode")}
    # PDServingArgs (not importable without vLLM) refuses differing model ids: so do we.
    assert parsed["prefill"].model_id == parsed["decode"].model_id == cfg.serving.model_id
    for role, llm in parsed.items():
        group = getattr(cfg.serving, role)
        assert llm.accelerator_type == instance.ray_accelerator_type
        assert llm.engine_kwargs["tensor_parallel_size"] == group.tensor_parallel_size
        assert llm.engine_kwargs["max_model_len"] == cfg.serving.max_model_len
        assert llm.engine_kwargs["kv_cache_dtype"] == cfg.serving.kv_cache_dtype
        autoscaling = llm.deployment_config["autoscaling_config"]
        assert (autoscaling["min_replicas"], autoscaling["max_replicas"]) == (group.min_replicas, group.max_replicas)


def test_kv_cache_moves_over_nixl_libfabric(run: ProgramRun):
    for role in ("prefill", "decode"):
        kv = pd_args(run)[f"{role}_config"]["engine_kwargs"]["kv_transfer_config"]
        assert kv == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
            "kv_load_failure_policy": "recompute",
        }
    # Named in the manifest itself (not hidden behind a YAML alias), where a reviewer reads it.
    assert ray_service(run).inputs["spec"]["serveConfigV2"].count("LIBFABRIC") == 2


def test_engine_kwargs_are_ones_the_images_vllm_accepts(run: ProgramRun):
    """Judged by the DLC's vLLM itself (llm_pd_eks/versions.py): tests/data/vllm/engine-args-<version>.json."""
    from llm_pd_eks.versions import DLC_VLLM_VERSION

    vllm = json.loads((DATA / "vllm" / f"engine-args-{DLC_VLLM_VERSION}.json").read_text())
    for role in ("prefill", "decode"):
        kwargs = pd_args(run)[f"{role}_config"]["engine_kwargs"]
        assert set(kwargs) <= set(vllm["engine_args_fields"])
        assert kwargs["kv_cache_dtype"] in vllm["cache_dtypes"]
        kv = kwargs["kv_transfer_config"]
        assert set(kv) <= set(vllm["kv_transfer_config_fields"])
        assert kv["kv_connector"] in vllm["kv_connectors"] and kv["kv_role"] in vllm["kv_roles"]
        # Under any other key NIXL's worker silently falls back to its default backend, UCX.
        assert set(kv["kv_connector_extra_config"]) == {vllm["nixl_backends_extra_config_key"]}


# --- the pods -----------------------------------------------------------------------------------


def test_head_runs_on_the_system_nodes_without_gpus(run: ProgramRun):
    head = ints(ray_service(run).inputs["spec"]["rayClusterConfig"]["headGroupSpec"])
    system = run.one(NODE_GROUP, "system-nodes").inputs
    # the group's labels plus the one EKS puts on every node of a managed group: its name
    system_labels = {**system["labels"], NODE_GROUP_LABEL: system["nodeGroupName"]}
    # no CPUs or GPUs for Ray on the head: only the GCS and the zero-CPU Serve controller live there
    assert head["rayStartParams"]["num-gpus"] == "0" and head["rayStartParams"]["num-cpus"] == "0"
    selector = head["template"]["spec"]["nodeSelector"]
    assert selector and selector.items() <= system_labels.items()
    assert GPU not in json.dumps(head)


def test_workers_take_whole_efa_gpu_nodes(run: ProgramRun):
    cfg = stack_config(run.stack)
    instance = GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type]
    gpu_ng = run.one(NODE_GROUP, "gpu-nodes")
    (taint,) = gpu_ng.inputs["taints"]
    assert set(workers(run)) == {"prefill", "decode"}
    for group in workers(run).values():
        spec, c = group["template"]["spec"], container(group)
        assert c["resources"]["limits"][GPU] == str(instance.gpus)
        assert c["resources"]["limits"][EFA] == str(instance.efa_interfaces)
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["FI_PROVIDER"] == "efa"
        # device RDMA only where the EFA has RDMA read (every serving stack's type has: the config insists)
        assert instance.efa_rdma_read and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
        (shm,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == shm["name"]]
        assert volume["emptyDir"]["medium"] == "Memory"
        # lands on the GPU node group, past its taint
        node_labels = {**gpu_ng.inputs["labels"], NODE_GROUP_LABEL: gpu_ng.inputs["nodeGroupName"]}
        assert spec["nodeSelector"].items() <= node_labels.items()
        assert {"key": taint["key"], "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert c["image"] == cfg.serving.image


def test_worker_pod_counts_cover_the_serve_replica_bounds(run: ProgramRun):
    cfg = stack_config(run.stack)
    instance = GPU_INSTANCE_TYPES[cfg.gpu_nodes.instance_type]
    for role, group in workers(run).items():
        wanted = getattr(cfg.serving, role)
        per_pod = instance.gpus // wanted.tensor_parallel_size  # replicas one whole-node pod holds
        for pods, replicas in (
            (group["minReplicas"], wanted.min_replicas),
            (group["maxReplicas"], wanted.max_replicas),
        ):
            # the fewest pods that hold `replicas` replicas
            assert pods * per_pod >= replicas > (pods - 1) * per_pod
        assert group["replicas"] == group["minReplicas"]
    # and the GPU node group can hold every pod at once
    max_nodes = run.one(NODE_GROUP, "gpu-nodes").inputs["scalingConfig"]["maxSize"]
    assert sum(g["maxReplicas"] for g in workers(run).values()) <= max_nodes


def test_prefill_and_decode_replicas_never_share_a_node(run: ProgramRun):
    groups, args = workers(run), pd_args(run)
    # each group's own resource: everything it advertises but Ray's accelerator type (tested below)
    custom = {role: {k for k in g["resources"] if not k.startswith("accelerator_type:")} for role, g in groups.items()}
    assert all(len(keys) == 1 for keys in custom.values()) and custom["prefill"] != custom["decode"]
    for role, other in (("prefill", "decode"), ("decode", "prefill")):
        (mine,), (theirs,) = custom[role], custom[other]
        # the role's worker pods advertise one unit of their resource per GPU ...
        assert groups[role]["resources"][mine] == container(groups[role])["resources"]["limits"][GPU]
        # ... and only that role's engines ask for it, one unit per GPU bundle
        bundle = args[f"{role}_config"]["placement_group_config"]["bundle_per_worker"]
        assert bundle[mine] == 1 and bundle["GPU"] == 1 and theirs not in bundle
        # belt and braces in Kubernetes: required anti-affinity against the other role's pods
        template = groups[role]["template"]
        (term,) = template["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        (expr,) = term["labelSelector"]["matchExpressions"]
        assert expr["operator"] == "In"
        assert groups[other]["template"]["metadata"]["labels"][expr["key"]] in expr["values"]
        assert template["metadata"]["labels"][expr["key"]] not in expr["values"]


# --- KubeRay's CRD, readiness, endpoint ---------------------------------------------------------


def test_manifest_validates_against_the_kuberay_crd(run: ProgramRun):
    import jsonschema

    validator = rayservice_validator()
    rs = ray_service(run)
    manifest = ints({k: rs.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")})
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayService")
    validator.validate(manifest)
    # and the schema does bite: a worker group without maxReplicas is refused
    broken = json.loads(json.dumps(manifest))
    del broken["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["maxReplicas"]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


def test_up_waits_for_the_ready_condition_within_the_configured_time(run: ProgramRun):
    cfg = stack_config(run.stack)
    annotations = ray_service(run).inputs["metadata"]["annotations"]
    if cfg.serving.upgrade_strategy == "Recreate":  # a replacement is a fresh Ready
        assert annotations["pulumi.com/waitFor"] == "condition=Ready"
    else:  # Ready stays true from the old cluster: the switch is UpgradeInProgress=False
        assert json.loads(annotations["pulumi.com/waitFor"]) == ["condition=Ready", "condition=UpgradeInProgress=False"]
    assert int(annotations["pulumi.com/timeoutSeconds"]) == cfg.serving.ready_timeout_minutes * 60


def test_endpoint_is_kuberays_serve_service_internal_by_default(run: ProgramRun):
    cfg = stack_config(run.stack)
    spec = ray_service(run).inputs["spec"]
    svc = ints(spec["serveService"])
    assert cfg.serving.public_endpoint is False
    assert svc["metadata"]["name"] == cfg.serving.endpoint_name == "llm-openai"
    assert svc["spec"]["type"] == "ClusterIP"
    assert "internet-facing" not in json.dumps(svc)
    # KubeRay merges in the head's `serve` port by name (common/service.go BuildServeService); same port here
    head_ports = container(spec["rayClusterConfig"]["headGroupSpec"])["ports"]
    (serve,) = [p for p in svc["spec"]["ports"] if p["name"] == "serve"]
    assert serve["port"] in {p["containerPort"] for p in ints(head_ports) if p["name"] == "serve"}
    # no hand-made Service selecting serve pods across clusters any more: KubeRay pins its selector
    assert "selector" not in svc["spec"] and run.of_type(SERVICE) == []
    assert run.stack_outputs["modelId"] == cfg.serving.model_id
    assert run.stack_outputs["endpoint"] == f"http://llm-openai.llm-serving.svc.cluster.local:{serve['port']}/v1"


def test_image_is_pinned_everywhere(run: ProgramRun):
    cfg = stack_config(run.stack)
    spec = ray_service(run).inputs["spec"]["rayClusterConfig"]
    images = {container(spec["headGroupSpec"])["image"]} | {container(g)["image"] for g in workers(run).values()}
    assert images == {cfg.serving.image}
    assert not cfg.serving.image.endswith(":latest")


def test_the_stacks_run_the_dlc_and_its_ray_is_the_one_the_tests_use(run: ProgramRun):
    """One Ray: the DLC's (llm_pd_eks/versions.py) is the RayService's rayVersion, the stack's
    image, pyproject's test pin and its lock (requirements-dev.txt), and the Ray the schema tests here import."""
    import re

    import ray

    from llm_pd_eks.versions import DLC_IMAGE, DLC_RAY_VERSION

    spec = ray_service(run).inputs["spec"]["rayClusterConfig"]
    assert stack_config(run.stack).serving.image == DLC_IMAGE
    assert spec["rayVersion"] == DLC_RAY_VERSION
    root = DATA.parent.parent
    declared = (root / "pyproject.toml").read_text()
    assert re.findall(r'"ray\[serve\]==([^"]+)"', declared) == [DLC_RAY_VERSION]
    assert re.findall(r"^ray==(\S+) ", (root / "requirements-dev.txt").read_text(), re.MULTILINE) == [DLC_RAY_VERSION]
    assert ray.__version__ == DLC_RAY_VERSION


# --- the graph ----------------------------------------------------------------------------------


def test_charts_are_pinned_from_their_official_repositories(run: ProgramRun):
    cfg = stack_config(run.stack)
    expected = {
        "kuberay-operator": (
            "kuberay-operator",
            cfg.kuberay.chart_version,
            "https://ray-project.github.io/kuberay-helm/",
        ),
        "nvidia": (
            "nvidia-device-plugin",
            cfg.device_plugins.nvidia_chart_version,
            "https://nvidia.github.io/k8s-device-plugin",
        ),
        "efa": ("aws-efa-k8s-device-plugin", cfg.device_plugins.efa_chart_version, "https://aws.github.io/eks-charts"),
    }
    for fragment, (chart, version, repo) in expected.items():
        release = run.one(RELEASE, fragment)
        assert (release.inputs["chart"], release.inputs["version"], release.inputs["repositoryOpts"]["repo"]) == (
            chart,
            version,
            repo,
        )
    assert run.one(RELEASE, "kuberay").inputs["values"]["nodeSelector"].items() <= (
        run.one(NODE_GROUP, "system-nodes").inputs["labels"].items()
    )


def test_device_plugins_target_and_tolerate_the_gpu_nodes(run: ProgramRun):
    gpu_ng = run.one(NODE_GROUP, "gpu-nodes")
    (taint,) = gpu_ng.inputs["taints"]
    for fragment in ("nvidia", "efa"):
        values = run.one(RELEASE, fragment).inputs["values"]
        assert values["nodeSelector"].items() <= gpu_ng.inputs["labels"].items()
        assert any(t["key"] == taint["key"] and t["effect"] == "NoSchedule" for t in values["tolerations"])


def test_dependency_edges(run: ProgramRun):
    rs = ray_service(run)
    operator = run.one(RELEASE, "kuberay")
    plugins = [run.one(RELEASE, "nvidia"), run.one(RELEASE, "efa")]
    node_groups = [run.one(NODE_GROUP, "system-nodes"), run.one(NODE_GROUP, "gpu-nodes")]
    # RayService -> KubeRay release, device plugins, both node groups
    assert {r.urn for r in [operator, *plugins, *node_groups]} <= set(rs.dependencies)
    # KubeRay release -> the cluster: through the Kubernetes provider built from its kubeconfig
    eks = run.one("eks:index:Cluster")
    provider = run.one(K8S_PROVIDER)
    assert eks.urn in provider.property_dependencies["kubeconfig"]
    for reg in (rs, operator, *plugins):
        assert reg.provider.startswith(provider.urn + "::")
    # device plugins -> GPU node group
    for plugin in plugins:
        assert run.one(NODE_GROUP, "gpu-nodes").urn in plugin.dependencies


# --- variants of the dev stack: HF token, public endpoint ----------------------------------------

TOKEN = "hf_unit-test-token-4b1d"


def dev_config(**serving_overrides) -> dict[str, str]:
    config, secret_keys = engine_config_with("dev", "serving", **serving_overrides)
    assert secret_keys == []  # the variants below choose which keys are secret
    return config


def occurrences(value, needle: str, *, secret: bool, inside: bool = False) -> int:
    """Occurrences of `needle` inside (`secret`) or outside secret-marked values of a deserialized Struct."""
    if isinstance(value, dict):
        inside = inside or value.get(rpc._special_sig_key) == rpc._special_secret_sig
        return sum(occurrences(v, needle, secret=secret, inside=inside) for v in value.values())
    if isinstance(value, list):
        return sum(occurrences(v, needle, secret=secret, inside=inside) for v in value)
    return int(inside is secret and isinstance(value, str) and needle in value)


@pytest.fixture(scope="module")
def run_with_token() -> ProgramRun:
    config = dev_config()
    config[f"{PROJECT}:hfToken"] = TOKEN
    return run_program("dev", config=config, secret_keys=[f"{PROJECT}:hfToken"])


def test_hf_token_becomes_a_secret_the_workers_read(run_with_token: ProgramRun):
    secret = run_with_token.one(SECRET)
    for group in workers(run_with_token).values():
        (ref,) = [e["valueFrom"]["secretKeyRef"] for e in container(group)["env"] if e["name"] == "HF_TOKEN"]
        assert ref["name"] == secret.inputs["metadata"]["name"]
        string_data = secret.inputs["stringData"]
        if string_data.get(rpc._special_sig_key) == rpc._special_secret_sig:  # wholly secret
            string_data = string_data["value"]
        assert ref["key"] in string_data
    # the Secret's name flows into the RayService, so the Secret exists first
    assert secret.urn in ray_service(run_with_token).property_dependencies["spec"]


def test_hf_token_never_appears_in_plain_text(run_with_token: ProgramRun):
    structs = {r.urn: json_format.MessageToDict(r.inputs_struct) for r in run_with_token.resources}
    assert sum(occurrences(s, TOKEN, secret=False) for s in structs.values()) == 0
    # ... while it is there, encrypted-marked, in the Secret (so the check above can see it)
    assert occurrences(structs[run_with_token.one(SECRET).urn], TOKEN, secret=True) == 1


def test_a_secret_exactly_when_the_stack_has_a_token(run: ProgramRun):
    has_token = f"{PROJECT}:hfToken" in load_stack_config(run.stack)[1]
    hf_secrets = [s for s in run.of_type(SECRET) if "hf-token" in s.name]  # (the GCS store has its own)
    assert len(hf_secrets) == int(has_token)
    # the gated model's stacks carry one (the config refuses them otherwise); dev's open model needs none
    assert has_token is MODELS[stack_config(run.stack).serving.model_id].gated
    for group in workers(run).values():
        assert ("HF_TOKEN" in {e["name"] for e in container(group)["env"]}) is has_token


def test_hf_token_in_plain_text_stops_the_program_before_any_resource():
    config = dev_config()
    config[f"{PROJECT}:hfToken"] = TOKEN
    with pytest.raises(Exception) as info:
        run_program("dev", config=config, secret_keys=[])
    assert f"{PROJECT}:hfToken" in str(info.value) and "--secret" in str(info.value)
    assert TOKEN not in str(info.value)
    assert info.value.registrations == []  # type: ignore[attr-defined]  # refused before any resource


def test_public_endpoint_is_an_internet_facing_load_balancer():
    extra = {"service.beta.kubernetes.io/aws-load-balancer-source-ranges": "203.0.113.0/24"}
    run = run_program(
        "dev",
        config=dev_config(
            publicEndpoint=True, endpointName="chat", endpointAnnotations=extra, endpointSourceRanges=["203.0.113.0/24"]
        ),
        secret_keys=[],
    )
    svc = ray_service(run).inputs["spec"]["serveService"]
    assert svc["spec"]["type"] == "LoadBalancer" and svc["metadata"]["name"] == "chat"
    annotations = svc["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internet-facing"
    assert extra.items() <= annotations.items()


# --- EFA inside the pod, disruption, roll-outs -----------------------------------------


def test_worker_pods_are_efa_ready(run: ProgramRun):
    instance = GPU_INSTANCE_TYPES[stack_config(run.stack).gpu_nodes.instance_type]
    for group in workers(run).values():
        c = container(group)
        requests, limits = c["resources"]["requests"], c["resources"]["limits"]
        # huge pages for libfabric's EFA provider, requested equal to the limit (Kubernetes insists)
        assert requests["hugepages-2Mi"] == limits["hugepages-2Mi"] == f"{instance.efa_hugepages_2mi_mib}Mi"
        # a memory request equal to its limit, within the instance's RAM with room for the node
        assert requests["memory"] == limits["memory"]
        gib = int(limits["memory"].removesuffix("Gi"))
        assert 0.5 * instance.memory_gib < gib + instance.efa_hugepages_2mi_mib / 1024 < instance.memory_gib
        assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]


def test_worker_pods_run_unprivileged(run: ProgramRun):
    # IPC_LOCK (above) and the EFA device from the device plugin, never `privileged`: the AWS DLC's
    # own EKS multi-node test runs its Ray pods so (llm_pd_eks/ray_worker_pod.py's module docstring cites it).
    pods = [g["template"]["spec"] for g in workers(run).values()]
    pods.append(ints(ray_service(run).inputs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]))
    for pod in pods:
        for c in pod["containers"] + pod.get("initContainers", []):
            assert not c.get("securityContext", {}).get("privileged", False), c["name"]


def _env(c: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c["env"]}


def test_the_weights_cache_is_a_node_directory_on_the_instance_store(run: ProgramRun):
    # HF_HOME on a hostPath under /var/lib/kubelet, which nodeadm's RAID0 holds (helpers.MOVED_TO_RAID0):
    # a restarted pod reads the weights from the node, not over NAT again.
    instance = GPU_INSTANCE_TYPES[stack_config(run.stack).gpu_nodes.instance_type]
    model = MODELS[stack_config(run.stack).serving.model_id]
    for group in workers(run).values():
        c = container(group)
        env = _env(c)
        (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == env["HF_HOME"]]
        (volume,) = [v for v in group["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
        assert volume["hostPath"]["path"].startswith(MOVED_TO_RAID0[0] + "/")
        assert env["HF_XET_HIGH_PERFORMANCE"] == "1"
        assert instance.nvme_disks * instance.nvme_disk_gb > 2 * model.weights_gib_bf16  # room for the weights


def test_device_rdma_is_set_only_where_the_efa_has_rdma_read():
    from llm_pd_eks.config import ServingConfig
    from llm_pd_eks.ray_worker_pod import worker_group

    serving = ServingConfig.model_validate(
        {"modelId": "Qwen/Qwen2.5-7B-Instruct", "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/r:1"}
    )
    seen = set()
    for instance in GPU_INSTANCE_TYPES.values():
        env = {e["name"] for e in container(worker_group(serving, "prefill", instance))["env"]}
        assert ("FI_EFA_USE_DEVICE_RDMA" in env) is instance.efa_rdma_read and "FI_PROVIDER" in env
        seen.add(instance.efa_rdma_read)
    assert seen == {True, False}  # both kinds are in the catalog, so both branches ran


def test_a_disruption_budget_keeps_the_last_pod_of_each_role(run: ProgramRun):
    # the worker roles' budgets (the head has its own: tests/stack/test_ray_head_protection.py)
    budgets = [
        ints(p.inputs) for p in run.of_type(PDB) if "llm-pd-eks/role" in p.inputs["spec"]["selector"]["matchLabels"]
    ]
    pdbs = {pdb["spec"]["selector"]["matchLabels"]["llm-pd-eks/role"]: pdb for pdb in budgets}
    assert set(pdbs) == set(workers(run))
    for role, pdb in pdbs.items():
        labels = workers(run)[role]["template"]["metadata"]["labels"]
        # selects exactly that role's pods (and none of the other role's) ...
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
        other = workers(run)["decode" if role == "prefill" else "prefill"]["template"]["metadata"]["labels"]
        assert not pdb["spec"]["selector"]["matchLabels"].items() <= other.items()
        # ... and lets a drain evict one only while another keeps serving
        assert pdb["spec"]["minAvailable"] == 1
        assert pdb["metadata"]["namespace"] == ray_service(run).inputs["metadata"]["namespace"]
    # the GPU node group replaces one node at a time and does not force past the budgets
    gpu_ng = run.one(NODE_GROUP, "gpu-nodes").inputs
    assert ints(gpu_ng["updateConfig"]) == {"maxUnavailable": 1, "updateStrategy": "MINIMAL"}
    assert not gpu_ng.get("forceUpdateVersion")


@pytest.fixture
def register_requests(monkeypatch):
    """The raw RegisterResource requests of a run (resource options the recording leaves out)."""
    from llm_pd_eks.pulumi_sdk import MockMonitor

    seen: dict[str, object] = {}
    original = MockMonitor.RegisterResource

    def spy(self, request):
        seen[request.name] = request
        return original(self, request)

    monkeypatch.setattr(MockMonitor, "RegisterResource", spy)
    return seen


def test_recreate_replaces_the_rayservice_when_its_cluster_changes(register_requests):
    run = run_program("dev", config=dev_config(), secret_keys=[])
    spec = ray_service(run).inputs["spec"]
    assert spec["upgradeStrategy"] == {"type": "None"}  # KubeRay builds no second cluster
    request = register_requests[ray_service(run).name]
    # ... so Pulumi replaces the RayService on a Ray cluster change, deleting first (same name, same GPUs)
    paths = set(request.replaceOnChanges)
    cluster = spec["rayClusterConfig"]
    # every rendered cluster field is covered, the worker groups' scale bounds and tolerations too
    # (KubeRay never applies a change of only those to a live cluster); serveConfigV2 is not (applied
    # in place), the endpoint Service's name is (a rename would be a second Service; its other fields
    # are patched on the live Service in place)
    expected = {f"spec.rayClusterConfig.{k}" for k in cluster} | {"spec.serveService.metadata.name"}
    assert paths == expected and "spec.serveConfigV2" not in paths
    assert request.deleteBeforeReplace is True


def test_new_cluster_strategy_waits_for_the_upgrade_to_finish(register_requests):
    config = dev_config(upgradeStrategy="NewCluster")
    config[f"{PROJECT}:gpuNodes"] = json.dumps({**json.loads(config[f"{PROJECT}:gpuNodes"]), "maxSize": 4})
    run = run_program("dev", config=config, secret_keys=[])
    rs = ray_service(run)
    assert rs.inputs["spec"]["upgradeStrategy"] == {"type": "NewCluster"}
    # Ready stays true from the old cluster during the switch: wait for UpgradeInProgress=False too
    wait_for = json.loads(rs.inputs["metadata"]["annotations"]["pulumi.com/waitFor"])
    assert wait_for == ["condition=Ready", "condition=UpgradeInProgress=False"]
    request = register_requests[rs.name]
    # KubeRay builds the new cluster itself; only a renamed endpoint Service replaces the RayService,
    # deleting first (the RayService's name is fixed)
    assert list(request.replaceOnChanges) == ["spec.serveService.metadata.name"]
    assert request.deleteBeforeReplace is True


def test_upgrade_strategies_are_kuberay_1_7_values():
    from llm_pd_eks.ray_service import UPGRADE_STRATEGIES

    field = rayservice_schema()["properties"]["spec"]["properties"]["upgradeStrategy"]
    assert field["properties"]["type"]["type"] == "string"  # the CRD has no enum: KubeRay's Go constants decide
    # rayservice_types.go (v1.7.0): NewCluster, NewClusterWithIncrementalUpgrade, None
    assert set(UPGRADE_STRATEGIES.values()) <= {"NewCluster", "NewClusterWithIncrementalUpgrade", "None"}
