"""Run on the GPU machine: the rendered P/D app on the release's Ray, vLLM and NIXL, measured.

    python3 gpu_main.py BUNDLE OUT pd     # raylets, P/D app, probes, NIXL counters, verify's checks, bench
    python3 gpu_main.py BUNDLE OUT agg    # the aggregated app on the same raylets, bench
    python3 gpu_main.py BUNDLE OUT mix-pd     # short and long prompts through plain P/D
    python3 gpu_main.py BUNDLE OUT mix-cond   # the same through P/D with decode-only for the short ones
    python3 gpu_main.py BUNDLE OUT mix-prefix-pd  # shared prefixes, 2 + 2 replicas, Serve's default router
    python3 gpu_main.py BUNDLE OUT mix-prefix     # the same with prefix-cache-aware routing on both roles
    python3 gpu_main.py BUNDLE OUT gate-agg | gate | gate-broken   # the traffic gate's arms (gpu_gate)
    python3 gpu_main.py BUNDLE OUT stop

Standard library only (plus the wheels' `ray`, `vllm` and `tokenizers`), so it runs under the
machine's Python with nothing of this project installed. BUNDLE is what `render` wrote; everything the
run shows goes to OUT as JSON and text (evidence-<phase>.json, metrics-<phase>.prom, ...).
The raylets are started in their own process session so the next phase finds them still running:
a phase reuses them when they came from the raylets file it needs (Serve shut down first), else
stops them and starts its own (the prefix-routing arms: raylets-prefix.json, two replica slots a
role). Every phase keeps to REALRUN_PHASE_BUDGET_S and records how long each of its steps took.
Beside this file: gpu_load (the probes, `vllm bench serve`, the prefix loads and what is read back
from them), gpu_mix (the decode-only arms' loads) and gpu_model (the model's tokenizer).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

if __package__:
    from . import gpu_gate, gpu_installed, gpu_load, gpu_mix, gpu_model
else:  # `python3 gpu_main.py` on the GPU machine, or loaded from its file: the modules beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_gate  # type: ignore[import-not-found,no-redef]
    import gpu_installed  # type: ignore[import-not-found,no-redef]
    import gpu_load  # type: ignore[import-not-found,no-redef]
    import gpu_mix  # type: ignore[import-not-found,no-redef]
    import gpu_model  # type: ignore[import-not-found,no-redef]

MODEL_DIR, SERVE, http, log = gpu_load.MODEL_DIR, gpu_load.SERVE, gpu_load.http, gpu_load.log
bench, chat, stream = gpu_load.bench, gpu_load.chat, gpu_load.stream
long_prompt, nixl_samples = gpu_load.long_prompt, gpu_load.nixl_samples
build_tokenizer, run_tokenizer = gpu_model.build_tokenizer, gpu_model.run_tokenizer

HEAD_PORT = 6379
DASHBOARD = "http://127.0.0.1:8265"
METRICS_PORTS = {"head": 8080, "prefill": 8081, "decode": 8082}
TEMP_DIR = "/tmp/ray"
# Each raylet's own ports (node manager, object manager, dashboard agent, runtime-env agent) and its
# workers' range: raylet n (head 0, prefill 1, decode 2) takes RAYLET_PORT_BASE + n * RAYLET_PORT_SPAN
# onwards. Clear of NIXL's side channels, which Ray Serve LLM opens at 20000 + replica rank (prefill)
# and 22000 + rank (decode) (NixlConnectorBackend, PDServingArgs), and below Linux's default
# ephemeral range (net.ipv4.ip_local_port_range starts at 32768).
RAYLET_PORT_BASE, RAYLET_PORT_SPAN = 30000, 900
# What NIXL prints when a backend comes up (the pattern `make verify` reads the worker logs with).
NIXL_BACKEND_LINE = re.compile(r"NIXL\s+\w+\s+\S+\s+Backend (\w+) was instantiated")
THRESHOLD_KEY = "llm_pd_eks_decode_only_below_tokens"  # the decode LLMConfig's experimental_configs key
START_TIMEOUT_S, POLL_S = 420, 5
ROLES = ("prefill", "decode")
# What one phase may spend from its start (one command ends within the machine's ten minutes; a
# shorter REALRUN_PHASE_BUDGET_S leaves GPU time for the other arms): a load that would run past it
# is recorded as skipped, not started. And the Ray metrics export interval (10 s) plus a margin,
# waited before each scrape.
PHASE_BUDGET_S = float(os.environ.get("REALRUN_PHASE_BUDGET_S", "540"))
EXPORT_WAIT_S = 12
# vLLM 0.26's RayExecutorV2 picks an engine's torch.distributed TCPStore port by binding and closing
# the first free one from 100 (`_select_tcpstore_port`: a non-DP engine's local DP rank and master port
# resolve to 0 from the VLLM_DP_* defaults, window 32); the store listens on it only once the worker
# actor is up, seconds later. Engines starting together on one host as root all take port 100, and all
# but one fail with EADDRINUSE (the run of 2026-12-06: six replica starts lost). Held for the deploy,
# the window is full, so each engine falls back to a kernel-chosen port, as it does in a pod that may
# not bind below 1024.
TCPSTORE_WINDOW = range(100, 132)
# REALRUN_RESUME=1: the phase goes on with the application the same phase's call before left on these
# raylets (still starting, or running with its loads not yet sent): not shut down, not deployed again,
# waited for. A deploy ends at the phase's deadline, so a start longer than one command spans two.
RESUME = os.environ.get("REALRUN_RESUME") == "1"
PREFIX_PHASES = {"mix-prefix-pd": "prefix-pd", "mix-prefix": "prefix"}  # phase -> the bundle's serve-<arm>.json
# Which raylets file the running cluster was started from (a prefix arm reuses the other's raylets).
RAYLETS_MARK = Path(TEMP_DIR, "realrun-raylets")


# --- the cluster: the head and one raylet per role, as KubeRay would start them ---------------------


def ray_cmd() -> list[str]:
    return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"]


def raylet_ports(n: int) -> dict[str, int]:
    """Raylet n's fixed ports, `ray start` flag -> port (RAYLET_PORT_BASE says why there)."""
    base = RAYLET_PORT_BASE + n * RAYLET_PORT_SPAN
    return {
        "node-manager-port": base + 1,
        "object-manager-port": base + 2,
        "dashboard-agent-listen-port": base + 3,
        "dashboard-agent-grpc-port": base + 4,
        "runtime-env-agent-port": base + 5,
        "min-worker-port": base + 100,
        "max-worker-port": base + RAYLET_PORT_SPAN - 1,
    }


