"""Stand-in (see tests/ray_standins/README.md): the engine arguments our serve config sets."""

import dataclasses
from typing import Any, Optional


@dataclasses.dataclass
class AsyncEngineArgs:
    tensor_parallel_size: int = 1
    max_model_len: Optional[int] = None
    kv_cache_dtype: str = "auto"
    kv_transfer_config: Optional[Any] = None
    enable_prefix_caching: Optional[bool] = None
    # what the one-GPU real run sets beside them (llm_pd_eks_sizing/realrun/overrides.yaml)
    load_format: str = "auto"
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: Optional[int] = None
    enforce_eager: bool = False
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
