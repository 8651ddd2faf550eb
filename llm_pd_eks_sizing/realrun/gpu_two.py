"""Run on a machine with two GPUs: prefill on one GPU, decode on the other, against aggregated.

    python3 gpu_two.py BUNDLE OUT pd       # raylets-two-pd.json, the P/D app, LOADS, NIXL per load
    python3 gpu_two.py BUNDLE OUT agg      # raylets-two-agg.json, two aggregated replicas, LOADS
    python3 gpu_two.py BUNDLE OUT tp2      # decode TP 2 over both GPUs, prefill TP 1, LOADS
    python3 gpu_two.py BUNDLE OUT record   # run-two.json: GPUs, versions, the wheels' sha256, commands
    python3 gpu_two.py BUNDLE OUT stop

BUNDLE is what `python -m llm_pd_eks_sizing.realrun.two_gpu` wrote. Standard library only, beside
gpu_main (whose raylets, deploy, scrape and versions it uses) and gpu_load (`vllm bench serve`).

A phase may take longer than one command of the machine (engine starts of 3-6 minutes, then the
loads): what it has done is kept in STATE, and the same command run again goes on where it stopped
(the raylets and the running application kept, only the loads not yet run), until it says `done`.
Every load of the P/D arms is bracketed by scrapes of every raylet, so the decode side's NIXL pulls,
bytes and transfer times are attributed to that load, one prompt length a load.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

if __package__:
    from . import gpu_load, gpu_main
else:  # `python3 gpu_two.py` on the GPU machine: the modules beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_load  # type: ignore[import-not-found,no-redef]
    import gpu_main  # type: ignore[import-not-found,no-redef]

ARMS = ("pd", "agg", "tp2")
# (clients, prompts, prompt tokens), in order: idle loads of one prompt length each (the hop and the
# KV handoff by size, P/D's TTFT against aggregated's), then loaded ones, long and short.
LOADS = (
    (1, 4, 128),
    (1, 4, 4096),
    (1, 4, 8192),
    (1, 4, 16384),
    (8, 32, 4096),
    (16, 48, 4096),
    (8, 24, 16384),
    (16, 64, 128),
)
STATE = Path("/tmp/realrun-two")  # survives between commands on one machine; OUT does not
NIXL_COUNT = "ray_vllm_nixl_bytes_transferred_count"
NIXL_BYTES = "ray_vllm_nixl_bytes_transferred_sum"
NIXL_SECONDS = "ray_vllm_nixl_xfer_time_seconds_sum"
NIXL_TIME_BUCKETS = "ray_vllm_nixl_xfer_time_seconds_bucket"
FABRIC = "NIXL UCX backend between two GPUs of one host (no EFA: not LIBFABRIC)"
WHEELS = Path("/tmp/w/wheels")


def state_file(arm: str) -> Path:
    return STATE / f"evidence-two-{arm}.json"


def load_state(arm: str) -> dict[str, Any] | None:
    try:
        return json.loads(state_file(arm).read_text())
    except (OSError, ValueError):
        return None


def save(evidence: dict[str, Any], out: Path) -> None:
    """The phase's evidence so far, in STATE (for the next command) and in OUT (what comes back)."""
    STATE.mkdir(parents=True, exist_ok=True)
    text = json.dumps(evidence, indent=1, default=str) + "\n"
    state_file(evidence["arm"]).write_text(text)
    (out / f"evidence-two-{evidence['arm']}.json").write_text(text)


def app_state() -> str | None:
    status, text = gpu_main.http("GET", f"{gpu_main.DASHBOARD}/api/serve/applications/", timeout=30)
    if status != 200:
        return None
    return json.loads(text).get("applications", {}).get("llm", {}).get("status")


def grown(old: str, new: str, name: str, label: str = "ReplicaId") -> dict[str, float]:
    """`label`'s value -> how much sample `name` rose from scrape text `old` to `new`."""
    was = gpu_load.counters(old, name, label)
    return {k: v - was.get(k, 0.0) for k, v in gpu_load.counters(new, name, label).items()}


def nixl(before: dict[str, str], after: dict[str, str]) -> dict[str, Any]:
    """node -> NIXL's pulls, bytes and transfer seconds between two scrapes, per pull, and the
    transfer-time histogram's bucket counts (le -> pulls at or under it)."""
    out: dict[str, Any] = {}
    for node, text in after.items():
        old = before.get(node, "")
        pulls = sum(grown(old, text, NIXL_COUNT).values())
        moved = sum(grown(old, text, NIXL_BYTES).values())
        seconds = sum(grown(old, text, NIXL_SECONDS).values())
        out[node] = {
            "pulls": pulls,
            "bytes": moved,
            "xfer_s": seconds,
            "bytes_per_pull": moved / pulls if pulls else None,
            "xfer_ms_per_pull": 1e3 * seconds / pulls if pulls else None,
            "xfer_buckets": grown(old, text, NIXL_TIME_BUCKETS, "le"),
        }
    return out