def start_raylets(bundle: Path, name: str = "raylets.json") -> dict[str, list[str]]:
    raylets = json.loads((bundle / name).read_text())
    # the decode-only arm's runtime module on the Python path, as the ConfigMap puts it in the pods
    runtime = str((bundle / "runtime").resolve())
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), runtime) if p)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=path)
    head = raylets["head"]
    cmd = [
        *ray_cmd(),
        "start",
        "--head",
        f"--port={HEAD_PORT}",
        f"--temp-dir={TEMP_DIR}",
        "--disable-usage-stats",
        f"--num-cpus={head['num-cpus']}",
        f"--num-gpus={head['num-gpus']}",
        "--dashboard-host=127.0.0.1",
        f"--metrics-export-port={METRICS_PORTS['head']}",
        "--object-store-memory=2000000000",
        # the head's workers (Serve's controller and proxy) too; its daemons keep Ray's default ports
        *(f"--{flag}={port}" for flag, port in raylet_ports(0).items() if flag.endswith("worker-port")),
    ]
    started = {"head": cmd[3:]}
    run_detached(cmd, env)
    for n, role in enumerate(ROLES, start=1):
        spec = raylets[role]["start"]
        cmd = [
            *ray_cmd(),
            "start",
            f"--address=127.0.0.1:{HEAD_PORT}",
            "--disable-usage-stats",
            f"--num-gpus={spec['num-gpus']}",
            f"--num-cpus={spec['num-cpus']}",
            f"--resources={json.dumps(spec['resources'])}",
            f"--object-store-memory={spec['object-store-memory']}",
            f"--metrics-export-port={METRICS_PORTS[role]}",
            *(f"--{flag}={port}" for flag, port in raylet_ports(n).items()),
        ]
        # The pod's PYTHONPATH names where the runtime ConfigMap is mounted; here that is <bundle>/runtime,
        # already on `path` beside the machine's own packages, which the pod's value would hide.
        pod_env = {k: v for k, v in raylets[role]["env"].items() if k != "PYTHONPATH"}
        role_env = dict(env, **pod_env, VLLM_HOST_IP="127.0.0.1")
        started[role] = cmd[3:]
        run_detached(cmd, role_env)
    RAYLETS_MARK.parent.mkdir(parents=True, exist_ok=True)
    RAYLETS_MARK.write_text(name)
    return started


