"""Config validation of the serving layer: each mistake refused with a message naming its key.

Numbers in the expected messages are worked by hand from the catalog (llm_pd_eks/catalog.py) and
the model table (llm_pd_eks/models.py), as noted next to each case.
"""

from __future__ import annotations

import pytest
from helpers import config_problems, merged, validate_values

from llm_pd_eks_tools.core.stackfile import PROJECT

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.0-py311-cu128"

# p4d.24xlarge: 8x A100 40 GiB, 4 EFA, GPUDirect RDMA; two GPU nodes at most.
GOOD = {
    "network": {"vpcCidr": "10.0.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"]},
    "gpuNodes": {"instanceType": "p4d.24xlarge", "availabilityZone": "us-west-2a", "maxSize": 2},
    "serving": {
        "modelId": "Qwen/Qwen2.5-7B-Instruct",
        "image": IMAGE,
        "maxModelLen": 8192,
        "prefill": {"tensorParallelSize": 1, "minReplicas": 1, "maxReplicas": 4},
        "decode": {"tensorParallelSize": 1, "minReplicas": 1, "maxReplicas": 4},
    },
}


def validate(overrides: dict, secret_keys=()):
    return validate_values(merged(GOOD, overrides), secret_keys=secret_keys)


def problems(overrides: dict, secret_keys=()) -> list[str]:
    return config_problems(merged(GOOD, overrides), secret_keys=secret_keys)


def test_good_serving_config_and_its_defaults():
    cfg = validate({})
    assert cfg.serving.model_id == "Qwen/Qwen2.5-7B-Instruct"
    assert cfg.serving.kv_cache_dtype == "auto" and cfg.serving.kv_cache_dtype_bytes == 2
    assert cfg.serving.public_endpoint is False
    assert cfg.kuberay.chart_version == "1.7.0"
    assert cfg.device_plugins.nvidia_chart_version and cfg.device_plugins.efa_chart_version


def test_serving_may_be_left_out():
    assert validate_values({k: v for k, v in GOOD.items() if k != "serving"}).serving is None


def test_unknown_model_lists_the_known_ones():
    (p,) = problems({"serving": {"modelId": "mistralai/Mistral-7B"}})
    assert p.startswith(f"{PROJECT}:serving.modelId: 'mistralai/Mistral-7B' is not a model")
    assert "Qwen/Qwen2.5-7B-Instruct" in p and "meta-llama/Llama-3.3-70B-Instruct" in p


@pytest.mark.parametrize(
    "image, words",
    [
        ("123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:latest", "'latest'"),
        ("123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm", "no tag"),
        ("rayproject/ray-llm:2.60.0-py311-cu128", "not an ECR image URI"),
    ],
)
def test_image_must_be_a_tagged_ecr_uri(image, words):
    (p,) = problems({"serving": {"image": image}})
    assert p.startswith(f"{PROJECT}:serving.image: ") and words in p


DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "image",
    [
        f"public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0.0@{DIGEST}",
        f"public.ecr.aws/deep-learning-containers/ray@{DIGEST}",
        f"123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.0@{DIGEST}",
    ],
)
def test_an_image_may_carry_its_digest(image):
    assert validate_values(merged(GOOD, {"serving": {"image": image}})).serving.image == image


@pytest.mark.parametrize(
    "image",
    [
        "public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0.0@sha256:" + "0" * 63,  # short
        "public.ecr.aws/deep-learning-containers/ray@sha256:" + "A" * 64,  # upper-case hex
        "public.ecr.aws/deep-learning-containers/ray@sha512:" + "0" * 128,  # not what ECR writes
    ],
)
def test_a_malformed_digest_is_refused(image):
    (p,) = problems({"serving": {"image": image}})
    assert "not an ECR image URI" in p


def test_tensor_parallel_size_must_be_a_power_of_two():
    (p,) = problems({"serving": {"decode": {"tensorParallelSize": 3}}})
    assert p == f"{PROJECT}:serving.decode.tensorParallelSize: 3 is not a power of two (1, 2, 4, 8)"


