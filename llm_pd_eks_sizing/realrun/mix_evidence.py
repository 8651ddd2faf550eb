"""The decode-only arms' saved evidence (`evidence-mix-pd.json`, `evidence-mix-cond.json`), read back as
docs/real-run.md's mix tables, each beside the sizing model: per load (both prompt classes alone, then
mixed) and prompt class, TTFT, ITL and the P/D path counter, and what the model predicts for the mix."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.models import MODELS
from llm_pd_eks_sizing.model.engine import Replica
from llm_pd_eks_sizing.model.kv import kv_transfer
from llm_pd_eks_sizing.model.mix import MixClass, mix_load
from llm_pd_eks_sizing.model.routing import HOP_ASSUMED_S, decode_only_threshold
from llm_pd_eks_sizing.realrun import gpu_mix
from llm_pd_eks_sizing.realrun.evidence import load, ms, runs
from llm_pd_eks_sizing.realrun.routing_evidence import NOT_RUN, PATHS, newest_with

MIX_EVIDENCE = (("mix-pd", "P/D"), ("mix-cond", "P/D, decode-only below the threshold"))


def mix_run() -> Optional[Path]:
    return newest_with(tuple(p for p, _ in MIX_EVIDENCE))


def mix_rows(run: Path) -> list[dict[str, Any]]:
    """One row per load, prompt class and arm: the class's figures and how many requests of the load
    took each P/D path, or, for a load not run, why (`skipped`)."""
    rows = []
    for phase, arm in MIX_EVIDENCE:
        if not (run / f"evidence-{phase}.json").is_file():
            continue
        found = load(run, f"evidence-{phase}.json")
        counted = found.get("decode_only_below_tokens") is not None
        for level in found.get("loads", []):
            if "skipped" in level:
                for name in dict(gpu_mix.LOADS)[level["load"]]:
                    rows.append({"load": level["load"], "class": name, "arm": arm, "skipped": level["skipped"]})
                continue
            for name, c in level.get("classes", {}).items():
                s = c["summary"]
                rows.append(
                    {
                        "load": level["load"],
                        "class": name,
                        "arm": arm,
                        "threshold": found.get("decode_only_below_tokens"),
                        "clients": c["clients"],
                        **{k: s[k] for k in ("completed", "p50_ttft_ms", "p90_ttft_ms", "p50_itl_ms", "output_tok_s")},
                        # None: no path counter (Ray's own decode server, which the P/D arm runs, has none;
                        # a series an earlier arm left on the same raylets does not grow under it)
                        **{path: level.get("paths", {}).get(path, 0.0) if counted else None for path in PATHS},
                    }
                )
    loads, classes = [name for name, _ in gpu_mix.LOADS], [c[0] for c in gpu_mix.MIX_CLASSES]
    arms = [a for _, a in MIX_EVIDENCE]
    return sorted(rows, key=lambda r: (loads.index(r["load"]), classes.index(r["class"]), arms.index(r["arm"])))


def _change(before: Optional[float], after: Optional[float], unit: str = " ms") -> str:
    if before is None or after is None:
        return "not measured"
    share = f" ({(after - before) / before:+.0%})" if before else ""
    return f"from {before:.1f} to {after:.1f}{unit}{share}"


def mix_check(run: Path) -> list[str]:
    """What `make size` said of decode-only for the run's model and GPU, and what the two arms showed:
    with both classes at once, the short prompts' TTFT and the long prompts' TTFT and ITL; alone, how
    much longer a short prompt's first token took through P/D (the hop and the KV handoff, measured;
    P/D's figure from the newest earlier run where this one did not measure it, named), and the
    threshold `make size`'s rule gives with that hop (`measured_hop_line`)."""
    rows = {(r["load"], r["class"], r["arm"]): r for r in mix_rows(run)}
    pd, cond = (a for _, a in MIX_EVIDENCE)

    def figure(load_name: str, name: str, arm: str, key: str) -> Optional[float]:
        return rows.get((load_name, name, arm), {}).get(key)  # a skipped load's row has no figures

    saved = [load(run, f"evidence-{p}.json") for p, _ in MIX_EVIDENCE if (run / f"evidence-{p}.json").is_file()]
    sized = next((e["sized_decode_only"] for e in saved if e.get("sized_decode_only")), None)
    family = str(sized.get("instance_type", "p5en.48xlarge")).split(".")[0] if sized else ""
    lines = [f"- `make size` for this model on {family}: {sized['text']}." if sized else "- `make size`: not recorded."]
    lines.append(
        "- Both classes at once, decode-only moved the short prompts' median TTFT "
        f"{_change(figure('together', 'short', pd, 'p50_ttft_ms'), figure('together', 'short', cond, 'p50_ttft_ms'))} "
        "and the long prompts' median TTFT "
        f"{_change(figure('together', 'long', pd, 'p50_ttft_ms'), figure('together', 'long', cond, 'p50_ttft_ms'))} "
        "and median ITL "
        f"{_change(figure('together', 'long', pd, 'p50_itl_ms'), figure('together', 'long', cond, 'p50_itl_ms'))}."
    )
    alone_pd, alone_cond = (figure("short alone", "short", arm, "p50_ttft_ms") for arm in (pd, cond))
    where = "here"
    if alone_pd is None and alone_cond is not None:
        earlier = earlier_figure(run, "short alone", "short", pd, "p50_ttft_ms")
        if earlier is not None:
            alone_pd, where = earlier[1], f"P/D's from run `{earlier[0].name}`, another machine of the same kind"
    if alone_pd is not None and alone_cond is not None:
        hop = f"{sized['hop_s'] * 1e3:.0f} ms" if sized else "a fixed hop"
        lines.append(
            f"- Short prompts alone: P/D's median TTFT is {alone_pd - alone_cond:.1f} ms over decode-only's, what the "
            f"prefill hop and the KV handoff cost ({where}; UCX on one GPU; `make size` assumes {hop} plus the "
            "handoff)."
        )
        lines.extend(measured_hop_line(run, (alone_pd - alone_cond) / 1e3))
    return lines


