"""What the program knows about instance types, kept small and explicit.

EC2's own facts about each GPU type (GPUs, GPU memory, EFA interfaces, vCPUs, memory, instance
store, network performance) come from `llm_pd_eks/data/gpu_instance_types.json`, generated from EC2
DescribeInstanceTypes data by `llm_pd_eks_tools/maint/gen_instance_types.py` (`make facts`; the file's `source`
names the capture); `make preflight` checks them against the live API. Facts EC2 does not state
(Ray's accelerator name, GPUDirect RDMA, datasheet figures, chart versions) are written here, each
with its source. Only types listed here may back the GPU node group: each needs those facts too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

INSTANCE_TYPES_FILE = Path(__file__).resolve().parent / "data" / "gpu_instance_types.json"
# Every EFA-capable GPU type EC2 lists, as generated (camelCase keys as in the file).
EC2_GPU_TYPES: dict[str, dict[str, Any]] = json.loads(INSTANCE_TYPES_FILE.read_text())["instanceTypes"]


def _network_gbps(performance: str) -> int:
    """EC2 `NetworkPerformance` ("100 Gigabit", "4x 100 Gigabit") in Gbit/s."""
    match = re.fullmatch(r"(?:(\d+)x )?(\d+) Gigabit", performance)
    if match is None:
        raise ValueError(f"NetworkPerformance {performance!r} is not 'N Gigabit' or 'Kx N Gigabit'")
    return int(match.group(1) or 1) * int(match.group(2))


def _ec2_facts(name: str) -> dict[str, Any]:
    """The GpuInstanceType fields EC2 states for `name`, from the generated table."""
    row = EC2_GPU_TYPES[name]
    return {
        "efa_interfaces": row["maximumEfaInterfaces"],
        "gpus": row["gpus"],
        "gpu_memory_mib": row["gpuMemoryMiB"],
        "gpu_memory_gib": round(row["gpuMemoryMiB"] / 1024, 1),
        "vcpus": row["vcpus"],
        "gpu_model": row["gpuName"],
        "network_gbps": _network_gbps(row["networkPerformance"]),
        "nvme_disks": row["nvmeDisks"],
        "nvme_disk_gb": row["nvmeDiskGB"],
        "memory_gib": row["memoryMiB"] // 1024,
    }


@dataclass(frozen=True, kw_only=True)
class GpuInstanceType:
    """One EFA-capable GPU instance type (one field a line in the table below, by keyword)."""

    name: str
    efa_interfaces: int  # = network cards carrying EFA; one interface each
    gpus: int
    gpu_memory_mib: int  # per GPU, as EC2 states it (GpuInfo.Gpus[].MemoryInfo.SizeInMiB)
    gpu_memory_gib: float  # the same in GiB, one decimal (L40S: 45,776 MiB = 44.7 GiB, not the "48 GB" label)
    vcpus: int
    gpu_model: str
    ray_accelerator_type: str  # as Ray names the GPU: derived from nvml_gpu_name (below), not the SKU
    network_gbps: int  # aggregate network bandwidth of the node (EC2 NetworkPerformance)
    # Local NVMe instance store (EC2 DescribeInstanceTypes `InstanceStorageInfo.Disks`): nodeadm
    # RAID0s it for kubelet/containerd state, so images and weights land on it, not on EBS.
    nvme_disks: int
    nvme_disk_gb: int
    # First aws-efa-k8s-device-plugin chart whose DaemonSet node affinity (`supportedInstanceLabels`)
    # lists this type; an older chart never schedules the plugin there (no `vpc.amazonaws.com/efa`).
    min_efa_chart_version: str
    # The GPU's NVML device name (nvidia-smi): Ray derives the node's `accelerator_type:<T>` resource
    # from it (ray._private.accelerators.nvidia_gpu, "NVIDIA A100-SXM4-40GB" -> "A100"); tests check
    # `ray_accelerator_type` against Ray's own derivation.
    nvml_gpu_name: str
    # GPUDirect RDMA over EFA (the device's RDMA read, FI_EFA_USE_DEVICE_RDMA). NIXL's LIBFABRIC
    # backend requires GPU Direct RDMA (ai-dynamo/nixl src/plugins/libfabric/README.md); on EC2 only the
    # P-series from p4d has it, g5/g6e do not (AWS in aws/aws-ofi-nccl#547, 2025).
    efa_rdma_read: bool
    memory_gib: int  # instance RAM (EC2 DescribeInstanceTypes MemoryInfo); pods get a share of it
    # 2 MiB huge pages a worker pod requests for libfabric's EFA provider (its bounce and packet
    # buffers); the EKS EFA guide's example pod requests 5120Mi.
    efa_hugepages_2mi_mib: int
    # --- sizing: per-GPU roofline figures and the KV-transfer band; sources at each constant ---
    peak_bf16_dense_tflops: float  # per GPU, dense (no 2:4 sparsity), BF16 tensor cores, FP32 accumulate
    memory_bandwidth_gbytes_s: float  # per GPU, HBM/GDDR bandwidth in gigabytes (10^9 B) per second
    # KV transfer NIXL actually achieved over EFA between two nodes of this type, gigabits/s per node
    # (same unit as network_gbps); None where no public measurement exists.
    nixl_efa_measured_gbps: Optional[float] = None
    nixl_efa_measured_source: Optional[str] = None  # where the figure above was published
    single_flow_tcp_gbps: float  # one TCP flow between two nodes of the cluster placement group

    @property
    def family_quota_code(self) -> str:
        """Service Quotas code for the on-demand vCPU quota of this family."""
        return "L-417A185B" if self.name.startswith("p") else "L-DB2E81BA"


# Sources of the sizing figures. Peak dense BF16 TFLOPS and memory bandwidth are NVIDIA
# datasheet figures per GPU (the "with sparsity" numbers halved): L40S datasheet (362.05 TF, 864 GB/s);
# A100 SXM datasheet (312 TF; 1,555 GB/s for 40 GB, 2,039 GB/s for 80 GB); H100 SXM5 datasheet
# (989 TF, 3.35 TB/s); H200 SXM datasheet (989 TF, 4.8 TB/s). The A10G is an AWS-only variant of
# the A10 with no NVIDIA datasheet: 600 GB/s (same GDDR6 as the A10) and ~70 TF dense FP16/BF16
# tensor as reported by Baseten ("NVIDIA A10 vs A10G for ML model inference"), not the A10's 125 TF.
# Per GPU model: what every instance type carrying it shares (the A100's bandwidth and NVML name differ
# between its 40 GB and 80 GB parts: set per type below).
_L40S = {
    "ray_accelerator_type": "L40S",
    "nvml_gpu_name": "NVIDIA L40S",
    "efa_rdma_read": False,
    "peak_bf16_dense_tflops": 362.05,
    "memory_bandwidth_gbytes_s": 864.0,
}
_A10G = {
    "ray_accelerator_type": "A10G",
    "nvml_gpu_name": "NVIDIA A10G",
    "efa_rdma_read": False,
    "peak_bf16_dense_tflops": 70.0,
    "memory_bandwidth_gbytes_s": 600.0,
}
_A100 = {"ray_accelerator_type": "A100", "efa_rdma_read": True, "peak_bf16_dense_tflops": 312.0}
_A100_40G_GBYTES_S, _A100_80G_GBYTES_S = 1555.0, 2039.0
_H100 = {
    "ray_accelerator_type": "H100",
    "nvml_gpu_name": "NVIDIA H100 80GB HBM3",
    "efa_rdma_read": True,
    "peak_bf16_dense_tflops": 989.0,
    "memory_bandwidth_gbytes_s": 3350.0,
}
_H200 = {
    "ray_accelerator_type": "H200",
    "nvml_gpu_name": "NVIDIA H200",
    "efa_rdma_read": True,
    "peak_bf16_dense_tflops": 989.0,
    "memory_bandwidth_gbytes_s": 4800.0,
}

# AWS "Amazon EC2 instance network bandwidth": a single TCP/UDP flow is limited to 5 Gbps between
# instances, and to 10 Gbps between instances in the same cluster placement group (our GPU nodes are).
# This is what NIXL's UCX backend falls back to when it cannot drive EFA (ray-project/ray PR #62339
# measured ~0.3 GB/s for that software path: the band's floor is optimistic for it).
SINGLE_FLOW_TCP_PLACEMENT_GROUP_GBPS = 10.0

# The only public measurement of NIXL over EFA we know of: about 9.6 GB/s (76.8 Gbit/s) between two
# p5.48xlarge nodes, ai-dynamo/dynamo PR #7764 (the PR text itself could not be
# read offline). Some 40x below the node's 3,200 Gbit/s line rate.
_P5_NIXL_EFA_GBPS = 9.6 * 8
_P5_NIXL_EFA_SOURCE = "ai-dynamo/dynamo PR #7764 (~9.6 GB/s NIXL over EFA, p5.48xlarge pair)"


# 2 MiB huge pages per worker pod for libfabric's EFA provider: the EKS EFA guide's example pod's 5120Mi.
EFA_HUGEPAGES_2MI_MIB = 5120


def _gpu_type(name: str, min_efa_chart_version: str, **facts: Any) -> GpuInstanceType:
    """A table entry: EC2's facts for `name`, the GPU model's `facts`, and what every type here shares."""
    return GpuInstanceType(
        name=name,
        **_ec2_facts(name),
        min_efa_chart_version=min_efa_chart_version,
        efa_hugepages_2mi_mib=EFA_HUGEPAGES_2MI_MIB,
        single_flow_tcp_gbps=SINGLE_FLOW_TCP_PLACEMENT_GROUP_GBPS,
        **facts,
    )


GPU_INSTANCE_TYPES: dict[str, GpuInstanceType] = {
    t.name: t
    for t in (
        *(_gpu_type(f"g6e.{size}", "v0.5.5", **_L40S) for size in ("8xlarge", "12xlarge", "24xlarge", "48xlarge")),
        _gpu_type("g5.48xlarge", "v0.4.2", **_A10G),
        _gpu_type(
            "p4d.24xlarge",
            "v0.4.2",
            **_A100,
            nvml_gpu_name="NVIDIA A100-SXM4-40GB",
            memory_bandwidth_gbytes_s=_A100_40G_GBYTES_S,
        ),
        _gpu_type(
            "p4de.24xlarge",
            "v0.4.4",
            **_A100,
            nvml_gpu_name="NVIDIA A100-SXM4-80GB",
            memory_bandwidth_gbytes_s=_A100_80G_GBYTES_S,
        ),
        _gpu_type(
            "p5.48xlarge",
            "v0.4.2",
            **_H100,
            nixl_efa_measured_gbps=_P5_NIXL_EFA_GBPS,
            nixl_efa_measured_source=_P5_NIXL_EFA_SOURCE,
        ),
        _gpu_type("p5e.48xlarge", "v0.5.5", **_H200),
        _gpu_type("p5en.48xlarge", "v0.5.6", **_H200),
    )
}


def chart_version_key(version: str) -> tuple[int, ...]:
    """`v0.5.30` / `0.5.30` as a comparable tuple (chart versions here are plain x.y.z)."""
    return tuple(int(p) for p in version.lstrip("v").split("."))


def unsupported_type(name: str) -> str:
    """Why `name` cannot back the GPU node group, naming the types that can."""
    return (
        f"{name!r} is not an EFA-capable GPU instance type this project supports; "
        f"choose one of {', '.join(sorted(GPU_INSTANCE_TYPES))}"
    )


def gpu_instance_type(name: str) -> GpuInstanceType:
    """The catalog entry for `name`; KeyError names the supported types."""
    try:
        return GPU_INSTANCE_TYPES[name]
    except KeyError:
        raise KeyError(unsupported_type(name)) from None


# --- Cluster Autoscaler image per Kubernetes minor -------------------------------------
# Cluster Autoscaler is released per Kubernetes minor and supports only that minor
# (https://github.com/kubernetes/autoscaler/tree/master/cluster-autoscaler#releases). Latest
# patch tags of github.com/kubernetes/autoscaler (`cluster-autoscaler-<version>`) as of 2026-08-22;
# images at registry.k8s.io/autoscaling/cluster-autoscaler:<tag>.
CLUSTER_AUTOSCALER_IMAGE = "registry.k8s.io/autoscaling/cluster-autoscaler"
CLUSTER_AUTOSCALER_TAGS: dict[str, str] = {
    "1.33": "v1.33.6",
    "1.34": "v1.34.5",
    "1.35": "v1.35.2",
    "1.36": "v1.36.1",
}
# --- observability: the KV-throughput floor below which NIXL is taken to be off EFA ---------

# Half the reference: vLLM's NIXL throughput is bytes over transfer time per transfer (see
# llm_pd_eks/alerts.py), and Ray reconstructs histogram sums from bucket midpoints, so the measured
# figure is noisy; a NIXL that fell back to TCP (UCX) runs many times below the reference, not 2x.
KV_FLOOR_FRACTION = 0.5