def test_tensor_parallel_size_must_divide_the_node_gpus():
    # p4d.24xlarge has 8 GPUs; TP 16 cannot live on one node
    (p,) = problems({"serving": {"prefill": {"tensorParallelSize": 16}}})
    assert "serving.prefill.tensorParallelSize: 16 does not divide the 8 GPU(s) of a p4d.24xlarge node" in p


def test_weights_must_fit_the_tensor_parallel_group():
    # Qwen2.5-32B: 61 GiB at bf16, TP 1 -> 61.0 GiB on one A100 40 GB; vLLM budgets 0.9 x 40 = 36.0 GiB
    prefill, decode = problems({"serving": {"modelId": "Qwen/Qwen2.5-32B-Instruct"}})
    assert prefill.startswith(f"{PROJECT}:serving.prefill.tensorParallelSize: ")
    assert decode.startswith(f"{PROJECT}:serving.decode.tensorParallelSize: ")
    assert "61.0 GiB per GPU at TP 1" in prefill and "36.0 GiB" in prefill
    # at TP 2: 30.5 GiB per GPU fits (2 replicas a node: maxReplicas 2 each keeps to 1 + 1 nodes)
    tp2 = {"tensorParallelSize": 2, "maxReplicas": 2}
    ok = validate({"serving": {"modelId": "Qwen/Qwen2.5-32B-Instruct", "prefill": tp2, "decode": tp2}})
    assert ok.serving.prefill.tensor_parallel_size == 2


def test_replicas_must_fit_the_gpu_node_group():
    # TP 1 on 8-GPU nodes: 8 replicas a node. prefill max 9 -> 2 nodes, decode max 4 -> 1 node: 3 > maxSize 2
    (p,) = problems({"serving": {"prefill": {"maxReplicas": 9}}})
    assert "2 prefill + 1 decode node(s) of p4d.24xlarge exceed gpuNodes.maxSize (2)" in p
    assert p.startswith(f"{PROJECT}:serving.prefill.maxReplicas")
    # with room for three nodes it is fine
    assert validate({"serving": {"prefill": {"maxReplicas": 9}}, "gpuNodes": {"maxSize": 3}}).serving


def test_min_replicas_above_max_replicas():
    (p,) = problems({"serving": {"decode": {"minReplicas": 3, "maxReplicas": 2}}})
    assert p == f"{PROJECT}:serving.decode: minReplicas (3) is greater than maxReplicas (2)"


def test_kv_cache_dtype_is_auto_or_fp8():
    assert validate({"serving": {"kvCacheDtype": "fp8"}}).serving.kv_cache_dtype_bytes == 1
    (p,) = problems({"serving": {"kvCacheDtype": "int8"}})
    assert p.startswith(f"{PROJECT}:serving.kvCacheDtype: ")


def test_unknown_serving_key_is_refused_by_path():
    (p,) = problems({"serving": {"prefill": {"tensorParalelSize": 2}}})
    assert p == f"{PROJECT}:serving.prefill.tensorParalelSize: unknown key"


def test_chart_versions_are_pinned():
    problems_ = problems({"kuberay": {"chartVersion": "1.6.0"}, "devicePlugins": {"nvidiaChartVersion": "latest"}})
    assert any(p.startswith(f"{PROJECT}:kuberay.chartVersion: '1.6.0' is not a 1.7.x release") for p in problems_)
    assert any(p.startswith(f"{PROJECT}:devicePlugins.nvidiaChartVersion: 'latest'") for p in problems_)


def test_every_field_mistake_is_reported_at_once():
    found = problems({"serving": {"modelId": "nope/nope", "image": "nope:latest", "maxModelLen": 0}})
    assert sorted(p.split(":")[1].split(" ")[0] for p in found) == [
        "serving.image",
        "serving.maxModelLen",
        "serving.modelId",
    ]


def test_hf_token_in_plain_text_is_refused():
    (p,) = problems({"hfToken": "hf_plain"})
    assert p == (
        f"{PROJECT}:hfToken: set in plain text; store it encrypted with `pulumi config set --secret hfToken <value>`"
    )
    assert "hf_plain" not in p


def test_hf_token_as_a_secret_is_accepted_and_kept_out_of_the_model():
    cfg = validate({"hfToken": "hf_secret"}, secret_keys=[f"{PROJECT}:hfToken"])
    assert "hf_secret" not in cfg.model_dump_json()


