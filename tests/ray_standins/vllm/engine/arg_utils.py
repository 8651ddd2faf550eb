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
