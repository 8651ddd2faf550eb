"""The pack's table of EFA-capable GPU instance types, read from the pack's own data file.

`policies/data/gpu_instance_types.json` is generated from EC2 DescribeInstanceTypes data
(`llm_pd_eks_tools/maint/gen_instance_types.py`, `make facts`; its `source` names where the data came from). The pack
must not import the program it judges, so it carries its own copy; a test keeps it byte-equal to the
program's (`llm_pd_eks/data/`) and to what the generator produces. Override or extend the table per
stack through each policy's `efaGpuTypes` / `extraEfaGpuTypes` config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "gpu_instance_types.json"

_TABLE: dict[str, dict[str, Any]] = json.loads(DATA_FILE.read_text())["instanceTypes"]

# EFA interfaces per instance (`NetworkInfo.EfaInfo.MaximumEfaInterfaces`): one per EFA network card.
EFA_GPU_TYPES: dict[str, int] = {name: int(row["maximumEfaInterfaces"]) for name, row in _TABLE.items()}

# The network card indexes that accept an EFA interface (`NetworkCards[].InterfaceTypes` has "efa"):
# 0..n-1 on most types, 1..16 on p6-b300 (its card 0 is ENA only).
EFA_NETWORK_CARDS: dict[str, tuple[int, ...]] = {
    name: tuple(int(c) for c in row["efaNetworkCards"]) for name, row in _TABLE.items()
}

# GPUs per instance (`GpuInfo.Gpus[].Count`), for the share of a node's EFA devices a pod asking for
# part of its GPUs must request.
GPUS_PER_INSTANCE: dict[str, int] = {name: int(row["gpus"]) for name, row in _TABLE.items()}

# CPU architectures (`ProcessorInfo.SupportedArchitectures`), for Karpenter's kubernetes.io/arch.
ARCHITECTURES: dict[str, tuple[str, ...]] = {name: tuple(row["architectures"]) for name, row in _TABLE.items()}

# Every row as generated (camelCase keys), for rules that match other EC2 facts (Karpenter labels).
ROWS: dict[str, dict[str, Any]] = _TABLE