def ray_stop() -> None:
    """`ray stop --force`, its one line per process it kills kept out of the command's output (whose
    last 12,000 characters are all that comes back from the machine)."""
    proc = subprocess.run([*ray_cmd(), "stop", "--force"], capture_output=True, text=True, timeout=120)
    log("ray stop ->", proc.returncode, (proc.stdout.strip().splitlines() or [""])[-1][-200:])


def cluster_up() -> bool:
    return http("GET", f"{DASHBOARD}/api/version", timeout=10)[0] == 200


def ensure_raylets(bundle: Path, evidence: dict, name: str = "raylets.json", keep_app: bool = False) -> None:
    """The raylets of `name` with no Serve application on them: the running ones when they were started
    from the same file (the app of the arm before is deleted, or with `keep_app` left as it is), else
    fresh ones (any others stopped). A fresh start also builds the model's tokenizer and records the
    `ray start` commands."""
    if cluster_up():
        if RAYLETS_MARK.is_file() and RAYLETS_MARK.read_text() == name:
            evidence["raylets"] = f"reused ({name})" + (", its application kept" if keep_app else "")
            if not keep_app:
                clear_apps()
            return
        ray_stop()
    build_tokenizer(bundle)
    evidence["ray_start"] = start_raylets(bundle, name)
    evidence["raylets"] = f"started ({name})"


def clear_apps(timeout_s: float = 180) -> None:
    """Serve shut down (the dashboard's DELETE /api/serve/applications/ is `serve.shutdown()`) and
    waited for, so the next arm's replicas start together on freed GPU memory rather than one by one
    in a rolling update of the arm before."""
    log("DELETE serve applications ->", http("DELETE", f"{DASHBOARD}/api/serve/applications/", timeout=120)[0])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, text = http("GET", f"{DASHBOARD}/api/serve/applications/", timeout=30)
        if status == 200 and not json.loads(text).get("applications"):
            return
        time.sleep(POLL_S)
    raise SystemExit(f"the arm before's Serve applications were still there after {timeout_s:.0f} s")


class Clock:
    """A phase's deadline (PHASE_BUDGET_S from its start) and the seconds each of its steps took,
    which the evidence keeps so the next run can plan its GPU time."""

    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.deadline = self.started + PHASE_BUDGET_S
        self.timings: dict[str, float] = {}

    def lap(self, step: str) -> None:
        now = time.monotonic()
        self.timings[f"{step}_s"] = round(now - self.last, 1)
        self.timings["phase_s"] = round(now - self.started, 1)
        self.last = now
        log(f"{step}: {self.timings[f'{step}_s']} s ({self.timings['phase_s']} s into the phase)")


