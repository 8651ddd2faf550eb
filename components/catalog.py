"""What the program knows about instance types, kept small and explicit.

EFA interface counts come from EC2 DescribeInstanceTypes (`NetworkInfo.EfaInfo.MaximumEfaInterfaces`);
`make preflight` checks them against the live API so this table cannot silently drift.
Only types listed here may back the GPU node group: each needs a known EFA count to build
its launch template (one EFA interface per network card).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuInstanceType:
    """One EFA-capable GPU instance type."""

    name: str
    efa_interfaces: int  # = network cards carrying EFA; one interface each
    gpus: int
    gpu_memory_gib: int  # per GPU
    vcpus: int
    gpu_model: str
    ray_accelerator_type: str  # Ray's accelerator label (ray.util.accelerators)
    network_gbps: int  # aggregate EFA bandwidth of the node

    @property
    def family_quota_code(self) -> str:
        """Service Quotas code for the on-demand vCPU quota of this family."""
        return "L-417A185B" if self.name.startswith("p") else "L-DB2E81BA"


GPU_INSTANCE_TYPES: dict[str, GpuInstanceType] = {
    t.name: t
    for t in (
        GpuInstanceType("g6e.8xlarge", 1, 1, 48, 32, "L40S", "L40S", 25),
        GpuInstanceType("g6e.12xlarge", 1, 4, 48, 48, "L40S", "L40S", 100),
        GpuInstanceType("g6e.24xlarge", 2, 4, 48, 96, "L40S", "L40S", 200),
        GpuInstanceType("g6e.48xlarge", 4, 8, 48, 192, "L40S", "L40S", 400),
        GpuInstanceType("g5.48xlarge", 1, 8, 24, 192, "A10G", "A10G", 100),
        GpuInstanceType("p4d.24xlarge", 4, 8, 40, 96, "A100", "A100-40G", 400),
        GpuInstanceType("p4de.24xlarge", 4, 8, 80, 96, "A100", "A100-80G", 400),
        GpuInstanceType("p5.48xlarge", 32, 8, 80, 192, "H100", "H100", 3200),
        GpuInstanceType("p5e.48xlarge", 32, 8, 141, 192, "H200", "H200", 3200),
        GpuInstanceType("p5en.48xlarge", 16, 8, 141, 192, "H200", "H200", 3200),
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
