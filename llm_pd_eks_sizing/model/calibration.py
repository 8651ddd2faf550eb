"""calibration/<stack>.yaml: the constants `make calibrate` measured on the stack's own GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import Field, ValidationError

from llm_pd_eks.config import StackConfig
from llm_pd_eks_sizing.model.engine import VLLM_BF16, EngineConstants
from llm_pd_eks_sizing.model.workload import _location, _Strict
from llm_pd_eks_tools.core.cli import Exit, ToolError, one_line


class CalibratedConstants(_Strict):
    """The fitted efficiency row (llm_pd_eks_sizing/calibrate/fit.py) as the calibration file stores it."""

    prefill_mfu: float = Field(gt=0, le=1, description="Fraction of dense peak a prefill reaches.")
    prefill_step_s: float = Field(ge=0, description="Per-forward intercept of a prefill, seconds.")
    decode_mbu: float = Field(gt=0, le=1, description="Fraction of memory bandwidth a decode step reaches.")
    decode_step_s: float = Field(ge=0, description="Per-step intercept of a decode step, seconds.")
    tp_efficiency: float = Field(gt=0, le=1, description="What each doubling of TP keeps.")


class Calibration(_Strict):
    """What `make calibrate STACK=...` measured and fitted; `make size` and the preview use it."""

    stack: str = Field(description="The stack it was measured on.")
    measured_at: str = Field(description="UTC time of the run (ISO 8601).")
    model_id: str = Field(description="The model served during the run.")
    instance_type: str = Field(description="The GPU instance type of the run.")
    tensor_parallel_size: int = Field(ge=1, description="TP of the replicas benchmarked.")
    constants: CalibratedConstants = Field(description="The fitted efficiency row.")
    kv_efficiency: Optional[float] = Field(
        default=None,
        gt=0,
        le=1,
        description="nixlbench over LIBFABRIC, per EFA interface, as a fraction of line rate; None if not measured.",
    )
    kv_table: Optional[list[list[float]]] = Field(
        default=None,
        description="nixlbench's rows [block bytes, GB/s per worker]: the KV rate by message size; None if unmeasured.",
    )

    def kv_rows(self) -> Optional[list[tuple[int, float]]]:
        """The nixlbench rows as (bytes, GB/s), smallest first; None if not measured."""
        if self.kv_table is None:
            return None
        return sorted((int(row[0]), float(row[1])) for row in self.kv_table)

    method: str = Field(default="", description="How the constants were fitted.")
    points: int = Field(ge=1, description="Benchmark points the fit used.")
    source: str = Field(description="The commands that produced it.")

    def engine_constants(self) -> EngineConstants:
        c = self.constants
        return EngineConstants(
            c.prefill_mfu,
            c.prefill_step_s,
            c.decode_mbu,
            c.decode_step_s,
            c.tp_efficiency,
            f"calibration/{self.stack}.yaml ({self.measured_at}, {self.points} points)",
            data=f"calibration/{self.stack}.yaml: {self.source}",
            date=self.measured_at,
            method=self.method,
            # the API server's stream cost is not in what make calibrate fits: the default row's
            stream_token_s=VLLM_BF16.stream_token_s,
        )


def calibration_path(stack: str, root: Path) -> Path:
    return Path(root) / "calibration" / f"{stack}.yaml"


def load_calibration(stack: str, root: Path, config: StackConfig) -> Optional[Calibration]:
    """calibration/<stack>.yaml if present (read like a stack file, strict); USAGE if it does not fit the stack."""
    path = calibration_path(stack, root)
    if not path.is_file():
        return None
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(Exit.USAGE, one_line(f"{path}: cannot read it ({exc})")) from None
    # imported here, not with the module: the GPU calibration's harness loads the sizing model on the
    # engine machine's Python, which has no YAML library (the stack-file reader needs one)
    from llm_pd_eks_tools.core.stackfile import parse

    data = parse(text, str(path))
    try:
        found = Calibration.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_location(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ToolError(Exit.USAGE, one_line(f"{path}: {problems}; re-run make calibrate STACK={stack}", 600)) from None
    serving = config.serving
    if serving is not None and (
        found.model_id != serving.model_id or found.instance_type != config.gpu_nodes.instance_type
    ):
        raise ToolError(
            Exit.USAGE,
            f"{path}: measured {found.model_id} on {found.instance_type}, the stack now runs "
            f"{serving.model_id} on {config.gpu_nodes.instance_type}; re-run make calibrate "
            f"STACK={stack} or delete the file",
        )
    return found