def run_detached(cmd: list[str], env: dict[str, str]) -> None:
    """`ray start` in a new session: its daemons outlive this command (the next phase uses them)."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, start_new_session=True)
    log("ray start ->", proc.returncode, proc.stdout[-400:].strip().replace("\n", " | "))
    if proc.returncode != 0:
        log("ray start stderr:", proc.stderr[-3000:].strip().replace("\n", " | "))
        raise SystemExit(f"ray start failed: {proc.stderr[-2000:]}")


def ray_status() -> str:
    proc = subprocess.run(
        [*ray_cmd(), "status", f"--address=127.0.0.1:{HEAD_PORT}"], capture_output=True, text=True, timeout=60
    )
    return proc.stdout


# --- Serve: deploy as KubeRay does (PUT the serve config to the dashboard), wait for RUNNING ----------


def deploy(config: dict, timeout_s: float = START_TIMEOUT_S, put: bool = True) -> dict:
    """PUT `config` (unless `put` is off: the application already deploying is waited for) and poll
    until it runs, fails or `timeout_s` passes; the last status read."""
    for _ in range(12 if put else 0):  # the dashboard may still be coming up
        status, text = http("PUT", f"{DASHBOARD}/api/serve/applications/", config, timeout=60)
        log("PUT serve config ->", status, text[:300])
        if status == 200:
            break
        time.sleep(5)
    deadline = time.monotonic() + timeout_s
    last: dict = {}
    while time.monotonic() < deadline:
        status, text = http("GET", f"{DASHBOARD}/api/serve/applications/", timeout=30)
        if status == 200:
            last = json.loads(text)
            app = last.get("applications", {}).get("llm", {})
            state = app.get("status")
            log("app llm:", state, {d: v.get("status") for d, v in app.get("deployments", {}).items()})
            if state == "RUNNING":
                return last
            if state in ("DEPLOY_FAILED", "UNHEALTHY"):
                break
        time.sleep(POLL_S)
    return last


# --- probes -------------------------------------------------------------------------------------------


def scrape() -> dict[str, str]:
    return {
        node: http("GET", f"http://127.0.0.1:{port}/metrics", timeout=30)[1] for node, port in METRICS_PORTS.items()
    }


def nixl_log_lines() -> list[str]:
    lines = []
    for path in sorted(Path(TEMP_DIR, "session_latest", "logs").glob("worker-*.out")):
        for line in path.read_text(errors="replace").splitlines():
            if NIXL_BACKEND_LINE.search(line) or ("NixlConnector" in line and "backend" in line.lower()):
                lines.append(f"{path.name}: {line[:400]}")
    return lines[:200]


def begin(phase: str, clock: Clock) -> dict:
    """A phase's evidence: its name, date, the software it runs on, and its clock's timings."""
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    installed = gpu_installed.installed()  # the wheels and Python that ran, hashed (not an image tag)
    return {
        "phase": phase,
        "date_utc": date,
        "versions": gpu_installed.versions(),
        "installed": installed,
        "timings": clock.timings,
    }


@contextmanager
def held_ports(ports: range) -> Iterator[list[int]]:
    """Listen on each of `ports` that is free (bound as vLLM binds, every interface), for the block;
    the ports held."""
    held: list[socket.socket] = []
    try:
        for port in ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("", port))
                sock.listen(1)
                held.append(sock)
            except OSError:
                sock.close()
        yield [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def deployed(evidence: dict, config: dict, clock: Clock) -> bool:
    """Deploy `config` (or, resuming, wait for the one deployed before), within START_TIMEOUT_S and the
    phase's deadline; record its status and how long it took to start; True when RUNNING."""
    evidence["resumed"] = RESUME
    timeout_s = max(POLL_S, min(START_TIMEOUT_S, clock.deadline - time.monotonic()))
    with held_ports(TCPSTORE_WINDOW) as held:
        evidence["tcpstore_ports_held"] = len(held)
        evidence["serve_status"] = deploy(config, timeout_s, put=not RESUME)
    evidence["app_status"] = evidence["serve_status"].get("applications", {}).get("llm", {}).get("status")
    clock.lap("deploy")
    return evidence["app_status"] == "RUNNING"