def mib(text: str) -> float:
    """nvidia-smi's number, or 0 where it prints [N/A] (a process whose memory it cannot read)."""
    try:
        return float(text)
    except ValueError:
        return 0.0


def observed_placement() -> dict[str, Any]:
    """observed_gpus, or what went wrong reading it: the loads run either way."""
    try:
        return observed_gpus()
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def observed_gpus() -> dict[str, Any]:
    """What ran where: each GPU's memory in use and its processes' raylet (REALRUN_RAYLET in the
    environment every worker inherits from its raylet), and Ray's nodes with their resources."""
    out: dict[str, Any] = {}
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid,name,memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    gpus: dict[str, dict[str, Any]] = {}
    for line in smi.stdout.strip().splitlines():
        index, uuid, name, used = (p.strip() for p in line.split(","))
        gpus[uuid] = {"index": int(index), "name": name, "memory_used_mib": mib(used), "raylets": {}}
    apps = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    for line in apps.stdout.strip().splitlines():
        pid, uuid, used = (p.strip() for p in line.split(","))
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            raylet = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"REALRUN_RAYLET=")), "unknown")
        except OSError:
            raylet = "unreadable"
        if uuid in gpus:
            held = gpus[uuid]["raylets"]
            held[raylet] = held.get(raylet, 0.0) + mib(used)
    out["gpus"] = sorted(gpus.values(), key=lambda g: g["index"])
    status, text = gpu_main.http("GET", f"{gpu_main.DASHBOARD}/api/v0/nodes?detail=true&limit=100", timeout=30)
    try:
        rows = json.loads(text)["data"]["result"]["result"]
        out["ray_nodes"] = [{k: n.get(k) for k in ("node_id", "state", "resources_total", "labels")} for n in rows]
    except (ValueError, KeyError, TypeError):
        out["ray_nodes"] = {"status": status, "text": text[:500]}
    return out


def model_id(config: dict[str, Any]) -> str:
    args = config["applications"][0]["args"]
    llm = args["llm_configs"][0] if "llm_configs" in args else args["decode_config"]
    return llm["model_loading_config"]["model_id"]


def run_load(arm: str, model: str, load: tuple[int, int, int], out: Path) -> dict[str, Any]:
    """One load through `vllm bench serve` (gpu_load.bench); for a P/D arm, scraped before and an
    export interval after, so its NIXL figures are its own."""
    pd = arm != "agg"
    before = gpu_main.scrape() if pd else {}
    started = time.monotonic()
    (row,) = gpu_load.bench(model, f"two-{arm}", out, loads=(load,))
    row["seconds"] = round(time.monotonic() - started, 1)
    if pd:
        time.sleep(gpu_main.EXPORT_WAIT_S)
        row["nixl"] = nixl(before, gpu_main.scrape())
    return row


def key(row: dict[str, Any]) -> tuple[int, int, int]:
    return row["clients"], row["prompts"], row["input_len"]


