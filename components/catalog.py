"""What the program knows about instance types, kept small and explicit.

EFA interface counts come from EC2 DescribeInstanceTypes (`NetworkInfo.EfaInfo.MaximumEfaInterfaces`);
`make preflight` checks them against the live API so this table cannot silently drift.
Only types listed here may back the GPU node group: each needs a known EFA count to build
its launch template (one EFA interface per network card).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class GpuInstanceType:
    """One EFA-capable GPU instance type (one field a line in the table below, by keyword)."""

    name: str
    efa_interfaces: int  # = network cards carrying EFA; one interface each
    gpus: int
    gpu_memory_gib: int  # per GPU
    vcpus: int
    gpu_model: str
    ray_accelerator_type: str  # as Ray names the GPU: derived from nvml_gpu_name (below), not the SKU
    network_gbps: int  # aggregate EFA bandwidth of the node
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

    @property
    def family_quota_code(self) -> str:
        """Service Quotas code for the on-demand vCPU quota of this family."""
        return "L-417A185B" if self.name.startswith("p") else "L-DB2E81BA"


GPU_INSTANCE_TYPES: dict[str, GpuInstanceType] = {
    t.name: t
    for t in (
        GpuInstanceType(
            name="g6e.8xlarge",
            efa_interfaces=1,
            gpus=1,
            gpu_memory_gib=48,
            vcpus=32,
            gpu_model="L40S",
            ray_accelerator_type="L40S",
            network_gbps=25,
            nvml_gpu_name="NVIDIA L40S",
            efa_rdma_read=False,
            memory_gib=256,
            efa_hugepages_2mi_mib=5120,
        ),
        GpuInstanceType(
            name="g6e.12xlarge",
            efa_interfaces=1,
            gpus=4,
            gpu_memory_gib=48,
            vcpus=48,
            gpu_model="L40S",
            ray_accelerator_type="L40S",
            network_gbps=100,
            nvml_gpu_name="NVIDIA L40S",
            efa_rdma_read=False,
            memory_gib=384,
            efa_hugepages_2mi_mib=5120,
        ),
        GpuInstanceType(
            name="g6e.24xlarge",
            efa_interfaces=2,
            gpus=4,
            gpu_memory_gib=48,
            vcpus=96,
            gpu_model="L40S",
            ray_accelerator_type="L40S",
            network_gbps=200,
            nvml_gpu_name="NVIDIA L40S",
            efa_rdma_read=False,
            memory_gib=768,
            efa_hugepages_2mi_mib=5120,
        ),
        GpuInstanceType(
            name="g6e.48xlarge",
            efa_interfaces=4,
            gpus=8,
            gpu_memory_gib=48,
            vcpus=192,
            gpu_model="L40S",
            ray_accelerator_type="L40S",
            network_gbps=400,
            nvml_gpu_name="NVIDIA L40S",
            efa_rdma_read=False,
            memory_gib=1536,
            efa_hugepages_2mi_mib=5120,
        ),
        GpuInstanceType(
            name="g5.48xlarge",
            efa_interfaces=1,
            gpus=8,
            gpu_memory_gib=24,
            vcpus=192,
            gpu_model="A10G",
            ray_accelerator_type="A10G",
            network_gbps=100,
            nvml_gpu_name="NVIDIA A10G",
            efa_rdma_read=False,
            memory_gib=768,
            efa_hugepages_2mi_mib=5120,
        ),
        GpuInstanceType(
            name="p4d.24xlarge",
            efa_interfaces=4,
            gpus=8,
            gpu_memory_gib=40,
            vcpus=96,
            gpu_model="A100",
            ray_accelerator_type="A100",
            network_gbps=400,
            nvml_gpu_name="NVIDIA A100-SXM4-40GB",
            efa_rdma_read=True,
            memory_gib=1152,
            efa_hugepages_2mi_mib=5120,
        ),
        GpuInstanceType(
            name="p4de.24xlarge",
            efa_interfaces=4,
            gpus=8,
            gpu_memory_gib=80,
            vcpus=96,
            gpu_model="A100",
            ray_accelerator_type="A100",
            network_gbps=400,
            nvml_gpu_name="NVIDIA A100-SXM4-80GB",
            efa_rdma_read=True,
            memory_gib=1152,
            efa_hugepages_2mi_mib=5120,
        ),
        GpuInstanceType(
            name="p5.48xlarge",
            efa_interfaces=32,
            gpus=8,
            gpu_memory_gib=80,
            vcpus=192,
            gpu_model="H100",
            ray_accelerator_type="H100",
            network_gbps=3200,
            nvml_gpu_name="NVIDIA H100 80GB HBM3",
            efa_rdma_read=True,
            memory_gib=2048,
            efa_hugepages_2mi_mib=5120,
        ),
        GpuInstanceType(
            name="p5e.48xlarge",
            efa_interfaces=32,
            gpus=8,
            gpu_memory_gib=141,
            vcpus=192,
            gpu_model="H200",
            ray_accelerator_type="H200",
            network_gbps=3200,
            nvml_gpu_name="NVIDIA H200",
            efa_rdma_read=True,
            memory_gib=2048,
            efa_hugepages_2mi_mib=5120,
        ),
        GpuInstanceType(
            name="p5en.48xlarge",
            efa_interfaces=16,
            gpus=8,
            gpu_memory_gib=141,
            vcpus=192,
            gpu_model="H200",
            ray_accelerator_type="H200",
            network_gbps=3200,
            nvml_gpu_name="NVIDIA H200",
            efa_rdma_read=True,
            memory_gib=2048,
            efa_hugepages_2mi_mib=5120,
        ),
    )
}


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
