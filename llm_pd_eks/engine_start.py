"""How long Ray Serve LLM lets one vLLM engine start: never less than Ray Serve LLM's own default.

Ray Serve LLM reads the budget once, when its constants module loads:
`ENGINE_START_TIMEOUT_S = int(os.getenv("RAYLLM_ENGINE_START_TIMEOUT_S", str(60 * 60)))`
(ray-project/ray, tag ray-2.58.0, python/ray/llm/_internal/serve/constants.py). An engine still
loading when it runs out fails its replica, and Serve starts it over: a value below that default
would only kill engines Ray itself would have let finish, so every value set here is at least it.
"""

from __future__ import annotations

import math
from typing import Optional

from .models import MODELS

ENGINE_START_TIMEOUT_ENV = "RAYLLM_ENGINE_START_TIMEOUT_S"
RAY_SERVE_LLM_ENGINE_START_TIMEOUT_S = 60 * 60
# The planned part of a start: the weights at the slowest first download we plan for (Hugging Face
# over the NAT gateway) plus vLLM's load, compile and CUDA-graph capture.
WEIGHTS_DOWNLOAD_GIB_PER_S = 0.1
ENGINE_WARMUP_S = 600


def planned_engine_start_s(model_id: str) -> int:
    """Seconds one engine start is planned to take: download the weights once, load, warm up."""
    return math.ceil(MODELS[model_id].weights_gib_bf16 / WEIGHTS_DOWNLOAD_GIB_PER_S) + ENGINE_WARMUP_S


def engine_start_timeout_s(model_id: str, configured: Optional[int] = None) -> int:
    """The budget the workers get: the configured one (validated to be no shorter than either floor),
    else the longer of Ray Serve LLM's default and the planned start."""
    if configured is not None:
        return configured
    return max(RAY_SERVE_LLM_ENGINE_START_TIMEOUT_S, planned_engine_start_s(model_id))


def engine_start_timeout_problem(model_id: str, configured: int) -> Optional[str]:
    """Why `configured` seconds is too short an engine start budget for `model_id`, if it is."""
    if configured < RAY_SERVE_LLM_ENGINE_START_TIMEOUT_S:
        return (
            f"engineStartTimeoutS {configured} is below Ray Serve LLM's own default of "
            f"{RAY_SERVE_LLM_ENGINE_START_TIMEOUT_S} s ({ENGINE_START_TIMEOUT_ENV}); an engine still loading "
            "would be failed sooner than Ray itself fails it; raise it or leave it unset"
        )
    planned = planned_engine_start_s(model_id)
    if configured < planned:
        return (
            f"engineStartTimeoutS {configured} is below the {planned} s a start of {model_id} is planned to "
            f"take (its weights at {WEIGHTS_DOWNLOAD_GIB_PER_S} GiB/s plus {ENGINE_WARMUP_S} s warm-up); "
            "raise it or leave it unset"
        )
    return None
