"""The workload file `make size` reads: Poisson arrivals, token-length distributions and SLOs."""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from llm_pd_eks_tools.core.cli import Exit, ToolError, one_line


class _Strict(BaseModel):
    """Like the stack config: camelCase keys only (snake_case is an unknown key), no coercion (`true`
    is not a number), every unknown key an error."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        frozen=True,
        allow_inf_nan=False,
        strict=True,
    )


class TokenLengths(_Strict):
    """A token-length distribution: its mean and spread, lognormal (long-tailed, like real prompts)."""

    mean: float = Field(gt=0, description="Mean tokens per request.")
    cv: float = Field(
        default=0.0,
        ge=0,
        le=4,
        description="Coefficient of variation (standard deviation / mean); 0 means every request has `mean`.",
    )

    @property
    def _sigma2(self) -> float:
        return math.log1p(self.cv**2)

    def moment(self, k: int) -> float:
        """E[L^k] of the lognormal with this mean and cv (exactly mean^k when cv is 0)."""
        mu = math.log(self.mean) - self._sigma2 / 2
        return math.exp(k * mu + k * k * self._sigma2 / 2)

    def partial_moment(self, k: int, at_least: float) -> float:
        """E[L^k; L >= at_least]: the k-th moment over the lengths of at least `at_least` tokens only
        (the lognormal's closed form, exp(k mu + k^2 s^2 / 2) * P(Z >= (ln T - mu - k s^2) / s))."""
        if self.cv == 0:
            return self.mean**k if self.mean >= at_least else 0.0
        if at_least <= 0:
            return self.moment(k)
        mu = math.log(self.mean) - self._sigma2 / 2
        sigma = math.sqrt(self._sigma2)
        tail = 1 - NormalDist().cdf((math.log(at_least) - mu - k * self._sigma2) / sigma)
        return self.moment(k) * tail

    def quantile(self, p: float) -> float:
        if self.cv == 0:
            return self.mean
        mu = math.log(self.mean) - self._sigma2 / 2
        return math.exp(mu + math.sqrt(self._sigma2) * NormalDist().inv_cdf(p))


class Slo(_Strict):
    """Latency objectives, each met at `percentile` (DistServe's goodput: requests meeting both)."""

    ttft_ms: float = Field(gt=0, description="Time to first token, milliseconds.")
    itl_ms: float = Field(gt=0, description="Inter-token latency (time per output token), milliseconds.")
    percentile: float = Field(gt=50, lt=100, description="The percentile both objectives hold at, e.g. 90 or 99.")


class SharedPrefix(_Strict):
    """Prompt prefixes the traffic repeats (system prompts, documents, conversation history)."""

    tokens: int = Field(ge=1, le=1_048_576, description="Tokens of one shared prefix.")
    distinct: int = Field(default=1, ge=1, le=10_000_000, description="How many different prefixes recur.")


class Workload(_Strict):
    """What `make size` sizes for: Poisson arrivals, token-length distributions, SLOs."""

    description: str = Field(default="", description="What traffic this is.")
    request_rate: float = Field(gt=0, description="Requests per second (Poisson arrivals).")
    input_tokens: TokenLengths = Field(description="Prompt length distribution.")
    output_tokens: TokenLengths = Field(description="Generated length distribution.")
    slo: Slo = Field(description="Latency objectives.")
    shared_prefix: Optional[SharedPrefix] = Field(
        default=None, description="Repeated prompt prefixes (what prefix-aware routing can keep cached)."
    )


def _location(loc: tuple[Any, ...]) -> str:
    # validated by alias: a location is the key as written (camelCase, or the unknown key itself)
    return ".".join(str(p) for p in loc) or "(top level)"


def parse_workload(data: Any, source: str = "workload") -> Workload:
    """A validated `Workload`; ToolError(USAGE) naming every bad key on one line."""
    if not isinstance(data, dict):
        raise ToolError(Exit.USAGE, f"{source}: expected a mapping of workload keys, got {type(data).__name__}")
    try:
        return Workload.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{_location(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ToolError(Exit.USAGE, one_line(f"{source}: {problems}", 600)) from None


MAX_WORKLOAD_BYTES = 64 * 1024  # the example workloads are ~300 bytes


def load_workload(path: Path) -> Workload:
    """Read a workload file with the stack files' reader (llm_pd_eks_tools/core/stackfile.py: duplicate keys and aliases
    refused, YAML 1.2 booleans), then the strict model; every failure a one-line ToolError(USAGE)."""
    # imported here, not with the module: the GPU calibration's harness loads the sizing model on the
    # engine machine's Python, which has no YAML library (the stack-file reader needs one)
    from llm_pd_eks_tools.core.stackfile import parse

    path = Path(path)
    try:
        if path.is_dir():
            raise ToolError(Exit.USAGE, f"{path}: is a directory, not a workload file")
        if path.stat().st_size > MAX_WORKLOAD_BYTES:
            raise ToolError(Exit.USAGE, f"{path}: larger than {MAX_WORKLOAD_BYTES // 1024} KiB; is it a workload file?")
        text = path.read_text()
    except FileNotFoundError:
        raise ToolError(Exit.USAGE, f"{path}: no such workload file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(Exit.USAGE, one_line(f"{path}: cannot read it ({exc})")) from None
    return parse_workload(parse(text, str(path)), str(path))