def phase_pd(bundle: Path, out: Path) -> dict:
    clock = Clock()
    evidence = begin("pd", clock)
    ensure_raylets(bundle, evidence)
    clock.lap("raylets")
    time.sleep(5)
    evidence["ray_status_before"] = ray_status()
    config = json.loads((bundle / "serve-pd.json").read_text())
    model = config["applications"][0]["args"]["decode_config"]["model_loading_config"]["model_id"]
    if not deployed(evidence, config, clock):
        return evidence
    evidence["ray_status_running"] = ray_status()
    status, text = http("GET", f"{SERVE}/v1/models")
    evidence["models"] = {
        "status": status,
        "ids": [m.get("id") for m in json.loads(text).get("data", [])] if status == 200 else text[:300],
    }
    before = scrape()
    evidence["chat_verify"] = chat(model, long_prompt())  # verify's chat-completion request
    evidence["chat_short"] = chat(model, "Say hello.", max_tokens=8)
    evidence["stream"] = stream(model)
    time.sleep(EXPORT_WAIT_S)  # a metrics export interval (Ray: 10 s) after the requests
    after = scrape()
    evidence["nixl_before"] = {n: nixl_samples(t) for n, t in before.items()}
    evidence["nixl_after"] = {n: nixl_samples(t) for n, t in after.items()}
    (out / "metrics-pd.prom").write_text("".join(f"# node {n}\n{t}\n" for n, t in after.items()))
    evidence["nixl_log_lines"] = nixl_log_lines()
    clock.lap("probes")
    evidence["bench"] = bench(model, "pd", out, deadline=clock.deadline)
    clock.lap("loads")
    time.sleep(EXPORT_WAIT_S)
    final = scrape()
    evidence["nixl_after_bench"] = {n: nixl_samples(t) for n, t in final.items()}
    (out / "metrics-pd-after-bench.prom").write_text("".join(f"# node {n}\n{t}\n" for n, t in final.items()))
    return evidence


def phase_agg(bundle: Path, out: Path) -> dict:
    clock = Clock()
    evidence = begin("agg", clock)
    ensure_raylets(bundle, evidence)
    clock.lap("raylets")
    config = json.loads((bundle / "serve-agg.json").read_text())
    model = config["applications"][0]["args"]["llm_configs"][0]["model_loading_config"]["model_id"]
    if deployed(evidence, config, clock):
        evidence["chat_short"] = chat(model, "Say hello.", max_tokens=8)
        evidence["bench"] = bench(model, "agg", out, deadline=clock.deadline)
        clock.lap("loads")
    return evidence


def phase_mix(bundle: Path, out: Path, arm: str) -> dict:
    """Short and long prompts (gpu_mix's loads) through one P/D arm: `pd` as rendered, or `cond`
    (decode-only below overrides.yaml's threshold), with what `make size` says of decode-only beside."""
    clock = Clock()
    evidence = begin(f"mix-{arm}", clock)
    ensure_raylets(bundle, evidence, keep_app=RESUME)
    clock.lap("raylets")
    config = json.loads((bundle / f"serve-{arm}.json").read_text())
    decode = config["applications"][0]["args"]["decode_config"]
    model = decode["model_loading_config"]["model_id"]
    evidence["decode_only_below_tokens"] = decode.get("experimental_configs", {}).get(THRESHOLD_KEY)
    evidence["sized_decode_only"] = json.loads((bundle / "meta.json").read_text()).get("sized_decode_only")
    if not deployed(evidence, config, clock):
        return evidence
    tokenizer = run_tokenizer()
    probes_before = probe_timeouts()
    evidence["loads"] = gpu_mix.mix_loads(
        model, scrape, lambda text: len(tokenizer.encode(text).ids), deadline=clock.deadline, wait_s=EXPORT_WAIT_S
    )
    clock.lap("loads")
    evidence["probe_timeouts"] = grown(probes_before, probe_timeouts())
    return evidence


def phase_prefix(bundle: Path, out: Path, phase: str) -> dict:
    """Shared prefixes through two replicas a role, on the prefix raylets (the other prefix arm's when
    they run): `mix-prefix-pd` with Serve's default router, `mix-prefix` with PrefixCacheAffinityRouter
    on both roles; the loads are gpu_load's."""
    clock = Clock()
    evidence = begin(phase, clock)
    ensure_raylets(bundle, evidence, "raylets-prefix.json", keep_app=RESUME)
    clock.lap("raylets")
    config = json.loads((bundle / f"serve-{PREFIX_PHASES[phase]}.json").read_text())
    args = config["applications"][0]["args"]
    model = args["decode_config"]["model_loading_config"]["model_id"]
    evidence["routers"] = {r: args[f"{r}_config"]["deployment_config"].get("request_router_config") for r in ROLES}
    if not deployed(evidence, config, clock):
        return evidence
    tokenizer = run_tokenizer()
    evidence["warmup"] = [gpu_load.streamed_completion(model, f"Warm up {i}.", 8) for i in range(4)]
    time.sleep(EXPORT_WAIT_S)
    probes_before = probe_timeouts()
    evidence["loads"] = gpu_load.prefix_loads(
        model,
        scrape,
        lambda text: len(tokenizer.encode(text).ids),
        deadline=clock.deadline,
        wait_s=EXPORT_WAIT_S,
    )
    clock.lap("loads")
    evidence["probe_timeouts"] = grown(probes_before, probe_timeouts())
    (out / f"metrics-{phase}.prom").write_text("".join(f"# node {n}\n{t}\n" for n, t in scrape().items()))
    return evidence