def phase(bundle: Path, arm: str, out: Path) -> dict[str, Any]:
    """An arm: its raylets and application (kept, with the loads done, where the same command ran
    before on this machine), then every load not yet run that fits the phase's time, saved after each."""
    clock = gpu_main.Clock()
    raylets = f"raylets-two-{arm}.json"
    config = json.loads((bundle / f"serve-two-{arm}.json").read_text())
    kept = load_state(arm)
    mark = gpu_main.RAYLETS_MARK
    running = gpu_main.cluster_up() and mark.is_file() and mark.read_text() == raylets
    resume = kept is not None and running and app_state() in ("RUNNING", "DEPLOYING")
    evidence = kept if resume and kept is not None else gpu_main.begin(f"two-{arm}", clock)
    evidence.update(arm=arm, gpu_count=2, fabric=FABRIC, resumed=resume)
    evidence.setdefault("timings_by_command", []).append(clock.timings)
    evidence.setdefault("commands", []).append(os.environ.get("REALRUN_COMMAND", f"gpu-run-two.sh {arm}"))
    gpu_main.ensure_raylets(bundle, evidence, raylets, keep_app=resume)
    clock.lap("raylets")
    timeout_s = max(gpu_main.POLL_S, min(gpu_main.START_TIMEOUT_S, clock.deadline - time.monotonic()))
    with gpu_main.held_ports(gpu_main.TCPSTORE_WINDOW) as held:
        evidence["tcpstore_ports_held"] = len(held)
        evidence["serve_status"] = gpu_main.deploy(config, timeout_s, put=not resume)
    evidence["app_status"] = evidence["serve_status"].get("applications", {}).get("llm", {}).get("status")
    clock.lap("deploy")
    save(evidence, out)
    if evidence["app_status"] != "RUNNING":
        return evidence
    evidence["ray_status_running"] = gpu_main.ray_status()
    evidence["placement"] = observed_placement()
    rows = {key(r): r for r in evidence.get("loads", []) if "skipped" not in r}
    last_s = 0.0
    for load in LOADS:
        if load in rows:
            continue
        wait = gpu_main.EXPORT_WAIT_S if arm != "agg" else 0.0
        if not gpu_load.next_load_fits(clock.deadline, last_s, wait, floor_s=gpu_load.BENCH_FLOOR_S):
            break  # the loads left wait for the same command run again
        rows[load] = run_load(arm, model_id(config), load, out)
        last_s = rows[load]["seconds"]
        evidence["loads"] = [rows[x] for x in LOADS if x in rows]
        save(evidence, out)
    clock.lap("loads")
    evidence["done"] = all(x in rows for x in LOADS)
    return evidence


def wheels() -> list[dict[str, str]]:
    """The wheels installed on the machine (the chunks' contents), each with its sha256."""
    out = []
    for path in sorted(WHEELS.glob("*.whl")):
        out.append({"name": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    return out


def record(bundle: Path) -> dict[str, Any]:
    """run-two.json: when, on what (GPUs, driver, Python, the wheels), from which commit and commands."""
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    meta = json.loads((bundle / "meta.json").read_text())
    gpus = [line.strip() for line in listed.splitlines() if line.startswith("GPU ")]
    commands = []
    for arm in ARMS:
        kept = load_state(arm)
        if kept:
            commands += kept.get("commands", [])
    versions = gpu_main.gpu_installed.versions()
    # NVLink or PCIe between the two GPUs: which path UCX's cuda_ipc transport had
    topology = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
    return {
        "gpu_count": len(gpus),
        "gpus": gpus,
        "topology": topology.strip(),
        "gpu_model": versions["gpu"].split("\n")[0].split(",")[0].strip(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "versions": versions,
        "wheels": wheels(),
        "commit": meta.get("commit"),
        "model_id": meta.get("model_id"),
        "instance_type": json.loads((bundle / "meta-two.json").read_text())["overrides"]["stack_config"][0]["value"],
        "fabric": FABRIC,
        "synthetic": False,
        "commands": commands,
        "arms": sorted(a for a in ARMS if load_state(a)),
    }


def main(argv: Optional[list[str]] = None) -> int:
    """Exit 0: the phase is done; 3: not yet (the engines still starting, or loads left: run the same
    command again); 1: the application failed (its logs in OUT/failure-two-<arm>.txt); 2: usage."""
    parser = argparse.ArgumentParser(prog="gpu_two", description="One phase of the two-GPU run, on the GPU machine.")
    parser.add_argument("bundle", type=Path, help="the rendered two-GPU bundle")
    parser.add_argument("out", type=Path, help="where the phase's evidence goes")
    parser.add_argument("phase", choices=[*ARMS, "record", "stop"])
    args = parser.parse_args(argv)
    bundle, out, name = args.bundle, args.out, args.phase
    out.mkdir(parents=True, exist_ok=True)
    if name == "stop":
        gpu_main.ray_stop()
        return 0
    if name == "record":
        (out / "run-two.json").write_text(json.dumps(record(bundle), indent=1) + "\n")
        return 0
    if name not in ARMS:
        print(f"gpu_two.py: phase {name!r} is not one of {', '.join((*ARMS, 'record', 'stop'))}", file=sys.stderr)
        return 2
    evidence = phase(bundle, name, out)
    save(evidence, out)
    state = evidence.get("app_status")
    gpu_main.log("two-GPU", name, state, "done" if evidence.get("done") else "not done: run the same command again")
    if state == "RUNNING" and evidence.get("done"):
        return 0
    if state in ("RUNNING", "DEPLOYING"):
        return 3
    gpu_main.failure_logs(out, f"two-{name}")
    return 1


if __name__ == "__main__":
    # The tools' runner from the checkout the machine runs (standard library only), as gpu_main does.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    importlib.import_module("llm_pd_eks_tools.core.cli").exit_with("realrun-gpu-two", main)