# --- the fabric, gated models, roll-outs, the endpoint -----------------------------------


@pytest.mark.parametrize("instance_type", ["g6e.12xlarge", "g5.48xlarge"])
def test_a_gpu_type_without_gpudirect_rdma_cannot_serve(instance_type):
    (p,) = problems({"gpuNodes": {"instanceType": instance_type}})
    assert p.startswith(f"{PROJECT}:gpuNodes.instanceType: {instance_type} has no GPUDirect RDMA over EFA")
    assert "NIXL over LIBFABRIC" in p and "p4d.24xlarge" in p and "g6e" not in p.split("choose one of")[1]
    # the same type is fine for a stack without a serving layer
    values = merged(GOOD, {"gpuNodes": {"instanceType": instance_type}})
    assert validate_values({k: v for k, v in values.items() if k != "serving"}).gpu_nodes.instance_type == instance_type


def test_a_gated_model_needs_a_secret_token():
    llama = {"serving": {"modelId": "meta-llama/Llama-3.1-8B-Instruct"}}
    (p,) = problems(llama)
    assert p.startswith(f"{PROJECT}:hfToken: not set, but serving.modelId meta-llama/Llama-3.1-8B-Instruct is gated")
    assert "pulumi config set --secret hfToken" in p
    # with a secret token it validates; an open model needs none
    assert validate({**llama, "hfToken": "hf_x"}, secret_keys=[f"{PROJECT}:hfToken"]).serving
    assert validate({}).serving.model_id == "Qwen/Qwen2.5-7B-Instruct"
    # a token in plain text is refused as such (one problem, not two)
    (plain,) = problems({**llama, "hfToken": "hf_x"})
    assert "set in plain text" in plain


def test_upgrade_strategy_defaults_to_recreate_and_new_cluster_needs_room():
    assert validate({}).serving.upgrade_strategy == "Recreate"
    # NewCluster: the serving cluster at max (1 + 1 nodes) plus a new one at min (1 + 1) = 4 > maxSize 2
    (p,) = problems({"serving": {"upgradeStrategy": "NewCluster"}})
    assert p == (
        f"{PROJECT}:serving.upgradeStrategy: NewCluster needs 2 GPU node(s) for the serving cluster at its maximum "
        "plus 2 for the new cluster, 4 in all, more than gpuNodes.maxSize (2); "
        "raise maxSize, lower cutoverReplicas or use Recreate"
    )
    assert validate({"serving": {"upgradeStrategy": "NewCluster"}, "gpuNodes": {"maxSize": 4}}).serving
    (bad,) = problems({"serving": {"upgradeStrategy": "NewClusterWithIncrementalUpgrade"}})
    assert bad.startswith(f"{PROJECT}:serving.upgradeStrategy: ")


def test_endpoint_name_must_be_a_service_name():
    assert validate({"serving": {"endpointName": "chat-api"}}).serving.endpoint_name == "chat-api"
    (p,) = problems({"serving": {"endpointName": "Chat_API"}})
    assert p.startswith(f"{PROJECT}:serving.endpointName: 'Chat_API' is not a DNS-1035 label")


def test_every_new_serving_field_is_described():
    from llm_pd_eks.config import ServingConfig

    for name in ("upgrade_strategy", "endpoint_name", "endpoint_annotations"):
        assert ServingConfig.model_fields[name].description


def test_cross_section_problems_are_reported_together():
    """A serving layout problem does not hide a fabric or version problem found by another check."""
    found = problems(
        {
            "gpuNodes": {"instanceType": "g5.48xlarge"},  # no GPUDirect RDMA (the fabric check)
            "serving": {"prefill": {"tensorParallelSize": 16}},  # TP beyond the node's 8 GPUs (the layout check)
            "devicePlugins": {"efaChartVersion": "v0.4.0"},  # older than g5's first chart (the version check)
        }
    )
    assert [p.split(":")[1].split(" ")[0] for p in found] == [
        "serving.prefill.tensorParallelSize",
        "devicePlugins.efaChartVersion",
        "gpuNodes.instanceType",
    ]
