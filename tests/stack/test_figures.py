"""The preview's figures against hand-worked numbers: KV-cache bytes and transfer times, cost, prices."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import STACKS

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import SystemNodesConfig
from llm_pd_eks.models import MODELS, ModelSpec
from llm_pd_eks_tools.core.stack import load_stack_config, stack_file
from llm_pd_eks_tools.plan.preview.figures import (
    PriceTable,
    estimate_cost,
    key_figures,
    kv_transfer,
    load_prices,
    node_groups,
    transfer_seconds,
)
from llm_pd_eks_tools.plan.preview.mockrun import run_program

GIB = 1 << 30


def stack_yaml(stack: str) -> dict:
    """The stack file's raw `config:` block (read here, not through the config model under test)."""
    return yaml.safe_load(stack_file(stack).read_text())["config"]


# -- KV cache ------------------------------------------------------------------------------------
LLAMA_8B = ModelSpec("llama-8b", 8.0, layers=32, kv_heads=8, head_dim=128, weights_gib_bf16=15.0)


def test_kv_bytes_llama_8b_by_hand():
    # Llama-3.1-8B: 32 layers, 8 KV heads, head dim 128. bf16 (2 bytes):
    # 2 x 32 x 8 x 128 x 2 = 131,072 B per token (128 KiB); x 8192 tokens = 1,073,741,824 B = 1 GiB.
    assert LLAMA_8B.kv_bytes_per_token(2) == 131_072
    assert LLAMA_8B.kv_bytes_per_token(2) * 8192 == GIB
    # fp8 halves it: 65,536 B per token.
    assert LLAMA_8B.kv_bytes_per_token(1) == 65_536
    # The catalogue's Llama-3.1-8B has exactly this shape.
    assert MODELS["meta-llama/Llama-3.1-8B-Instruct"].kv_bytes_per_token(2) == 131_072


def test_kv_transfer_times_by_hand():
    kv = kv_transfer(LLAMA_8B, 8192, "auto", 2, efa_gbps=100, tcp_gbps=10)
    assert kv.bytes == GIB
    # 1 GiB = 8,589,934,592 bits; at 100 Gbit/s = 1e11 bit/s: 0.08589934592 s (85.9 ms).
    assert kv.efa_seconds == pytest.approx(0.08589934592)
    # Single-flow TCP at 10 Gbit/s (cluster placement group limit): 0.8589934592 s, 10x slower.
    assert kv.tcp_seconds == pytest.approx(0.8589934592)
    assert kv.slowdown == pytest.approx(10.0)
    fp8 = kv_transfer(LLAMA_8B, 8192, "fp8", 1, efa_gbps=3200, tcp_gbps=10)
    # 512 MiB = 4,294,967,296 bits over 3.2e12 bit/s = 1.342 ms.
    assert fp8.efa_seconds == pytest.approx(0.001342177280)


def test_kv_transfer_with_the_catalogue_models():
    # Qwen2.5-7B: 28 layers, 4 KV heads, head dim 128 -> 2 x 28 x 4 x 128 x 2 B = 57,344 B per token;
    # 8192 tokens = 469,762,048 B (448 MiB).
    qwen = MODELS["Qwen/Qwen2.5-7B-Instruct"]
    assert (qwen.layers, qwen.kv_heads, qwen.head_dim) == (28, 4, 128)
    assert kv_transfer(qwen, 8192, "auto", 2, efa_gbps=100, tcp_gbps=10).bytes == 469_762_048
    # Llama-3.3-70B: 80 layers, 8 KV heads, 128 -> 2 x 80 x 8 x 128 x 1 B (fp8) = 163,840 B per token;
    # 32,768 tokens = 5,368,709,120 B = 5 GiB.
    llama70b = MODELS["meta-llama/Llama-3.3-70B-Instruct"]
    assert kv_transfer(llama70b, 32768, "fp8", 1, efa_gbps=3200, tcp_gbps=10).bytes == 5 * GIB


def test_efa_beats_single_flow_tcp_on_every_catalogue_type():
    for instance in GPU_INSTANCE_TYPES.values():
        efa, tcp = transfer_seconds(GIB, instance.network_gbps), transfer_seconds(GIB, instance.single_flow_tcp_gbps)
        assert efa < tcp, instance.name


# -- cost ----------------------------------------------------------------------------------------
TABLE = PriceTable(
    regions={
        "xx-test-1": {
            "instances": {"big.gpu": 1.5, "small.cpu": 0.25},
            "nat_gateway_hour": 0.05,
            "eks_cluster_hour": 0.10,
        }
    },
    as_of="test",
    source="test",
    about="test",
)


def test_cost_by_hand():
    cost = estimate_cost(TABLE, "xx-test-1", [("big.gpu", 2), ("small.cpu", 3)], nat_gateways=2, eks_clusters=1)
    # 2 x 1.50 + 3 x 0.25 + 2 x 0.05 + 1 x 0.10 = 3.00 + 0.75 + 0.10 + 0.10 = 3.95 per hour;
    # x 730 hours = 2,883.50 per month.
    assert cost.hourly == pytest.approx(3.95)
    assert cost.monthly == pytest.approx(2883.50)
    assert [line.item for line in cost.lines] == ["big.gpu", "small.cpu", "NAT gateway", "EKS control plane"]
    assert not cost.missing


