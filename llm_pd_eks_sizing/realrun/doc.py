"""docs/real-run.md's generated sections, from the saved run records: `python -m llm_pd_eks_sizing.realrun.doc`
rewrites them (a test fails while they differ from what this writes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llm_pd_eks_sizing.realrun import mix_evidence, routing_evidence
from llm_pd_eks_sizing.realrun.evidence import latest, load, ms, samples, scrape_text
from llm_pd_eks_sizing.realrun.render import load_overrides
from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, exit_with
from llm_pd_eks_tools.core.io_safety import atomic_write, read_regular_file

DOC = Path(__file__).resolve().parents[2] / "docs" / "real-run.md"


def overrides_section(overrides: dict[str, Any]) -> str:
    lines = ["| where | what | value | why |", "| --- | --- | --- | --- |"]
    for section in ("stack_config", "serve_config", "llm_config", "raylet"):
        for item in overrides[section]:
            lines.append(f"| {section} | `{item['path']}` | `{json.dumps(item['value'])}` | {item['reason']} |")
    return "\n".join(lines)


def mix_overrides_section(overrides: dict[str, Any]) -> str:
    """overrides.yaml's `mix_run`: the one stack setting the decode-only arm adds."""
    mix = overrides["mix_run"]
    return "\n".join(
        [
            "| where | what | value | why |",
            "| --- | --- | --- | --- |",
            f"| stack_config | `serving.routing.decodeOnlyBelowTokens` | `{mix['decode_only_below_tokens']}` "
            f"| {' '.join(str(mix['reason']).split())} |",
        ]
    )


def prefix_overrides_section(overrides: dict[str, Any]) -> str:
    """overrides.yaml's `prefix_run` entries, the prefix-routing arms' changes on top of the table above."""
    lines = ["| where | what | value | why |", "| --- | --- | --- | --- |"]
    for section in ("llm_config", "raylet"):
        for item in overrides["prefix_run"][section]:
            lines.append(f"| {section} | `{item['path']}` | `{json.dumps(item['value'])}` | {item['reason']} |")
    return "\n".join(lines)


