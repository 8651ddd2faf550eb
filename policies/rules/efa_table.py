"""The pack's own table of EFA-capable GPU instance types and their EFA interface counts.

The pack must not import the program it judges, so the table is repeated here; a test checks it
against `components/catalog.py`. Counts are EC2 DescribeInstanceTypes
`NetworkInfo.EfaInfo.MaximumEfaInterfaces` (one EFA interface per network card). Override or extend
it per stack through each policy's `efaGpuTypes` config.
"""

from __future__ import annotations

EFA_GPU_TYPES: dict[str, int] = {
    "g5.48xlarge": 1,
    "g6e.8xlarge": 1,
    "g6e.12xlarge": 1,
    "g6e.24xlarge": 2,
    "g6e.48xlarge": 4,
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
}


# GPUs per instance (EC2 DescribeInstanceTypes `GpuInfo.Gpus[].Count`), for the share of a node's EFA
# devices a pod asking for part of its GPUs must request. A test keeps it equal to the catalog's `gpus`.
GPUS_PER_INSTANCE: dict[str, int] = {
    "g5.48xlarge": 8,
    "g6e.8xlarge": 1,
    "g6e.12xlarge": 4,
    "g6e.24xlarge": 4,
    "g6e.48xlarge": 8,
    "p4d.24xlarge": 8,
    "p4de.24xlarge": 8,
    "p5.48xlarge": 8,
    "p5e.48xlarge": 8,
    "p5en.48xlarge": 8,
}
