"""The decode-only arms of the real run (`mix-pd`, `mix-cond`): their threshold, their loads against a
fake streaming server, the phase's order with the cluster faked, and the table the saved evidence gives."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Any, Iterator

import pytest
from helpers import FakeCompletions

from llm_pd_eks import serve_routing
from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.models import MODELS
from llm_pd_eks_sizing.model.routing import decode_only_threshold as sized_threshold
from llm_pd_eks_sizing.realrun import doc as real_run_doc
from llm_pd_eks_sizing.realrun import evidence, gpu_load, gpu_main, gpu_mix, gpu_model, routing_evidence
from llm_pd_eks_sizing.realrun import mix_evidence as mix_records
from llm_pd_eks_sizing.realrun.render import decode_only_threshold, load_overrides, run_inputs, write_bundle

OVERRIDES = load_overrides()
SMALL = (("short", 2, 4, 10), ("long", 2, 4, 30))  # the classes' shape, small enough for a fake server


def test_the_arms_threshold_sends_the_short_prompts_decode_only_and_the_long_ones_through_pd() -> None:
    (short, *_), (long, *_) = gpu_mix.MIX_CLASSES
    tokens = {name: t for name, _, _, t in gpu_mix.MIX_CLASSES}
    threshold = decode_only_threshold(OVERRIDES)
    # a short prompt is its class's tokens plus its request name (a few tokens); a long one is never below
    assert tokens[short] + 32 < threshold <= tokens[long]
    decode = run_inputs(OVERRIDES)["serve_cond"]["applications"][0]["args"]["decode_config"]
    assert decode["experimental_configs"] == {serve_routing.THRESHOLD_KEY: threshold}


def test_the_bundle_keeps_what_make_size_says_of_decode_only_beside_the_arm(tmp_path: Path) -> None:
    write_bundle(tmp_path, OVERRIDES)
    sized = json.loads((tmp_path / "meta.json").read_text())["sized_decode_only"]
    found = sized_threshold(MODELS["Qwen/Qwen2.5-7B-Instruct"], GPU_INSTANCE_TYPES["p5en.48xlarge"])
    assert sized == {
        "instance_type": "p5en.48xlarge",
        "tokens": found.tokens,
        "hop_s": found.hop_s,
        "text": found.text(),
    }


def test_a_bundle_for_another_gpu_renders_that_gpus_instance_type_and_make_sizes_claim_for_it(tmp_path: Path) -> None:
    write_bundle(tmp_path, load_overrides(instance_type="p5.48xlarge"))
    meta = json.loads((tmp_path / "meta.json").read_text())
    found = sized_threshold(MODELS["Qwen/Qwen2.5-7B-Instruct"], GPU_INSTANCE_TYPES["p5.48xlarge"])
    assert meta["sized_decode_only"]["instance_type"] == "p5.48xlarge"
    assert meta["sized_decode_only"]["text"] == found.text()
    item = next(i for i in meta["overrides"]["stack_config"] if i["path"] == "gpuNodes.instanceType")
    assert item["reason"] == "the machine's GPU is one NVIDIA H100 80GB HBM3, the GPU of p5.48xlarge"
    prefill = json.loads((tmp_path / "serve-pd.json").read_text())["applications"][0]["args"]["prefill_config"]
    assert prefill["accelerator_type"] == "H100"


def test_each_load_has_prompts_of_its_own_of_about_its_classes_length() -> None:
    first, again, other = (gpu_mix.mix_workload(seed, gpu_load.word_count) for seed in (0, 0, 1))
    assert first == again and first != other
    for name, _, requests, tokens in gpu_mix.MIX_CLASSES:
        rows = first[name]
        assert len(rows) == requests and {r["class"] for r in rows} == {name}
        assert all(tokens <= gpu_load.word_count(r["prompt"]) <= tokens + 3 for r in rows)  # + "Request x-0-n:"
    prompts = [r["prompt"] for rows in (*first.values(), *other.values()) for r in rows]
    assert len({p.split(":")[0] for p in prompts}) == len(prompts)  # every prompt opens with its own name


def test_the_path_counter_is_summed_by_path_over_nodes_and_replicas() -> None:
    name = gpu_mix.PATH_REQUESTS
    scrape = {
        "decode": f'{name}{{path="decode_only",ReplicaId="a"}} 3.0\n{name}{{path="decode_only",ReplicaId="b"}} 2.0\n'
        f'{name}{{path="disaggregated",ReplicaId="a"}} 7.0\nother_total{{path="decode_only"}} 100.0\n',
        "head": f'# HELP {name} x\n{name}{{path="disaggregated"}} 1.0\n',
    }
    assert gpu_mix.label_sums(scrape, name, "path") == {"decode_only": 5.0, "disaggregated": 8.0}


@pytest.fixture
def slow_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCompletions]:
    server = FakeCompletions(tokens=5, gap_s=0.05)
    monkeypatch.setattr(gpu_load, "SERVE", server.url)
    monkeypatch.setattr(gpu_mix, "MIX_CLASSES", SMALL)
    yield server
    server.close()
    assert not server.server.errors


def path_scrapes() -> Any:
    """Scrapes whose path counter grows by 4 of each path over every load (scrape 2k+1 is load k's
    before, 2k+2 its after)."""
    numbers = iter(range(1, 100))

    def scrape() -> dict[str, str]:
        i = next(numbers)
        grown = 4 * ((i - 1) // 2) if i % 2 else 2 * i
        name = gpu_mix.PATH_REQUESTS
        return {"decode": f'{name}{{path="decode_only"}} {grown}\n{name}{{path="disaggregated"}} {grown}\n'}

    return scrape


def test_the_together_load_runs_both_classes_at_once_then_each_runs_alone(slow_fake: FakeCompletions) -> None:
    loads = gpu_mix.mix_loads("m", path_scrapes(), gpu_load.word_count, wait_s=0, sleep=lambda s: None)
    assert [(ld["load"], ld["seed"], sorted(ld["classes"])) for ld in loads] == [
        ("together", 0, ["long", "short"]),
        ("short alone", 1, ["short"]),
        ("long alone", 2, ["long"]),
    ]
    assert slow_fake.most > 2  # more than one class's two clients in flight: the classes overlapped
    for ld in loads:
        assert ld["paths"] == {"decode_only": 4.0, "disaggregated": 4.0}
        for c in ld["classes"].values():
            assert c["clients"] == 2 and c["summary"]["completed"] == 4 and len(c["requests"]) == 4
    bodies = [b for b in slow_fake.bodies if b["prompt"].startswith("Request long-0-")]
    assert len(bodies) == 4 and all(b["max_tokens"] == gpu_mix.MIX_OUTPUT_TOKENS for b in bodies)


def test_a_load_that_would_run_past_the_phases_deadline_is_skipped_but_the_first_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gpu_mix, "MIX_CLASSES", SMALL)
    sent: list[str] = []
    loads = gpu_mix.mix_loads(
        "m",
        lambda: {},
        gpu_load.word_count,
        deadline=0.0,  # long past
        send=lambda model, prompt: sent.append(prompt) or {"status": 200, "ttft_s": 0.01, "output_tokens": 2},
        sleep=lambda s: None,
    )
    assert [ld.get("skipped") for ld in loads] == [None, "the phase's time budget", "the phase's time budget"]
    assert len(sent) == 8 and loads[0]["classes"]["short"]["summary"]["completed"] == 4


def test_the_mix_loads_after_one_that_stalled_are_skipped_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_mix, "MIX_CLASSES", SMALL)
    sent: list[str] = []

    def send(model: str, prompt: str) -> dict[str, Any]:
        sent.append(prompt)
        return {"status": 0, "error": "timed out", "stalled": True} if "long" in prompt else {"status": 200}

    loads = gpu_mix.mix_loads("m", lambda: {}, gpu_load.word_count, send=send, sleep=lambda s: None)
    assert loads[0]["classes"]["long"]["summary"]["stalled"] is True
    assert "stalled" not in loads[0]["classes"]["short"]["summary"]
    assert [ld.get("skipped") for ld in loads[1:]] == [gpu_load.STALLED_BEFORE] * 2
    assert 1 <= sum("long" in p for p in sent) <= 2  # at most one stalled request per long client, then none


def test_a_mix_phase_deploys_its_arm_and_keeps_the_threshold_the_sized_claim_and_its_timings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, out = tmp_path / "bundle", tmp_path / "out"
    write_bundle(bundle, OVERRIDES)
    out.mkdir()
    calls: list[Any] = []
    monkeypatch.setattr(gpu_main.gpu_installed, "versions", lambda: {"ray": "2.58.0"})
    monkeypatch.setattr(
        gpu_main, "ensure_raylets", lambda b, ev, name="raylets.json", keep_app=False: calls.append(("raylets", name))
    )
    monkeypatch.setattr(
        gpu_main,
        "deploy",
        lambda config, timeout_s, put=True: (
            calls.append(("deploy", config)) or {"applications": {"llm": {"status": "RUNNING"}}}
        ),
    )
    monkeypatch.setattr(
        gpu_main, "run_tokenizer", lambda: types.SimpleNamespace(encode=lambda t: types.SimpleNamespace(ids=t.split()))
    )
    seen: dict[str, Any] = {}

    def mix_loads(model: str, scrape: Any, count: Any, **kw: Any) -> list[dict[str, Any]]:
        seen.update(model=model, count=count("a b"), **kw)
        return [{"load": "together"}]

    monkeypatch.setattr(gpu_mix, "mix_loads", mix_loads)
    got = gpu_main.phase_mix(bundle, out, "cond")
    assert calls == [("raylets", "raylets.json"), ("deploy", run_inputs(OVERRIDES)["serve_cond"])]
    assert got["decode_only_below_tokens"] == decode_only_threshold(OVERRIDES)
    assert got["sized_decode_only"]["tokens"] == 1 and "never pays" in got["sized_decode_only"]["text"]
    assert got["loads"] == [{"load": "together"}] and seen["count"] == 2 and seen["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert set(got["timings"]) == {"raylets_s", "deploy_s", "loads_s", "phase_s"}
    plain = gpu_main.phase_mix(bundle, out, "pd")
    assert plain["decode_only_below_tokens"] is None


# --- the saved evidence, read back for docs/real-run.md ---------------------------------------------


def mix_class(clients: int, ttft: float, itl: float) -> dict[str, Any]:
    summary = {"completed": 48, "p50_ttft_ms": ttft, "p90_ttft_ms": 2 * ttft, "p50_itl_ms": itl, "output_tok_s": 900.0}
    return {"clients": clients, "summary": summary}


def mix_evidence(short_ttft: float, long_itl: float, alone_ttft: float, decode_only: float) -> dict[str, Any]:
    paths = {"decode_only": decode_only, "disaggregated": 48.0}
    return {
        "loads": [
            {
                "load": "together",
                "classes": {"short": mix_class(8, short_ttft, 5.0), "long": mix_class(8, 300.0, long_itl)},
                "paths": paths,
            },
            {"load": "short alone", "classes": {"short": mix_class(8, alone_ttft, 4.5)}, "paths": paths},
            {"load": "long alone", "skipped": "the phase's time budget"},
        ]
    }


def test_the_mix_table_has_a_row_per_load_class_and_arm_and_ends_with_the_sized_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "2026-12-05T1100Z"
    run.mkdir()
    (run / "run.json").write_text("{}")
    sized = {"tokens": 1, "hop_s": 0.005, "text": "decode-only never pays here (...)"}
    pd = {**mix_evidence(80.0, 5.0, 60.0, 0.0), "decode_only_below_tokens": None, "sized_decode_only": sized}
    cond = {**mix_evidence(40.0, 6.0, 35.0, 48.0), "decode_only_below_tokens": 1024, "sized_decode_only": sized}
    (run / "evidence-mix-pd.json").write_text(json.dumps(pd))
    (run / "evidence-mix-cond.json").write_text(json.dumps(cond))
    rows = mix_records.mix_rows(run)
    assert [(r["load"], r["class"], r["arm"]) for r in rows] == [
        ("together", "short", "P/D"),
        ("together", "short", "P/D, decode-only below the threshold"),
        ("together", "long", "P/D"),
        ("together", "long", "P/D, decode-only below the threshold"),
        ("short alone", "short", "P/D"),
        ("short alone", "short", "P/D, decode-only below the threshold"),
        ("long alone", "long", "P/D"),
        ("long alone", "long", "P/D, decode-only below the threshold"),
    ]
    assert rows[-1]["skipped"] == "the phase's time budget" and "p50_ttft_ms" not in rows[-1]
    table = mix_records.mix_results_section(run)
    assert (
        "| together | short (128) | P/D, decode-only below 1,024 tokens | 8 | 48 | 40.0 | 80.0 | 5.00 | 900 | 48 / 48 |"
        in table
    )
    # the P/D arm runs Ray's own decode server: a path series there is one an earlier arm left behind
    assert "| together | long (4,096) | P/D | 8 | 48 | 300 | 600 | 5.00 | 900 | no counter |" in table
    assert "| long alone | long (4,096) | P/D | skipped: the phase's time budget | | | | | | |" in table
    assert "sizing model's mix" not in table  # no model or GPU in this run.json: nothing to model
    assert "- `make size` for this model on p5en: decode-only never pays here (...)." in table
    assert "short prompts' median TTFT from 80.0 to 40.0 ms (-50%)" in table
    assert "long prompts' median TTFT from 300.0 to 300.0 ms (+0%) and median ITL from 5.0 to 6.0 ms (+20%)" in table
    assert "P/D's median TTFT is 25.0 ms over decode-only's" in table and "assumes 5 ms" in table
    monkeypatch.setattr(evidence, "DATA", tmp_path)
    assert mix_records.mix_run() == run and routing_evidence.prefix_run() is None


def test_a_p_d_short_alone_load_not_run_is_taken_from_the_newest_earlier_run_and_named(tmp_path: Path) -> None:
    monkeypatch = pytest.MonkeyPatch()
    sized = {"tokens": 1, "hop_s": 0.005, "text": "decode-only never pays here (...)"}
    for name, alone in (("2026-12-04T1000Z", 70.0), ("2026-12-05T1000Z", 60.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text("{}")
        pd = {**mix_evidence(80.0, 5.0, alone, 0.0), "decode_only_below_tokens": None, "sized_decode_only": sized}
        (tmp_path / name / "evidence-mix-pd.json").write_text(json.dumps(pd))
    run = tmp_path / "2026-12-06T1000Z"
    run.mkdir()
    (run / "run.json").write_text("{}")
    pd = {**mix_evidence(80.0, 5.0, 60.0, 0.0), "decode_only_below_tokens": None, "sized_decode_only": sized}
    pd["loads"][1] = {"load": "short alone", "skipped": "the phase's time budget"}
    cond = {**mix_evidence(40.0, 6.0, 35.0, 48.0), "decode_only_below_tokens": 1024, "sized_decode_only": sized}
    (run / "evidence-mix-pd.json").write_text(json.dumps(pd))
    (run / "evidence-mix-cond.json").write_text(json.dumps(cond))
    with monkeypatch.context() as m:
        m.setattr(evidence, "DATA", tmp_path)
        table = mix_records.mix_results_section(run)
    assert "P/D's median TTFT is 25.0 ms over decode-only's" in table  # 60 (the newer earlier run) - 35
    assert "P/D's from run `2026-12-05T1000Z`, another machine of the same kind" in table


def test_the_prefill_stage_is_fitted_on_the_decode_only_arms_long_load_only_where_it_all_went_through_p_d() -> None:
    long_alone = {"load": "long alone", "classes": {"long": mix_class(8, 5000.0, 6.0)}}
    pd = {"decode_only_below_tokens": None, "loads": [{"load": "long alone", "skipped": "the phase's time budget"}]}
    cond = {"decode_only_below_tokens": 1024, "loads": [{**long_alone, "paths": {"decode_only": 0.0}}]}
    assert mix_records.fit_load({"P/D": pd, "cond": cond}) == ("cond", cond["loads"][0])
    cond["loads"][0]["paths"] = {"decode_only": 3.0, "disaggregated": 45.0}  # some took the other path
    assert mix_records.fit_load({"P/D": pd, "cond": cond}) is None
    pd["loads"] = [long_alone]
    assert mix_records.fit_load({"P/D": pd, "cond": cond}) == ("P/D", long_alone)


def test_the_page_carries_the_newest_saved_mix_arms_and_says_when_none_ran() -> None:
    assert "Not run yet" in mix_records.mix_results_section(None)
    run = mix_records.mix_run()
    assert run is not None and mix_records.mix_results_section(run) in real_run_doc.DOC.read_text()
    assert "decodeOnlyBelowTokens` | `1024`" in real_run_doc.DOC.read_text()  # the arm's setting, from overrides.yaml


# --- make realrun-dry: the cluster steps on this machine's Ray, here with gpu_main faked -------------


def fake_steps(monkeypatch: pytest.MonkeyPatch, status: str = "RUNNING") -> list[str]:
    calls: list[str] = []
    marks = iter(["started", "reused", "started"])

    def ensure(bundle: Path, evidence: dict[str, Any], name: str = "raylets.json") -> None:
        calls.append(f"raylets {name}")
        evidence["raylets"] = f"{next(marks)} ({name})"

    monkeypatch.setattr(gpu_main, "ensure_raylets", ensure)
    monkeypatch.setattr(
        gpu_main,
        "deploy",
        lambda config, timeout_s: (
            calls.append(f"deploy {config['applications'][0]['import_path']}")
            or {"applications": {"llm": {"status": status}}}
        ),
    )
    monkeypatch.setattr(gpu_main, "scrape", lambda: calls.append("scrape") or {"head": "ray_x 1", "decode": "ray_y 2"})
    monkeypatch.setattr(gpu_main, "ray_stop", lambda: calls.append("stop"))
    return calls


def test_the_dry_run_walks_the_arms_cluster_order_and_stops_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from llm_pd_eks_sizing.realrun import dry_run

    calls = fake_steps(monkeypatch)
    timings = dry_run.walk(tmp_path, lambda line: None)
    assert calls == [
        "raylets raylets.json",
        "deploy realrun_standin:app",
        "scrape",
        "raylets raylets.json",
        "deploy realrun_standin:app",
        "raylets raylets-prefix.json",
        "deploy realrun_standin:app",
        "stop",
    ]
    assert [name for name, _ in timings][3] == "raylets reused, Serve shut down (raylets.json)"
    assert gpu_main.build_tokenizer is gpu_model.build_tokenizer  # walk's stand-in for it is gone again


def test_a_dry_run_step_that_fails_names_itself_and_still_stops_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from llm_pd_eks_sizing.realrun import dry_run
    from llm_pd_eks_tools.core.cli import Exit, ToolError

    calls = fake_steps(monkeypatch, status="DEPLOY_FAILED")
    with pytest.raises(ToolError, match="first arm deployed: the stand-in application is DEPLOY_FAILED") as error:
        dry_run.walk(tmp_path, lambda line: None)
    assert error.value.exit_code == Exit.FAILED and calls[-1] == "stop"


def test_the_dry_run_refuses_to_run_beside_a_ray_cluster_it_would_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_pd_eks_sizing.realrun import dry_run
    from llm_pd_eks_tools.core.cli import Exit, ToolError

    monkeypatch.setattr(gpu_main, "cluster_up", lambda: True)
    with pytest.raises(ToolError, match="already answers") as error:
        dry_run.main([])
    assert error.value.exit_code == Exit.USAGE


def test_the_probe_timeouts_are_counted_per_serve_log_and_only_where_they_rose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "session_latest" / "logs" / "serve"
    logs.mkdir(parents=True)
    line = f"WARNING ... -- {gpu_main.PROBE_TIMEOUT} Replica(id='a', deployment='prefill') within 0.1s."
    (logs / "replica_llm_decode_x.log").write_text(f"{line}\nINFO fine\n{line}\n")
    (logs / "replica_llm_prefill_y.log").write_text("INFO fine\n")
    monkeypatch.setattr(gpu_main, "TEMP_DIR", str(tmp_path))
    before = gpu_main.probe_timeouts()
    assert before == {"replica_llm_decode_x.log": 2}
    (logs / "proxy_z.log").write_text(line + "\n")
    assert gpu_main.grown(before, gpu_main.probe_timeouts()) == {"proxy_z.log": 1}


# --- the saved run (data/2026-12-06T0535Z): the paths taken, and the sizing model's mix against it -----

SAVED = evidence.DATA / "2026-12-06T0535Z"


def saved_loads(name: str) -> dict[str, Any]:
    return {ld["load"]: ld for ld in json.loads((SAVED / name).read_text())["loads"]}


def test_the_saved_decode_only_arm_sent_the_short_prompts_decode_only_and_the_long_ones_through_prefill() -> None:
    together = saved_loads("evidence-mix-cond.json")["together"]
    assert together["paths"] == {"decode_only": 48.0, "disaggregated": 48.0}
    assert {n: c["summary"]["completed"] for n, c in together["classes"].items()} == {"short": 48, "long": 48}
    # Ray's own decode server (the P/D arm) counts no paths
    assert all(ld["paths"] == {} for ld in saved_loads("evidence-mix-pd.json").values())


def test_the_arm_run_before_the_tokenizer_count_sent_every_request_through_prefill() -> None:
    loads = saved_loads("evidence-mix-cond-no-endpoint.json")
    assert {name: ld["paths"] for name, ld in loads.items()} == {
        "together": {"disaggregated": 96.0},
        "short alone": {"disaggregated": 48.0},
        "long alone": {"disaggregated": 48.0},
    }


def model_rows() -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r["load"], r["class"], r["arm"]): r for r in mix_records.mix_model_rows(SAVED)}


def test_the_mix_model_puts_short_prompts_behind_the_long_ones_prefill_queue_as_the_run_did() -> None:
    rows = model_rows()
    pd, cond = (arm for _, arm in mix_records.MIX_EVIDENCE)
    for key in (("together", "short", pd), ("together", "long", pd), ("together", "long", cond)):
        ratio = rows[key]["model_ttft_s"] / rows[key]["ttft_s"]
        assert 0.8 <= ratio <= 1.3, (key, ratio)  # held out: only P/D's long-alone load is fitted
    for r in rows.values():
        assert 0.8 <= r["model_itl_s"] / r["itl_s"] <= 1.05, r
    # the feature's effect: short prompts out of the queue reach their first token tens of times sooner
    measured = rows[("together", "short", pd)]["ttft_s"] / rows[("together", "short", cond)]["ttft_s"]
    modelled = rows[("together", "short", pd)]["model_ttft_s"] / rows[("together", "short", cond)]["model_ttft_s"]
    assert measured > 40 and modelled > 40


def test_the_mix_models_known_misses_are_the_short_prompts_on_an_uncongested_path() -> None:
    """The short prompts that queue behind nothing: the model's TTFT is a prefill and a step, the run's
    carries Ray Serve's own request path (~0.1 s here), which the model does not hold. Listed, so a
    new miss or a fixed one shows."""
    pd, cond = (arm for _, arm in mix_records.MIX_EVIDENCE)
    misses = {k for k, r in model_rows().items() if not 0.5 <= r["model_ttft_s"] / r["ttft_s"] <= 2.0}
    assert misses == {("short alone", "short", pd), ("together", "short", cond)}
    for key in misses:
        row = model_rows()[key]
        assert 0.05 < row["ttft_s"] - row["model_ttft_s"] < 0.2  # the missing floor, in seconds


def test_the_mix_model_says_decode_only_pays_for_the_runs_mix_on_efa_too() -> None:
    line = mix_records.deployment_mix_line(SAVED)
    assert line.startswith("- The same mix on p5.48xlarge over EFA")
    figures = [float(x.replace(",", "")) for x in re.findall(r"from ([\d.,]+) to ([\d.,]+)", line) for x in x]
    short_pd, short_cond, long_pd, long_cond, itl_pd, itl_cond = figures
    assert short_cond < short_pd / 5 and long_cond <= long_pd and itl_pd < itl_cond < 1.2 * itl_pd


# --- the saved run of 09:35 (data/2026-12-06T0935Z): every load of the decode-only arm ----------------

SAVED_SAME_MACHINE = evidence.DATA / "2026-12-06T0935Z"


def test_the_second_saved_decode_only_arm_took_each_path_by_prompt_length_in_every_load() -> None:
    loads = {ld["load"]: ld for ld in json.loads((SAVED_SAME_MACHINE / "evidence-mix-cond.json").read_text())["loads"]}
    assert {name: ld["paths"] for name, ld in loads.items()} == {
        "together": {"decode_only": 48.0, "disaggregated": 48.0},
        "short alone": {"decode_only": 48.0, "disaggregated": 0.0},
        "long alone": {"decode_only": 0.0, "disaggregated": 48.0},
    }
    rows = {(r["load"], r["class"], r["arm"]): r for r in mix_records.mix_rows(SAVED_SAME_MACHINE)}
    pd, cond = (arm for _, arm in mix_records.MIX_EVIDENCE)
    # the same machine and raylets: out of the prefill queue, short prompts first-token in under a tenth
    assert rows[("together", "short", cond)]["p50_ttft_ms"] < rows[("together", "short", pd)]["p50_ttft_ms"] / 10
    assert rows[("together", "long", cond)]["p50_itl_ms"] <= rows[("together", "long", pd)]["p50_itl_ms"]


def test_the_prefill_stage_fitted_on_two_machines_agrees_and_predicts_the_held_out_loads() -> None:
    """The run of 09:35 fits the stage on the decode-only arm's long-alone load (every request of it
    through P/D, its P/D arm had no time for it); 05:35 fitted P/D's own. Two H100 machines, two arms,
    one cost a token within 10 %, and the held-out together loads within 0.8-1.3x."""
    first, second = mix_records.mix_model_rows(SAVED), mix_records.mix_model_rows(SAVED_SAME_MACHINE)
    (fitted,) = [r for r in second if r["fitted"]]
    assert (fitted["load"], fitted["arm"]) == ("long alone", mix_records.MIX_EVIDENCE[1][1])
    a, b = first[0]["stage_s_per_token"], second[0]["stage_s_per_token"]
    assert abs(a - b) / a < 0.10
    cond_short = ("short", mix_records.MIX_EVIDENCE[1][1])
    held_out = [r for r in second if r["load"] == "together" and (r["class"], r["arm"]) != cond_short]
    assert len(held_out) == 3
    for r in held_out:
        assert 0.8 <= r["model_ttft_s"] / r["ttft_s"] <= 1.3, r


def test_the_sized_threshold_with_the_measured_hop_says_whether_the_short_prompts_pay(tmp_path: Path) -> None:
    from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
    from llm_pd_eks.models import MODELS
    from llm_pd_eks_sizing.model.routing import decode_only_threshold

    record = {"model_id": "Qwen/Qwen2.5-7B-Instruct", "instance_type": "p5.48xlarge"}
    (tmp_path / "run.json").write_text(json.dumps(record))
    model, gpu = MODELS["Qwen/Qwen2.5-7B-Instruct"], GPU_INSTANCE_TYPES["p5.48xlarge"]
    (line,) = mix_records.measured_hop_line(tmp_path, 0.081)
    expected = decode_only_threshold(model, gpu, hop_s=0.081).tokens
    assert expected is not None and expected > 128 and f"threshold at {expected:,} tokens" in line
    assert "the rule agrees with the run" in line
    (near,) = mix_records.measured_hop_line(tmp_path, 0.0051)  # a hop barely above the assumed one
    assert "never pays" in near or "the rule and the run disagree" in near
    assert mix_records.measured_hop_line(tmp_path, -1.0) == []
    (tmp_path / "run.json").write_text("{}")
    assert mix_records.measured_hop_line(tmp_path, 0.081) == []


def test_the_docs_quote_the_threshold_the_saved_run_gives_with_its_measured_hop() -> None:
    """docs/routing.md and docs/sizing.md quote what real-run.md's generated table says: one figure."""
    import re

    run = mix_records.mix_run()
    assert run is not None
    (line,) = [x for x in mix_records.mix_check(run) if "With that" in x]
    quoted = re.search(r"threshold at ([\d,]+) tokens", line)
    assert quoted is not None
    for page in ("routing.md", "sizing.md"):
        assert f"{quoted.group(1)} tokens" in (real_run_doc.DOC.parent / page).read_text(), page
