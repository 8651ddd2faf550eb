"""A real Prometheus (Debian's binary) on loopback over recorded series, for the alert-delivery and
cost-audit tests: the series are backfilled with `promtool tsdb create-blocks-from openmetrics` and
end just before the server starts. The binaries must exist (CI installs `prometheus` and
`prometheus-alertmanager`): a missing one fails the test that needs it, it never skips it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import yaml

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
WAIT_S = 120.0  # generous: two loaded cores

# name -> [(labels, value of the i-th minute)]
Series = dict[str, list[tuple[dict[str, str], Callable[[int], float]]]]


def binary(path: str) -> str:
    found = shutil.which(path)
    assert found, f"{path} is missing: install the Debian packages prometheus and prometheus-alertmanager"
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, probe: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            last = probe()
        except OSError:
            last = None
        if last:
            return last
        time.sleep(0.2)  # poll interval, not synchronisation: the condition is re-checked
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def openmetrics(end: float, minutes: int, families: Series) -> str:
    """OpenMetrics text: one sample a minute per series for `minutes` + 1 minutes, the last at `end`."""
    lines = []
    for name, series in families.items():
        kind = "counter" if name.endswith("_total") else "unknown"
        family = name.removesuffix("_total") if kind == "counter" else name
        lines.append(f"# TYPE {family} {kind}")
        for labels, value in series:
            for i in range(minutes + 1):
                lines.append(f"{name}{_labels(labels)} {value(i):g} {end - (minutes - i) * 60:.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def backfill(tmp: Path, series: Series, minutes: int, end: Optional[float] = None) -> Path:
    data = tmp / "tsdb"
    om = tmp / "series.om"
    om.write_text(openmetrics(time.time() - 5 if end is None else end, minutes, series))
    made = subprocess.run(
        [binary(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    return data


@contextmanager
def process(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


@contextmanager
def prometheus(tmp: Path, data: Path, config: dict[str, Any], *flags: str) -> Iterator[str]:
    """Prometheus on a free loopback port over `data` (extra command-line `flags`); yields its URL once ready."""
    port = free_port()
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    args = [
        binary(PROMETHEUS),
        f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=30d",
        *flags,
    ]
    with process(args, tmp / "prometheus.log"):
        url = f"http://127.0.0.1:{port}"
        wait_for("Prometheus ready", lambda: urllib.request.urlopen(f"{url}/-/ready", timeout=5).status == 200)
        yield url