def measured_hop_line(run: Path, hop_s: float) -> list[str]:
    """`make size`'s idle-stage rule with the measured hop in place of the assumed one: the threshold
    it then gives for the run's model and GPU, beside the arm's own."""
    record = load(run, "run.json")
    if not {"model_id", "instance_type"} <= record.keys() or hop_s <= 0:
        return []
    found = decode_only_threshold(MODELS[record["model_id"]], GPU_INSTANCE_TYPES[record["instance_type"]], hop_s=hop_s)
    if found.tokens is None or found.tokens <= 1:
        return [f"- With that {hop_s * 1e3:.0f} ms as the hop, `make size`'s idle-stage rule: {found.text()}."]
    short = min(tokens for _, _, _, tokens in gpu_mix.MIX_CLASSES)
    verdict = (
        f"above the arm's {short:,}-token prompts: the rule agrees with the run once its hop is measured"
        if found.tokens > short
        else f"not above the arm's {short:,}-token prompts: the rule and the run disagree"
    )
    return [
        f"- With that {hop_s * 1e3:.0f} ms as the hop, `make size`'s idle-stage rule puts the threshold at "
        f"{found.tokens:,} tokens (decode-only pays below it), {verdict}."
    ]


def earlier_figure(run: Path, load_name: str, name: str, arm: str, key: str) -> Optional[tuple[Path, float]]:
    """The newest run before `run` that measured this load, class and arm: (that run, its figure)."""
    for other in reversed([r for r in runs() if r.name < run.name]):
        if any((other / f"evidence-{phase}.json").is_file() for phase, _ in MIX_EVIDENCE):
            for r in mix_rows(other):
                if (r["load"], r["class"], r["arm"]) == (load_name, name, arm) and r.get(key) is not None:
                    return other, r[key]
    return None


MIX_FIT_LOAD = "long alone"  # the load the prefill stage's cost a token is fitted on (fit_load)