PROBE_TIMEOUT = "Failed to get queue length from"  # Ray Serve's router, when a replica's probe misses its deadline


def probe_timeouts() -> dict[str, int]:
    """Serve log file -> how many times its routers' queue-length probes missed their deadline. A
    router that misses them keeps re-probing instead of routing (seen with PrefixCacheAffinityRouter
    on a 2-core machine, docs/routing.md); a count here says whether it happened on this one."""
    counts = {}
    for path in sorted(Path(TEMP_DIR, "session_latest", "logs", "serve").glob("*.log")):
        found = sum(PROBE_TIMEOUT in line for line in path.read_text(errors="replace").splitlines())
        if found:
            counts[path.name] = found
    return counts


def grown(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The counts that rose between two readings (an arm before may share the Ray session's logs)."""
    return {name: n - before.get(name, 0) for name, n in after.items() if n > before.get(name, 0)}


def failure_logs(out: Path, phase: str) -> None:
    """The lines that say why, from the Serve controller, replicas and workers' stderr."""
    logs = Path(TEMP_DIR, "session_latest", "logs")
    keep = re.compile(r"Error|error|Traceback|exception|Exception|FAILED|failed|CUDA|NIXL|nixl|OOM|Killed")
    lines = []
    for pattern in ("serve/controller_*.log", "serve/replica_*.log", "worker-*.err", "raylet*.out", "gcs_server.out"):
        for path in sorted(logs.glob(pattern)):
            hits = [line[:500] for line in path.read_text(errors="replace").splitlines() if keep.search(line)]
            if hits:
                lines.append(f"== {path.name}")
                lines.extend(hits[-60:])
    (out / f"failure-{phase}.txt").write_text("\n".join(lines[-3000:]) + "\n")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_main", description="One phase of the real run, on the GPU machine.")
    parser.add_argument("bundle", type=Path, help="the rendered bundle (python -m llm_pd_eks_sizing.realrun.render)")
    parser.add_argument("out", type=Path, help="where the phase's evidence and logs go")
    parser.add_argument("phase", help="pd | agg | mix-pd | mix-cond | mix-prefix-pd | mix-prefix | gate* | stop")
    args = parser.parse_args(argv)
    bundle, out, phase = args.bundle, args.out, args.phase
    out.mkdir(parents=True, exist_ok=True)
    if phase == "stop":
        ray_stop()
        return 0
    if phase in PREFIX_PHASES:
        evidence = phase_prefix(bundle, out, phase)
    elif phase in ("gate", "gate-agg", "gate-broken"):  # the traffic gate's arms (gpu_gate.py)
        evidence = gpu_gate.phase_gate(sys.modules[__name__], bundle, out, phase)
    elif phase in ("mix-pd", "mix-cond"):
        evidence = phase_mix(bundle, out, phase.split("-")[1])
    else:
        evidence = {"pd": phase_pd, "agg": phase_agg}[phase](bundle, out)
    (out / f"evidence-{phase}.json").write_text(json.dumps(evidence, indent=1, default=str) + "\n")
    log("evidence written:", phase, evidence.get("app_status"))
    if evidence.get("app_status") != "RUNNING":
        failure_logs(out, phase)
    return 0 if evidence.get("app_status") == "RUNNING" else 1


if __name__ == "__main__":
    # The tools' runner from the checkout the machine runs (llm_pd_eks_tools/core imports the standard
    # library only): exit codes, streams, signals and child processes as for every tool.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    importlib.import_module("llm_pd_eks_tools.core.cli").exit_with("realrun-gpu", main)