def results_section(run: Path) -> str:
    record, pd = load(run, "run.json"), load(run, "evidence-pd.json")
    agg = load(run, "evidence-agg.json") if (run / "evidence-agg.json").is_file() else {}
    v = record["versions"]
    decode_pulls = sum(val for key, val in pd["nixl_after_bench"]["decode"].items() if "bytes_transferred_count" in key)
    lines = [
        f"Run of {record['date_utc']} on {v['gpu']} (Ray {v['ray']}, vLLM {v['vllm']}, NIXL {v['nixl']}, "
        f"torch {v['torch']}, Python {v['python']}), commit `{record['commit'][:12]}`, the {record['stack']} "
        f"stack's `{record['model_id']}` with dummy weights, **{record['fabric']}**.",
        "",
        f"- Serve: application `llm` {pd['app_status']}, deployments "
        + ", ".join(f"{d} {s['status']}" for d, s in pd["serve_status"]["applications"]["llm"]["deployments"].items())
        + ".",
        f"- verify's chat request ({pd['chat_verify']['usage']['prompt_tokens']:,} prompt tokens): HTTP "
        f"{pd['chat_verify']['status']} in {pd['chat_verify']['seconds']} s; a streamed completion: "
        f"{pd['stream']['chunks']} chunks, first after {pd['stream']['first_chunk_s']} s.",
        f"- KV over NIXL: decode pulled once per request ({decode_pulls:.0f} pulls for the three probes and "
        f"{sum(r['completed'] for r in pd['bench'])} benchmark requests); the prefill side records none; the "
        "failure and expiry counters were never incremented, so the live endpoint does not export them yet.",
        xfer_line(scrape_text(run, "metrics-pd-after-bench")),
        "- Every `ray_vllm_*` and `ray_serve_*` name `llm_pd_eks/metrics.py` holds was on the live endpoint with "
        "the type it assumes (tests/integration/test_real_run.py).",
        "",
        f"`vllm bench serve`, random prompts of {pd['bench'][0]['input_len']} tokens, "
        f"{pd['bench'][0]['output_len']} output tokens (`--ignore-eos`), closed loop at a fixed number of clients. "
        "TPOT is the time per output token after the first (vLLM's `tpot`); vLLM's per-chunk ITL is not shown, "
        "because Ray Serve LLM streams several tokens per chunk (median ITL ~0 ms).",
        "",
        "| arm | clients | requests | median TTFT ms | p99 TTFT ms | median TPOT ms | p99 TPOT ms | output tok/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    agg_rows = {r["clients"]: r for r in agg.get("bench", [])}
    repeat = repeat_run(run)
    repeat_rows = {r["clients"]: r for r in load(repeat, "evidence-pd.json")["bench"]} if repeat else {}
    repeat_arm = f"P/D, earlier run ({load(repeat, 'run.json')['commit'][:8]})" if repeat else ""
    for row in pd["bench"]:
        arms = (
            ("P/D (UCX, one GPU)", row),
            (repeat_arm, repeat_rows.get(row["clients"])),
            ("aggregated", agg_rows.get(row["clients"])),
        )
        for arm, r in arms:
            if not r or "median_ttft_ms" not in r:
                continue
            lines.append(
                f"| {arm} | {r['clients']} | {r['completed']} | {ms(r['median_ttft_ms'])} | {ms(r['p99_ttft_ms'])} "
                f"| {r['median_tpot_ms']:.2f} | {r['p99_tpot_ms']:.2f} | {r['output_throughput']:,.0f} |"
            )
    if agg_rows:
        lines += ["", comparison_line(pd["bench"], agg_rows)]
    else:
        lines += ["", "The aggregated arm has not run yet (`bash scripts/real-run/gpu-run.sh agg`)."]
    return "\n".join(lines)


def repeat_run(run: Path) -> Path | None:
    """The earlier run this one repeats (run.json `repeat_of`: its folder name, then why), if saved."""
    named = load(run, "run.json").get("repeat_of", "").split(":")[0]
    found = run.parent / named if named else None
    return found if found and (found / "evidence-pd.json").is_file() else None


def comparison_line(pd_rows: list[dict[str, Any]], agg_rows: dict[int, dict[str, Any]]) -> str:
    """What the two arms say, from their own numbers, and why it is not the deployment's comparison."""
    pairs = [(r, agg_rows[r["clients"]]) for r in pd_rows if r["clients"] in agg_rows]
    loads = " / ".join(str(p["clients"]) for p, _ in pairs)
    ttft = " / ".join(f"{p['median_ttft_ms'] / a['median_ttft_ms']:.1f}x" for p, a in pairs)
    tput = " / ".join(f"{a['output_throughput'] / p['output_throughput']:.1f}x" for p, a in pairs)
    return (
        f"On one GPU, at {loads} clients, P/D's median TTFT is {ttft} the aggregated engine's, and the "
        f"aggregated engine's output throughput is {tput} P/D's. Expected here, and not the deployment's "
        "trade: both P/D engines share one GPU's compute and memory (0.4 of it each, against 0.8 for the one "
        "aggregated engine), and "
        "every request's KV crosses UCX on that device (the pull times above). What P/D buys on p5en — prefill "
        "off the decode GPUs, so decode steps are not stalled by long prompts — needs two GPUs and EFA; this "
        "table shows the path works end to end and what the one-GPU stand-in costs, not that gain."
    )


def xfer_line(text: str) -> str:
    """How long NIXL's pulls took, from vLLM's own histogram (decode side)."""
    buckets = sorted(
        (float(s.labels["le"]), s.value)
        for s in samples(text)
        if s.name == "ray_vllm_nixl_xfer_time_seconds_bucket" and s.node == "decode"
    )
    total = buckets[-1][1]
    within = dict(buckets)
    return (
        f"- NIXL pull time (vLLM's `nixl_xfer_time_seconds`, decode): {within[0.1]:.0f} of {total:.0f} within "
        f"100 ms, {total - within[1.0]:.0f} between 1 and 5 s. That is UCX moving whole prompts' KV between two "
        "processes on one GPU, the slow path this project configures LIBFABRIC to avoid; it is not an EFA figure, "
        "and it is most of P/D's TTFT in the table below."
    )


def with_section(text: str, name: str, body: str) -> str:
    start, end = f"<!-- section:{name} -->", f"<!-- /section:{name} -->"
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def rendered_doc(text: str) -> str:
    overrides = load_overrides()
    text = with_section(text, "overrides", overrides_section(overrides))
    text = with_section(text, "prefix-overrides", prefix_overrides_section(overrides))
    text = with_section(text, "mix-overrides", mix_overrides_section(overrides))
    text = with_section(text, "prefix-results", routing_evidence.prefix_results_section(routing_evidence.prefix_run()))
    text = with_section(text, "mix-results", mix_evidence.mix_results_section(mix_evidence.mix_run()))
    text = with_section(text, "router-results", routing_evidence.router_section(routing_evidence.router_run()))
    return with_section(text, "results", results_section(latest()))


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_sizing.realrun.doc", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/real-run.md's tables are stale")
    args = parser.parse_args(argv)
    current = read_regular_file(DOC, 4 << 20, "docs/real-run.md").decode()
    wanted = rendered_doc(current)
    if args.check:
        return Exit.OK if wanted == current else Exit.FAILED
    atomic_write(DOC, wanted)
    print(DOC)
    return Exit.OK


if __name__ == "__main__":
    exit_with("realrun-doc", main)