def _means(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Mean TTFT and ITL (seconds) of a class's answered requests."""
    ok = [r for r in rows if r.get("status") == 200 and "ttft_s" in r and "itl_s" in r]
    return sum(r["ttft_s"] for r in ok) / len(ok), sum(r["itl_s"] for r in ok) / len(ok)


def fit_load(arms: dict[str, dict[str, Any]]) -> Optional[tuple[str, dict[str, Any]]]:
    """The arm and load the prefill stage's cost is fitted on: P/D's long-alone load, or, where that was
    not run, the decode-only arm's, whose long prompts (above its threshold) all went through P/D too,
    as its path counter shows."""
    for arm, found in arms.items():
        for ld in found.get("loads", []):
            if ld["load"] != MIX_FIT_LOAD or "classes" not in ld:
                continue
            if found.get("decode_only_below_tokens") is None or not ld.get("paths", {}).get("decode_only", 1.0):
                return arm, ld
    return None


def mix_model_rows(run: Path) -> list[dict[str, Any]]:
    """The sizing model's mix (sizing/mix.py) against every measured class of both arms: mean TTFT and
    ITL, model and measured. The prefill stage's cost beyond the engine model's prefill (here UCX's
    handoff on one shared GPU, which kv.py's EFA rates do not describe) is fitted on a long-alone load
    (`fit_load`), a saturated closed loop whose cycle is that stage's service time; every other row is
    held out."""
    record = load(run, "run.json")
    if not {"model_id", "instance_type"} <= record.keys() or not all(
        (run / f"evidence-{phase}.json").is_file() for phase, _ in MIX_EVIDENCE
    ):
        return []  # a run that cannot be modelled: no model, GPU or arm saved
    replica = Replica(MODELS[record["model_id"]], GPU_INSTANCE_TYPES[record["instance_type"]], 1)
    arms = {arm: load(run, f"evidence-{phase}.json") for phase, arm in MIX_EVIDENCE}
    fitted = fit_load(arms)
    if fitted is None:
        return []
    fitted_arm, fit = fitted
    long_rows = fit["classes"]["long"]["requests"]
    tokens = sum(r["prompt_tokens"] for r in long_rows) / len(long_rows)
    service = fit["classes"]["long"]["summary"]["wall_s"] / fit["classes"]["long"]["summary"]["completed"]
    per_token = (service - replica.prefill_seconds(tokens)) / tokens
    rows = []
    for arm, found in arms.items():
        threshold = found.get("decode_only_below_tokens")
        for ld in found.get("loads", []):
            if "classes" not in ld:
                continue
            classes = []
            for name, c in ld["classes"].items():
                rs = c["requests"]
                prompt = round(sum(r["prompt_tokens"] for r in rs) / len(rs))
                output = round(sum(r["output_tokens"] for r in rs) / len(rs))
                classes.append(MixClass(name, c["clients"], prompt, output))
            model = mix_load(replica, classes, stage_s=lambda n: per_token * n, decode_only_below=threshold)
            for name, c in ld["classes"].items():
                ttft, itl = _means(c["requests"])
                rows.append(
                    {
                        "load": ld["load"],
                        "class": name,
                        "arm": arm,
                        "fitted": arm == fitted_arm and ld["load"] == MIX_FIT_LOAD,
                        "ttft_s": ttft,
                        "model_ttft_s": model[name].ttft_s,
                        "itl_s": itl,
                        "model_itl_s": model[name].itl_s,
                        "stage_s_per_token": per_token,
                    }
                )
    return rows


def mix_model_section(run: Path) -> list[str]:
    rows = mix_model_rows(run)
    if not rows:
        return []
    lines = [
        "",
        f"The sizing model's mix (`llm_pd_eks_sizing/model/mix.py`: closed loops, the prefill stage one FCFS "
        f"queue both classes share unless decode-only takes the short ones out of it), mean TTFT and ITL; the "
        f"prefill stage's cost beyond the model's prefill, {rows[0]['stage_s_per_token'] * 1e6:.0f} µs a prompt "
        f"token (UCX's handoff on one shared GPU), fitted on the {MIX_FIT_LOAD} load of the arm marked "
        "(fitted), every request of it through P/D, every other row held out:",
        "",
        "| load | prompts | arm | mean TTFT ms | model | ratio | mean ITL ms | model | ratio |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        arm = r["arm"] + (" (fitted)" if r["fitted"] else "")
        lines.append(
            f"| {r['load']} | {r['class']} | {arm} | {ms(r['ttft_s'] * 1e3)} | {ms(r['model_ttft_s'] * 1e3)} "
            f"| {r['model_ttft_s'] / r['ttft_s']:.2f} | {r['itl_s'] * 1e3:.2f} | {r['model_itl_s'] * 1e3:.2f} "
            f"| {r['model_itl_s'] / r['itl_s']:.2f} |"
        )
    return [*lines, "", deployment_mix_line(run)]


def deployment_mix_line(run: Path) -> str:
    """What the same model says of the run's mix on the deployment's fabric: the run's instance type
    with kv.py's EFA handoff by message size and the assumed hop."""
    record = load(run, "run.json")
    model, instance = MODELS[record["model_id"]], GPU_INSTANCE_TYPES[record["instance_type"]]
    replica = Replica(model, instance, 1)
    classes = [
        MixClass(name, clients, tokens, gpu_mix.MIX_OUTPUT_TOKENS) for name, clients, _, tokens in gpu_mix.MIX_CLASSES
    ]
    threshold = load(run, "evidence-mix-cond.json")["decode_only_below_tokens"]
    handoff = lambda n: kv_transfer(model, n, 2, instance, 1).seconds  # noqa: E731
    pd = mix_load(replica, classes, handoff_s=handoff)
    cond = mix_load(replica, classes, handoff_s=handoff, decode_only_below=threshold)
    short, long = (c[0] for c in gpu_mix.MIX_CLASSES)
    return (
        f"- The same mix on {instance.name} over EFA (kv.py's handoff by message size, a {HOP_ASSUMED_S * 1e3:.0f} ms "
        f"hop assumed), by the model: decode-only below {threshold:,} tokens moves the short prompts' mean TTFT "
        f"from {pd[short].ttft_s * 1e3:.0f} to {cond[short].ttft_s * 1e3:.0f} ms, the long prompts' from "
        f"{pd[long].ttft_s * 1e3:.0f} to {cond[long].ttft_s * 1e3:.0f} ms, and the ITL from "
        f"{pd[long].itl_s * 1e3:.2f} to {cond[long].itl_s * 1e3:.2f} ms: the short prompts skip the prefill "
        "queue the long ones fill, which `make size`'s idle-stage threshold above does not weigh."
    )


def machine(run: Path) -> str:
    """`, on <the machine run.json names>`, or nothing where it names none."""
    named = load(run, "run.json").get("machine") if (run / "run.json").is_file() else None
    return f", on {named}" if named else ""


def mix_results_section(run: Optional[Path]) -> str:
    if run is None:
        return NOT_RUN.format("mix-pd", "mix-cond")
    lines = [
        f"Run `{run.name}`{machine(run)}. Requests by path: the project's `ray_llm_pd_eks_pd_path_requests_total` "
        "over the whole load (both classes).",
        "",
        "| load | prompts | arm | clients | requests | median TTFT ms | p90 TTFT ms | median ITL ms | output tok/s "
        "| decode-only / P/D requests |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    tokens = {c[0]: c[3] for c in gpu_mix.MIX_CLASSES}
    for r in mix_rows(run):
        if "skipped" in r:
            prompts = f"{r['class']} ({tokens[r['class']]:,})"
            lines.append(f"| {r['load']} | {prompts} | {r['arm']} | skipped: {r['skipped']} | | | | | | |")
            continue
        arm = r["arm"] if r["threshold"] is None else r["arm"].replace("the threshold", f"{r['threshold']:,} tokens")
        itl = "n/a" if r["p50_itl_ms"] is None else f"{r['p50_itl_ms']:.2f}"
        paths = "no counter" if r["decode_only"] is None else f"{r['decode_only']:.0f} / {r['disaggregated']:.0f}"
        lines.append(
            f"| {r['load']} | {r['class']} ({tokens[r['class']]:,}) | {arm} | {r['clients']} | {r['completed']} "
            f"| {ms(r['p50_ttft_ms'])} | {ms(r['p90_ttft_ms'])} | {itl} | {r['output_tok_s']:,.0f} | {paths} |"
        )
    return "\n".join([*lines, "", *mix_check(run), *mix_model_section(run)])
