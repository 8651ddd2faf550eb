"""Fit `EngineConstants` (llm_pd_eks_sizing/model/) to measured points: published ones or a calibration run.

The model is linear in four unknowns once the TP efficiency is fixed: prefill intercept, 1 / MFU,
decode intercept, 1 / MBU. Each point contributes one row (what it measured and the physics it ran:
FLOPs over peak, bytes over bandwidth); rows are weighted by 1 / measured so the fit minimises
relative error, a weak ridge pulls unidentified unknowns to a prior, and the TP efficiency is the
grid value with the smallest residual. Intercepts are kept non-negative, and at 0 where a non-zero one
would need an efficiency above 1. The rows follow `Replica.step_seconds`: the TP factor scales the
GEMM rate only, decode is taken as memory-bound (one read of the weights and the KV cache a step), and
the TP all-reduce (an assumed, unfitted term) is taken off each target before the fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from llm_pd_eks.catalog import GpuInstanceType
from llm_pd_eks.models import ModelSpec
from llm_pd_eks_sizing.model import EngineConstants, Replica, decode_weight_bytes, prefill_flops

PRIOR = (0.0, 1 / 0.5, 0.0, 1 / 0.6)  # intercepts 0, MFU 0.5, MBU 0.6: where data says nothing
RIDGE = 1e-6
TP_GRID = tuple(round(0.80 + 0.01 * i, 2) for i in range(21))


@dataclass(frozen=True)
class Point:
    """One measurement: `kind` ttft (one prefill), itl (one decode step) or latency (a whole request)."""

    kind: str
    model: ModelSpec
    instance: GpuInstanceType
    tp: int
    batch: int
    input: int
    output: int
    measured_ms: float
    weight_bytes: float = 2.0
    compute_scale: float = 1.0
    kv_dtype_bytes: int = 2


def _allreduce(p: Point) -> float:
    """Seconds of TP all-reduce the point's forwards spent (assumed; not a fitted unknown)."""
    replica = Replica(p.model, p.instance, p.tp, p.kv_dtype_bytes, p.weight_bytes, p.compute_scale)
    prefill, decode = replica.allreduce_seconds(p.input), replica.allreduce_seconds(p.batch)
    if p.kind == "ttft":
        return prefill
    if p.kind == "itl":
        return decode
    return p.batch * prefill + (p.output - 1) * decode


def _row(p: Point, tp_eff: float, per_layer: bool = False) -> list[float]:
    one = float(p.model.layers) if per_layer else 1.0  # what an intercept counts: steps, or layers of a step
    factor = tp_eff ** __import__("math").log2(p.tp)
    peak = p.tp * p.instance.peak_bf16_dense_tflops * 1e12 * p.compute_scale * factor
    bandwidth = p.tp * p.instance.memory_bandwidth_gbytes_s * 1e9
    context = p.input + p.output / 2
    flops = prefill_flops(p.model, p.input) / peak
    nbytes = (
        decode_weight_bytes(p.model, p.weight_bytes) + p.batch * context * p.model.kv_bytes_per_token(p.kv_dtype_bytes)
    ) / bandwidth
    if p.kind == "ttft":
        return [one, flops, 0.0, 0.0]
    if p.kind == "itl":
        return [0.0, 0.0, one, nbytes]
    if p.kind == "latency":
        return [p.batch * one, p.batch * flops, (p.output - 1) * one, (p.output - 1) * nbytes]
    raise ValueError(f"unknown point kind {p.kind!r}: expected ttft, itl or latency")


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting for a small dense system."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col and m[col][col] != 0:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def _least_squares(rows: Sequence[Sequence[float]], targets: Sequence[float], fixed: dict[int, float]) -> list[float]:
    free = [j for j in range(4) if j not in fixed]
    # scale each unknown by its prior so the ridge is relative
    scale = [max(abs(PRIOR[j]), 1e-3) for j in range(4)]
    ata = [[0.0] * len(free) for _ in free]
    atb = [0.0] * len(free)
    for row, y in zip(rows, targets):
        w = 1.0 / y
        resid = y - sum(row[j] * fixed[j] for j in fixed)
        for i, ji in enumerate(free):
            atb[i] += w * w * row[ji] * scale[ji] * resid
            for k, jk in enumerate(free):
                ata[i][k] += w * w * row[ji] * scale[ji] * row[jk] * scale[jk]
    for i, ji in enumerate(free):
        ata[i][i] += RIDGE
        atb[i] += RIDGE * PRIOR[ji] / scale[ji]
    sol = _solve(ata, atb)
    out = dict(fixed)
    for i, ji in enumerate(free):
        out[ji] = sol[i] * scale[ji]
    return [out[j] for j in range(4)]


def _fit_at(points: Sequence[Point], tp_eff: float, per_layer: bool = False) -> tuple[list[float], float]:
    rows = [_row(p, tp_eff, per_layer) for p in points]
    targets = [max(p.measured_ms / 1e3 - _allreduce(p), 1e-9) for p in points]
    fixed: dict[int, float] = {}
    theta = _least_squares(rows, targets, fixed)
    for j in (0, 2):  # intercepts: non-negative
        if theta[j] < 0:
            fixed[j] = 0.0
    if fixed:
        theta = _least_squares(rows, targets, fixed)
    # an efficiency above 1 (faster than the roofline) means the points cannot tell the intercept from
    # the slope (too little spread in size): take the intercept as 0 and fit the efficiency alone
    for j, slope in ((0, 1), (2, 3)):
        if theta[slope] < 1 and j not in fixed:
            fixed[j] = 0.0
            theta = _least_squares(rows, targets, fixed)
    residual = sum((sum(r * t for r, t in zip(row, theta)) / y - 1) ** 2 for row, y in zip(rows, targets))
    return theta, residual


def fit(
    points: Iterable[Point], source: str, tp_grid: Optional[Sequence[float]] = None, per_layer: bool = False
) -> EngineConstants:
    """The constants that best explain `points` (relative least squares; see the module docstring).
    `per_layer`: the intercepts are seconds a layer (`EngineConstants.intercepts_per_layer`), so points of
    models of different depths share one row."""
    pts = list(points)
    if not pts:
        raise ValueError("no points to fit")
    grid = tp_grid if tp_grid is not None else (TP_GRID if len({p.tp for p in pts}) > 1 else (1.0,))
    best = min(((_fit_at(pts, e, per_layer), e) for e in grid), key=lambda item: item[0][1])
    (theta, _), tp_eff = best
    digits = 7 if per_layer else 5
    return EngineConstants(
        prefill_mfu=round(1 / theta[1], 4),
        prefill_step_s=round(theta[0], digits),
        decode_mbu=round(1 / theta[3], 4),
        decode_step_s=round(theta[2], digits),
        tp_efficiency=tp_eff,
        source=source,
        intercepts_per_layer=per_layer,
    )
