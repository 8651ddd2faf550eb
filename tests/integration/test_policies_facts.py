"""The GPU instance-type table is one set of facts: generated from EC2 DescribeInstanceTypes data,
carried twice (program and pack), read by both. Likewise KubeRay's resource-name rules: the program's
llm_pd_eks/ray_resources.py, carried by the pack as generated data."""

from __future__ import annotations

import gzip
import json

import pytest

from llm_pd_eks import ray_resources
from llm_pd_eks.catalog import EC2_GPU_TYPES, GPU_INSTANCE_TYPES
from llm_pd_eks_policy import ray_resources as pack_ray_resources
from llm_pd_eks_policy.efa_table import DATA_FILE, EFA_GPU_TYPES, EFA_NETWORK_CARDS, GPUS_PER_INSTANCE
from llm_pd_eks_tools.maint import gen_instance_types, gen_ray_resources


def test_both_copies_equal_what_the_generator_produces():
    text = gen_instance_types.generate(*gen_instance_types.moto_source())
    for path in gen_instance_types.OUTPUTS:
        assert path.read_text() == text, f"{path} is stale: run `make facts`"
    assert DATA_FILE in gen_instance_types.OUTPUTS


def test_check_mode_reports_a_stale_copy(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "gpu_instance_types.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(gen_instance_types, "OUTPUTS", (stale,))
    monkeypatch.setattr(gen_instance_types, "ROOT", tmp_path)
    assert gen_instance_types.main(["--check"]) == 1
    assert "is stale: run `make facts`" in capsys.readouterr().err


def test_table_holds_every_efa_gpu_type_ec2_lists():
    path, _ = gen_instance_types.moto_source()
    raw = json.loads(gzip.decompress(path.read_bytes()))
    expected = {
        n
        for n, v in raw.items()
        if (v.get("GpuInfo") or {}).get("Gpus") and v["NetworkInfo"].get("EfaSupported") is True
    }
    assert set(EFA_GPU_TYPES) == expected
    # the types the task names, p6-b200 among them
    assert {
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
        "g6e.48xlarge",
        "gr6.8xlarge",
    } <= expected
    assert not {n for n, v in raw.items() if not (v.get("GpuInfo") or {}).get("Gpus")} & set(EFA_GPU_TYPES)


def test_facts_are_ec2s_figures():
    l40s = EC2_GPU_TYPES["g6e.12xlarge"]
    assert (l40s["gpuName"], l40s["gpus"], l40s["gpuMemoryMiB"]) == ("L40S", 4, 45776)
    assert GPU_INSTANCE_TYPES["g6e.12xlarge"].gpu_memory_gib == 44.7
    b200 = EC2_GPU_TYPES["p6-b200.48xlarge"]
    assert (b200["gpuName"], b200["maximumEfaInterfaces"], b200["maximumNetworkCards"]) == ("B200", 8, 8)
    # p6-b300: 17 network cards, card 0 carries no EFA; the pack expects EFA on cards 1..16
    assert EFA_NETWORK_CARDS["p6-b300.48xlarge"] == tuple(range(1, 17))
    assert EFA_GPU_TYPES["p6-b300.48xlarge"] == 16


def test_program_catalog_reads_the_same_facts_as_the_pack():
    for name, entry in GPU_INSTANCE_TYPES.items():
        row = EC2_GPU_TYPES[name]
        assert entry.efa_interfaces == EFA_GPU_TYPES[name] == row["maximumEfaInterfaces"]
        assert entry.gpus == GPUS_PER_INSTANCE[name] == row["gpus"]
        assert entry.gpu_memory_mib == row["gpuMemoryMiB"]
        assert entry.vcpus == row["vcpus"] and entry.memory_gib * 1024 == row["memoryMiB"]
        assert entry.gpu_model == row["gpuName"]


def test_the_packs_resource_rules_equal_what_the_generator_writes_from_the_program():
    assert gen_ray_resources.OUTPUT == pack_ray_resources.DATA_FILE
    assert pack_ray_resources.DATA_FILE.read_text() == gen_ray_resources.generate(), "stale: run `make facts`"


def test_resource_rules_check_mode_reports_a_stale_copy(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "kuberay_resource_flags.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(gen_ray_resources, "OUTPUT", stale)
    monkeypatch.setattr(gen_ray_resources, "ROOT", tmp_path)
    assert gen_ray_resources.main(["--check"]) == 1
    assert "is stale: run `make facts`" in capsys.readouterr().err
    assert gen_ray_resources.main([]) == 0 and stale.read_text() == gen_ray_resources.generate()


@pytest.mark.parametrize(
    "name", ["cpu", "CPU", "Memory", "prefill_gpu", "GPU", "nvidia.com/mig-1g.5gb", "prefill_slot"]
)
def test_the_pack_reads_the_rules_the_program_applies(name):
    assert pack_ray_resources.reinterpreted_flag(name) == ray_resources.operator_reinterpretation(name)
