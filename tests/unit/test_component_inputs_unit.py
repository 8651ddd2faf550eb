"""Component inputs the config sections cannot rule out, one property per test, with Pulumi's public mocks.

A component constructed directly (another program, a test) can be handed inputs that no single config
section sees: a region its AZs are not in, subnets missing the GPU AZ, a tensor-parallel size the node
type's GPUs cannot hold. Each raises `pulumi.InputPropertyError` naming the property, before anything
registers.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest

from llm_pd_eks.autoscaler import NodeAutoscaler, NodeAutoscalerArgs
from llm_pd_eks.catalog import gpu_instance_type
from llm_pd_eks.cluster import Cluster, ClusterArgs
from llm_pd_eks.config.autoscaler import NodeAutoscalerConfig
from llm_pd_eks.config.cluster import ClusterConfig
from llm_pd_eks.config.gpu_nodes import GpuNodesConfig
from llm_pd_eks.config.network import NetworkConfig
from llm_pd_eks.config.observability import ObservabilityConfig
from llm_pd_eks.config.serving import ServingConfig
from llm_pd_eks.config.system_nodes import SystemNodesConfig
from llm_pd_eks.efa_gpu_nodes import EfaGpuNodeGroup, EfaGpuNodeGroupArgs
from llm_pd_eks.network import Network, NetworkArgs
from llm_pd_eks.observability import Observability, ObservabilityArgs
from llm_pd_eks.ray_service import LlmRayService, RayServiceArgs
from llm_pd_eks.storage import EbsStorage, EbsStorageArgs
from llm_pd_eks.system_nodes import SystemNodeGroup, SystemNodeGroupArgs
from llm_pd_eks.versions import DLC_IMAGE

AZS = ["us-west-2a", "us-west-2b"]
SUBNETS = {"us-west-2a": "subnet-0a1b2c3d4e5f60001", "us-west-2b": "subnet-0a1b2c3d4e5f60002"}
ROLE = "arn:aws:iam::210987654321:role/llm-node-role"
OIDC_ARN = "arn:aws:iam::210987654321:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE"
OIDC_ISSUER = "oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE"
GPU = gpu_instance_type("g6e.12xlarge")  # 4 GPUs


def _stub(name: str) -> pulumi.Resource:
    """A stand-in for a resource another component registers (a node group, a release)."""
    return pulumi.ComponentResource("test:index:Stub", name)


def _provider() -> k8s.Provider:
    return k8s.Provider("k8s", kubeconfig="{}")


def _raises(prop: str, build) -> pulumi.InputPropertyError:
    with pytest.raises(pulumi.InputPropertyError) as info:
        build()
    assert info.value.property_path == prop, info.value.reason
    return info.value


def _gpu_args(**overrides) -> EfaGpuNodeGroupArgs:
    values = {
        "config": GpuNodesConfig.model_validate({"instanceType": GPU.name, "availabilityZone": "us-west-2a"}),
        "instance": GPU,
        "cluster_name": "llm",
        "kubernetes_version": "1.35",
        "node_role_arn": ROLE,
        "vpc_id": "vpc-0a1b2c3d4e5f60001",
        "private_subnet_ids": SUBNETS,
        "cluster_security_group_id": "sg-0a1b2c3d4e5f60001",
    }
    return EfaGpuNodeGroupArgs(**{**values, **overrides})


# --- Network ----------------------------------------------------------------------------------------


def test_network_refuses_azs_outside_its_region(mocks):
    config = NetworkConfig.model_validate({"availabilityZones": AZS})
    error = _raises(
        "config.availability_zones",
        lambda: Network("net", NetworkArgs(config=config, cluster_name="llm", region="us-east-1")),
    )
    assert "'us-west-2a' is not an availability zone of region us-east-1" in error.reason
    assert mocks.registered == []  # refused before anything registers


def test_network_refuses_a_region_that_is_no_region_name(mocks):
    config = NetworkConfig.model_validate({"availabilityZones": AZS})
    _raises("region", lambda: Network("net", NetworkArgs(config=config, cluster_name="llm", region="west")))


def test_network_refuses_an_empty_cluster_name(mocks):
    config = NetworkConfig.model_validate({"availabilityZones": AZS})
    _raises("cluster_name", lambda: Network("net", NetworkArgs(config=config, cluster_name="", region="us-west-2")))


# --- Cluster ----------------------------------------------------------------------------------------


def _cluster_args(**overrides) -> ClusterArgs:
    values = {
        "config": ClusterConfig(),
        "cluster_name": "llm",
        "vpc_id": "vpc-0a1b2c3d4e5f60001",
        "private_subnet_ids": list(SUBNETS.values()),
    }
    return ClusterArgs(**{**values, **overrides})


def test_cluster_needs_private_subnets_in_two_azs(mocks):
    args = _cluster_args(private_subnet_ids=[SUBNETS["us-west-2a"]])
    error = _raises("private_subnet_ids", lambda: Cluster("cluster", args))
    assert "at least two availability zones" in error.reason


def test_cluster_refuses_a_name_eks_refuses(mocks):
    _raises("cluster_name", lambda: Cluster("cluster", _cluster_args(cluster_name="-llm")))


# --- SystemNodeGroup --------------------------------------------------------------------------------


def test_system_nodes_need_a_subnet(mocks):
    args = SystemNodeGroupArgs(
        config=SystemNodesConfig(), cluster_name="llm", kubernetes_version="1.35", node_role_arn=ROLE, subnet_ids=[]
    )
    _raises("subnet_ids", lambda: SystemNodeGroup("system", args))


# --- EfaGpuNodeGroup --------------------------------------------------------------------------------


def test_gpu_nodes_need_a_subnet_in_their_one_az(mocks):
    args = _gpu_args(private_subnet_ids={"us-west-2b": SUBNETS["us-west-2b"]})
    error = _raises("private_subnet_ids", lambda: EfaGpuNodeGroup("gpu", args))
    assert "no subnet in us-west-2a" in error.reason
    assert mocks.registered == []


def test_gpu_nodes_refuse_a_catalog_entry_of_another_type(mocks):
    args = _gpu_args(instance=gpu_instance_type("p5.48xlarge"))
    _raises("instance", lambda: EfaGpuNodeGroup("gpu", args))


@pulumi.runtime.test
def test_gpu_nodes_launch_only_in_the_subnet_of_their_az(mocks):
    group = EfaGpuNodeGroup("gpu", _gpu_args())
    return group.node_group.subnet_ids.apply(
        lambda ids: ids == [SUBNETS["us-west-2a"]] or pytest.fail(f"subnets {ids}")
    )


# --- NodeAutoscaler ---------------------------------------------------------------------------------


def _autoscaler_args(**overrides) -> NodeAutoscalerArgs:
    values = {
        "config": NodeAutoscalerConfig(),
        "cluster_name": "llm",
        "region": "us-west-2",
        "image_tag": "v1.35.2",
        "oidc_provider_arn": OIDC_ARN,
        "oidc_issuer": OIDC_ISSUER,
        "provider": _provider(),
        "groups": [],
    }
    return NodeAutoscalerArgs(**{**values, **overrides})


def test_node_autoscaler_needs_a_group_to_scale(mocks):
    _raises("groups", lambda: NodeAutoscaler("autoscaler", _autoscaler_args()))


def test_node_autoscaler_refuses_an_image_tag_that_is_no_release(mocks):
    _raises("image_tag", lambda: NodeAutoscaler("autoscaler", _autoscaler_args(image_tag="latest")))


# --- LlmRayService ----------------------------------------------------------------------------------


def test_ray_service_tensor_parallelism_must_divide_the_node_gpus(mocks):
    serving = ServingConfig.model_validate(
        {
            "modelId": "Qwen/Qwen2.5-7B-Instruct",
            "image": DLC_IMAGE,
            "decode": {"tensorParallelSize": 8},
        }
    )
    args = RayServiceArgs(
        config=serving,
        instance=GPU,
        provider=_provider(),
        operator=_stub("operator"),
        device_plugins=[_stub("nvidia"), _stub("efa")],
        node_groups=[_stub("system"), _stub("gpu")],
    )
    error = _raises("config.decode.tensor_parallel_size", lambda: LlmRayService("llm", args))
    assert "8 does not divide the 4 GPU(s) of a g6e.12xlarge node" in error.reason


# --- Observability ----------------------------------------------------------------------------------


def _observability_args(alerting: dict, **overrides) -> ObservabilityArgs:
    values = {
        "config": ObservabilityConfig.model_validate({"alerting": alerting}),
        "instance": GPU,
        "provider": _provider(),
        "hourly_prices": {},
        "gpu_node_group": _stub("gpu"),
    }
    return ObservabilityArgs(**{**values, **overrides})


def test_observability_webhook_receiver_needs_its_url(mocks):
    args = _observability_args({"receiver": "webhook"}, oidc_provider_arn=OIDC_ARN, oidc_issuer=OIDC_ISSUER)
    _raises("alert_webhook_url", lambda: Observability("observability", args))


def test_observability_sns_receiver_needs_the_oidc_provider(mocks):
    args = _observability_args({"receiver": "sns"}, oidc_issuer=OIDC_ISSUER)
    _raises("oidc_provider_arn", lambda: Observability("observability", args))


# --- EbsStorage -------------------------------------------------------------------------------------


def test_storage_class_needs_a_zone(mocks):
    args = EbsStorageArgs(
        cluster_name="llm",
        cluster=_stub("eks"),
        oidc_provider_arn=OIDC_ARN,
        oidc_issuer=OIDC_ISSUER,
        provider=_provider(),
        zones=[],
        system_nodes=_stub("system"),
    )
    _raises("zones", lambda: EbsStorage("storage", args))
