"""The preview's report: one typed model that `report.json` is written from and `preview-diff` reads back.

Before this model the report was a dict written in one module and read with `.get(...)` chains in
another, so a renamed key silently became "n/a" in the diff. Now both sides go through `Report`: a
report.json that does not match it is refused by name (`Report.read`), and mypy checks every use.
`SCHEMA_VERSION` changes when a field changes meaning, so a reader can tell an old file apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llm_pd_eks_tools.core.cli import Exit, ToolError, one_line
from llm_pd_eks_tools.core.io_safety import atomic_write

if TYPE_CHECKING:
    from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PackInfo(_Model):
    """The policy pack as the analyzer described itself (GetAnalyzerInfo), or why it did not run."""

    status: Literal["ran", "absent"]
    name: Optional[str] = None
    version: Optional[str] = None
    policies: int = 0

    @property
    def ran(self) -> bool:
        return self.status == "ran"


class VerdictRecord(_Model):
    """One diagnostic of the pack, as the engine would show it (see llm_pd_eks_tools.plan.preview.analyzer.Verdict)."""

    policy: str
    enforcement: str  # "mandatory" | "advisory" | "remediate" | "disabled"
    message: str
    urn: str  # "" for a stack-level violation with no resource
    description: str = ""

    def key(self) -> tuple[str, str, str, str]:
        """What makes two verdicts the same verdict (the diff's identity)."""
        return (self.policy, self.enforcement, self.urn, self.message)


class NodeGroupFigure(_Model):
    name: str
    instance_type: str
    min_size: int
    desired_size: int
    max_size: int
    gpu: bool
    efa_interfaces: int  # EFA interfaces in its launch template (0 without one)
    availability_zones: tuple[str, ...]


class CostLine(_Model):
    item: str
    quantity: int
    unit_hourly: float
    hourly: float


class CostFigure(_Model):
    region: str
    lines: list[CostLine]
    hourly: float
    monthly: float
    missing: list[str]  # items with no price in the table
    at_max_size_hourly: float
    prices_as_of: str
    currency: str
    hours_per_month: float

    @property
    def priced(self) -> bool:
        return bool(self.lines)


class KvTransferFigure(_Model):
    """The KV cache of one request moved from a prefill to a decode node, or why it is not shown."""

    status: Literal["ok", "n/a"]
    reason: str = ""
    model_id: str = ""
    tokens: int = 0
    kv_cache_dtype: str = ""
    bytes: int = 0
    efa_gbps: float = 0.0
    tcp_gbps: float = 0.0
    efa_seconds: float = 0.0
    tcp_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def slowdown(self) -> float:
        """How many times longer the single TCP flow takes than EFA."""
        return self.tcp_seconds / self.efa_seconds if self.efa_seconds else 0.0


class Figures(BaseModel):
    """Everything the report shows as figures. Extra keys are kept (a newer figure a reader does not
    know yet still round-trips), the known ones are typed."""

    model_config = ConfigDict(extra="allow", frozen=True)

    region: str
    node_groups: list[NodeGroupFigure]
    nat_gateways: int
    eks_clusters: int
    cost: CostFigure
    kv_transfer: KvTransferFigure
    # The KV band (llm_pd_eks_sizing/model/ `KvBand.as_dict()`: line rate, measured NIXL/EFA, single-flow TCP) for
    # a maxModelLen request, and $/Mtok at the output rate of workloads/<stack>.yaml; `status` "ok" | "n/a".
    kv_band: dict[str, Any] = Field(default_factory=lambda: {"status": "n/a", "reason": "not computed"})
    sized: dict[str, Any] = Field(default_factory=lambda: {"status": "n/a", "reason": "not computed"})
    # serving.routing in one line (llm_pd_eks/serve_routing.py `preview_line`); "" without a serving section.
    routing: str = ""
    # The weights a GPU node's cold start downloads, and how much of it crosses the NAT gateway
    # (llm_pd_eks_tools/plan/preview/figures.py `weights_figure`); `status` "ok" | "n/a".
    weights: dict[str, Any] = Field(default_factory=lambda: {"status": "n/a", "reason": "not computed"})

    @property
    def gpu(self) -> Optional[NodeGroupFigure]:
        """The GPU node group (the prefill/decode workers), if the plan has one."""
        return next((g for g in self.node_groups if g.gpu), None)


class Report(_Model):
    """report.json."""

    schema_version: int = SCHEMA_VERSION
    stack: str
    region: str
    pack: PackInfo
    verdicts: list[VerdictRecord]
    figures: Figures
    resource_count: int
    stack_outputs: dict[str, Any]

    @property
    def mandatory(self) -> list[VerdictRecord]:
        return [v for v in self.verdicts if v.enforcement == "mandatory"]

    def write(self, path: Path) -> None:
        atomic_write(path, self.model_dump_json(indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> "Report":
        """report.json back as a Report; a file this model does not describe is a USAGE error."""
        try:
            report = cls.model_validate_json(Path(path).read_text())
        except OSError as error:
            raise ToolError(Exit.USAGE, f"{path}: cannot read the preview report: {error.strerror}") from None
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise ToolError(
                Exit.USAGE,
                f"{path}: not a preview report of this version ({where}: {one_line(first['msg'])}); "
                "re-run `make preview`",
            ) from None
        return report


@dataclass
class PreviewResult:
    """A finished preview: the report (what report.json holds) plus the run it was made from."""

    out: Path
    run: "ProgramRun"
    report: Report
    resources: list[dict[str, Any]]  # what resources.json holds
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # llm_pd_eks_tools.gates.placeholders.warning_lines

    @property
    def stack(self) -> str:
        return self.report.stack

    @property
    def region(self) -> str:
        return self.report.region

    @property
    def figures(self) -> Figures:
        return self.report.figures

    @property
    def verdicts(self) -> list[VerdictRecord]:
        return self.report.verdicts

    @property
    def mandatory(self) -> list[VerdictRecord]:
        return self.report.mandatory

    @property
    def exit_code(self) -> Exit:
        return Exit.FAILED if self.mandatory else Exit.OK