def test_cost_names_what_it_cannot_price():
    cost = estimate_cost(TABLE, "xx-test-1", [("big.gpu", 1), ("mystery.type", 4)], nat_gateways=0, eks_clusters=0)
    assert cost.hourly == pytest.approx(1.5)
    assert cost.missing == ["mystery.type in xx-test-1"]
    assert estimate_cost(TABLE, "zz-none-9", [("big.gpu", 1)], 0, 0).missing[0].startswith("region zz-none-9")


def test_price_table_covers_every_type_the_stacks_can_use():
    prices = load_prices()
    assert prices.as_of and prices.source and "approximate" in prices.about.lower()
    needed = set(GPU_INSTANCE_TYPES) | {SystemNodesConfig().instance_type}
    for stack in STACKS:
        cfg = stack_yaml(stack)
        region = cfg["aws:region"]
        assert region in prices.regions, f"{stack}: no prices for {region}"
        table = prices.regions[region]
        system_type = (cfg.get("llm-pd-eks:systemNodes") or {}).get("instanceType")
        missing = sorted(t for t in needed | {system_type} - {None} if t not in table["instances"])
        assert not missing, f"{region}: no price for {missing}"
        assert table["nat_gateway_hour"] > 0 and table["eks_cluster_hour"] > 0


@pytest.mark.parametrize("stack", STACKS)
def test_stack_figures_match_its_config(stack, programs):
    """The plan's figures agree with Pulumi.<stack>.yaml, priced from the table by hand."""
    run = programs(stack)
    cfg = stack_yaml(stack)
    gpu_cfg = cfg["llm-pd-eks:gpuNodes"]
    sys_cfg = cfg.get("llm-pd-eks:systemNodes") or {}
    net = cfg["llm-pd-eks:network"]
    region = cfg["aws:region"]
    figures = key_figures(run, None, region)
    gpu = figures.gpu
    assert gpu is not None and gpu.instance_type == gpu_cfg["instanceType"]
    assert gpu.availability_zones == (gpu_cfg["availabilityZone"],)
    assert gpu.desired_size == gpu_cfg["desiredSize"]
    # One EFA interface per network card, as the catalogue says for the type.
    assert gpu.efa_interfaces == GPU_INSTANCE_TYPES[gpu_cfg["instanceType"]].efa_interfaces
    nat = len(net["availabilityZones"]) if net.get("natGateways") == "perAz" else 1
    assert figures.nat_gateways == nat
    table = load_prices().regions[region]
    system_type = sys_cfg.get("instanceType", SystemNodesConfig().instance_type)
    system_count = sys_cfg.get("desiredSize", SystemNodesConfig().desired_size)
    hourly = (
        gpu_cfg["desiredSize"] * table["instances"][gpu_cfg["instanceType"]]
        + system_count * table["instances"][system_type]
        + nat * table["nat_gateway_hour"]
        + table["eks_cluster_hour"]
    )
    assert figures.cost.hourly == pytest.approx(hourly)
    assert figures.cost.monthly == pytest.approx(hourly * 730)
    # No config given: the KV figure says why it is missing instead of guessing.
    assert figures.kv_transfer.status == "n/a" and "serving" in figures.kv_transfer.reason


def test_dev_shaped_cost_by_hand():
    # 2 x g6e.12xlarge (10.49264) + 2 x m7i.xlarge (0.2016) + 1 NAT (0.045) + EKS (0.10), us-west-2
    # = 20.98528 + 0.4032 + 0.045 + 0.10 = 21.53348 per hour; x 730 = 15,719.4404 per month.
    # (Unit prices as in llm_pd_eks/data/prices.json; the shape is set here, not read from Pulumi.dev.yaml.)
    config, secret_keys = load_stack_config("dev")
    config.pop("llm-pd-eks:serving")  # a g6e cannot serve (no GPUDirect RDMA); the cost shape needs no serving
    config["aws:region"] = "us-west-2"
    config["llm-pd-eks:network"] = json.dumps(
        {"vpcCidr": "10.10.0.0/16", "availabilityZones": ["us-west-2a", "us-west-2b"], "natGateways": "single"}
    )
    config["llm-pd-eks:gpuNodes"] = json.dumps(
        {"instanceType": "g6e.12xlarge", "availabilityZone": "us-west-2a", "minSize": 2, "desiredSize": 2, "maxSize": 2}
    )
    config["llm-pd-eks:systemNodes"] = json.dumps(
        {"instanceType": "m7i.xlarge", "minSize": 2, "desiredSize": 2, "maxSize": 3}
    )
    run = run_program("dev", config, secret_keys)
    figures = key_figures(run, None, "us-west-2")
    assert figures.cost.hourly == pytest.approx(21.53348)
    assert figures.cost.monthly == pytest.approx(15719.4404)
    # At max size the system group has 3 nodes: + 0.2016 = 21.73508 per hour.
    assert figures.cost.at_max_size_hourly == pytest.approx(21.73508)


def test_node_groups_read_instance_types_from_the_plan(programs):
    groups = {g.name: g for g in node_groups(programs("dev"))}
    gpu = [g for g in groups.values() if g.gpu]
    assert len(gpu) == 1 and gpu[0].efa_interfaces >= 1
    assert all(g.efa_interfaces == 0 for g in groups.values() if not g.gpu)
