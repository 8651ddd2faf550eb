"""Kernel probe for the sizing model's GPU row: bf16 GEMM, attention and memory bandwidth.

Run on the GPU machine itself (needs PyTorch with CUDA; not imported by anything else):

    python -m llm_pd_eks_sizing.calibrate.gpu_probe --out "$OUT/gpu_probe.json"

It measures, with CUDA events (warm-up, then the median of repeated runs):

* prefill-shaped GEMMs: the four per-layer projections (QKV, O, gate+up, down) of
  Llama-3.1-8B (TP1) and Llama-3.1-70B (TP4 and TP8 shards) at several token counts,
  reported as achieved TFLOPS;
* attention: ``torch.nn.functional.scaled_dot_product_attention`` (causal, bf16; the flash
  back end where torch picks it) at the per-rank head counts of those layouts;
* decode-shaped reads: batched GEMV (batch 1..64) chained over every layer's weights of a
  shard (far larger than L2, so each step streams the weights from HBM), reported as GB/s
  of weight bytes read; decode attention (one query token over a KV cache); and a plain
  device-to-device copy (read + write bytes).

What a kernel probe does not capture (the sizing model adds these from published runs or
`make calibrate`): the engine's per-step overhead (scheduler, sampling, Python, CUDA-graph
launch), tensor-parallel all-reduce over NVLink, paged-KV gather cost, batching/preemption
policy, and the network (NIXL over EFA).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from typing import Any, Callable

from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, exit_with
from llm_pd_eks_tools.core.io_safety import atomic_write

try:  # present on the GPU machine only; elsewhere `--help` still answers and a run says what is missing
    import torch  # type: ignore[import-not-found]
    import torch.nn.functional as F  # type: ignore[import-not-found]
except ImportError:
    torch = F = None

# Llama-3.1 shapes: hidden, intermediate, query heads, KV heads, head dim, layers
# (meta-llama/Llama-3.1-8B-Instruct and -70B-Instruct config.json).
MODELS: dict[str, tuple[int, int, int, int, int, int]] = {
    "llama-3.1-8b": (4096, 14336, 32, 8, 128, 32),
    "llama-3.1-70b": (8192, 28672, 64, 8, 128, 80),
}
LAYOUTS = [("llama-3.1-8b", 1), ("llama-3.1-8b", 2), ("llama-3.1-70b", 4), ("llama-3.1-70b", 8)]
TOKENS = [256, 1024, 4096, 8192]
DTYPE = torch.bfloat16 if torch is not None else None


def timed(fn: Callable[[], Any], reps: int = 10, warmup: int = 3) -> float:
    """Median seconds of ``fn`` over ``reps`` runs (CUDA events), after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def shard_shapes(model: str, tp: int) -> list[tuple[str, int, int]]:
    """(name, in_features, out_features) of one layer's projections on one TP rank."""
    h, inter, nq, nkv, hd, _ = MODELS[model]
    kv_per_rank = max(1, nkv // tp)
    return [
        ("qkv", h, (nq // tp + 2 * kv_per_rank) * hd),
        ("o", nq // tp * hd, h),
        ("gate_up", h, 2 * inter // tp),
        ("down", inter // tp, h),
    ]


def probe_gemm() -> list[dict[str, Any]]:
    rows = []
    for model, tp in LAYOUTS:
        shapes = shard_shapes(model, tp)
        weights = [torch.randn(o, i, device="cuda", dtype=DTYPE) for _, i, o in shapes]
        for tokens in TOKENS:
            x_in = {i: torch.randn(tokens, i, device="cuda", dtype=DTYPE) for _, i, _ in shapes}

            def layer(shapes: Any = shapes, weights: Any = weights, x_in: Any = x_in) -> None:
                for (_, i, _), w in zip(shapes, weights):
                    F.linear(x_in[i], w)

            secs = timed(layer)
            flops = sum(2 * tokens * i * o for _, i, o in shapes)
            rows.append(
                {
                    "model": model,
                    "tp": tp,
                    "tokens": tokens,
                    "layer_s": secs,
                    "flops": flops,
                    "tflops": flops / secs / 1e12,
                }
            )
        del weights
    return rows


def probe_attention() -> list[dict[str, Any]]:
    rows = []
    for model, tp in LAYOUTS:
        _, _, nq, _, hd, _ = MODELS[model]
        heads = nq // tp
        for seq in [1024, 4096, 8192]:
            q = torch.randn(1, heads, seq, hd, device="cuda", dtype=DTYPE)
            k = torch.randn(1, heads, seq, hd, device="cuda", dtype=DTYPE)
            v = torch.randn(1, heads, seq, hd, device="cuda", dtype=DTYPE)

            def causal(q: Any = q, k: Any = k, v: Any = v) -> Any:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            secs = timed(causal)
            # Causal: QK^T and PV each 2*s*s*d per head, halved by the mask.
            flops = 2 * 2 * seq * seq * hd * heads / 2
            rows.append(
                {"model": model, "tp": tp, "seq": seq, "layer_s": secs, "flops": flops, "tflops": flops / secs / 1e12}
            )
    return rows


def probe_decode_weights() -> list[dict[str, Any]]:
    rows = []
    for model, tp in LAYOUTS:
        layers = MODELS[model][5]
        shapes = shard_shapes(model, tp)
        weights = [[torch.randn(o, i, device="cuda", dtype=DTYPE) for _, i, o in shapes] for _ in range(layers)]
        nbytes = sum(w.numel() * w.element_size() for lw in weights for w in lw)
        for batch in [1, 8, 32, 64]:
            xs = {i: torch.randn(batch, i, device="cuda", dtype=DTYPE) for _, i, _ in shapes}

            def step(weights: Any = weights, shapes: Any = shapes, xs: Any = xs) -> None:
                for lw in weights:
                    for (_, i, _), w in zip(shapes, lw):
                        F.linear(xs[i], w)

            secs = timed(step, reps=8)
            rows.append(
                {
                    "model": model,
                    "tp": tp,
                    "batch": batch,
                    "weight_bytes": nbytes,
                    "step_s": secs,
                    "gb_per_s": nbytes / secs / 1e9,
                }
            )
        del weights
        torch.cuda.empty_cache()
    return rows


def probe_decode_attention() -> list[dict[str, Any]]:
    rows = []
    for model, tp in [("llama-3.1-8b", 1), ("llama-3.1-70b", 8)]:
        _, _, nq, nkv, hd, _ = MODELS[model]
        heads, kv_heads = nq // tp, max(1, nkv // tp)
        for batch, ctx in [(32, 2048), (64, 4096), (16, 16384)]:
            q = torch.randn(batch, heads, 1, hd, device="cuda", dtype=DTYPE)
            k = torch.randn(batch, kv_heads, ctx, hd, device="cuda", dtype=DTYPE)
            v = torch.randn(batch, kv_heads, ctx, hd, device="cuda", dtype=DTYPE)
            rep = heads // kv_heads
            kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)

            # GQA expanded up front; the bytes counted are those the kernel reads (expanded).
            def one_token(q: Any = q, kk: Any = kk, vv: Any = vv) -> Any:
                return F.scaled_dot_product_attention(q, kk, vv)

            secs = timed(one_token)
            nbytes = 2 * kk.numel() * kk.element_size()
            rows.append(
                {
                    "model": model,
                    "tp": tp,
                    "batch": batch,
                    "context": ctx,
                    "kv_bytes": nbytes,
                    "layer_s": secs,
                    "gb_per_s": nbytes / secs / 1e9,
                }
            )
    return rows


def probe_copy() -> dict[str, Any]:
    n = 4 * 1024**3
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    secs = timed(lambda: dst.copy_(src), reps=10)
    return {"bytes": n, "s": secs, "gb_per_s_read_plus_write": 2 * n / secs / 1e9}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="gpu_probe", description="bf16 GEMM, attention and HBM bandwidth probe")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if torch is None:
        raise ToolError(Exit.USAGE, "PyTorch is not installed here: the probe runs on the GPU machine (docs/sizing.md)")
    t0 = time.time()
    props = torch.cuda.get_device_properties(0)
    smi = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit",
            "--format=csv,noheader",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    result: dict[str, Any] = {
        "device": {
            "name": props.name,
            "total_memory_bytes": props.total_memory,
            "sm_count": props.multi_processor_count,
            "nvidia_smi": smi,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
        },
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    for name, fn in [
        ("gemm", probe_gemm),
        ("attention", probe_attention),
        ("decode_weights", probe_decode_weights),
        ("decode_attention", probe_decode_attention),
        ("copy", probe_copy),
    ]:
        result[name] = fn()
        print(f"{name}: done at {time.time() - t0:.0f}s", flush=True)
        atomic_write(args.out, json.dumps(result, indent=1))
    result["wall_s"] = time.time() - t0
    atomic_write(args.out, json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("device", "copy")}), flush=True)
    return Exit.OK


if __name__ == "__main__":
    exit_with("gpu_probe", main)
