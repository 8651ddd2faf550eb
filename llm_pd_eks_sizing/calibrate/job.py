"""The Kubernetes Job `make calibrate` runs on the system nodes: `vllm bench serve` against the stack's
serve Service, one run per sweep point, each result printed between markers for the tool to read
from the pod's log (the Job keeps no volume the tool would have to reach)."""

from __future__ import annotations

import json
import time
from typing import Any, Optional

from llm_pd_eks.serving_names import NAMESPACE, SERVE_PORT
from llm_pd_eks.system_nodes import SYSTEM_LABELS
from llm_pd_eks_sizing.calibrate.bench import Progress, SweepPoint, vllm_bench_args
from llm_pd_eks_tools.core.cli import Exit, ToolError

RESULT_BEGIN, RESULT_END = "=== calibrate result begin", "=== calibrate result end"
RESULT_DIR = "/tmp/calibrate"
JOB_NAME = "llm-pd-eks-calibrate"
POLL_SECONDS = 5.0


def bench_script(model_id: str, base_url: str, plan: list[SweepPoint]) -> str:
    """The container's shell script: each sweep point, then its result JSON between markers."""
    import shlex

    lines = ["set -eu", f"mkdir -p {RESULT_DIR}"]
    for point in plan:
        lines.append(shlex.join(vllm_bench_args(model_id, base_url, point, RESULT_DIR)))
        lines.append(f"echo {shlex.quote(RESULT_BEGIN + ' ' + point.name)}")
        lines.append(f"cat {RESULT_DIR}/{point.name}.json")
        lines.append(f"echo; echo {shlex.quote(RESULT_END)}")
    return "\n".join(lines)


def calibration_job(
    stack: str, image: str, model_id: str, service: str, plan: list[SweepPoint], deadline_s: int
) -> dict[str, Any]:
    """batch/v1 Job: one pod on a system node (role=system), no retries, bounded by activeDeadlineSeconds."""
    base_url = f"http://{service}.{NAMESPACE}.svc:{SERVE_PORT}"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{JOB_NAME}-{stack}",
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/name": JOB_NAME, "llm-pd-eks/stack": stack},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": JOB_NAME}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": dict(SYSTEM_LABELS),
                    "containers": [
                        {
                            "name": "vllm-bench",
                            "image": image,
                            "command": ["/bin/sh", "-c", bench_script(model_id, base_url, plan)],
                            "resources": {"requests": {"cpu": "2", "memory": "4Gi"}},
                        }
                    ],
                },
            },
        },
    }


def parse_results(log: str, plan: list[SweepPoint]) -> dict[str, Any]:
    """Sweep point name -> its result JSON, from the pod's log."""
    found: dict[str, Any] = {}
    current: Optional[str] = None
    buffer: list[str] = []
    for line in log.splitlines():
        if line.startswith(RESULT_BEGIN):
            current, buffer = line[len(RESULT_BEGIN) :].strip(), []
        elif line.startswith(RESULT_END) and current is not None:
            try:
                found[current] = json.loads("\n".join(buffer))
            except json.JSONDecodeError:
                raise ToolError(Exit.FAILED, f"{current}: the benchmark's result is not JSON") from None
            current = None
        elif current is not None:
            buffer.append(line)
    missing = [p.name for p in plan if p.name not in found]
    if missing:
        raise ToolError(Exit.FAILED, f"the Job's log lacks results for {', '.join(missing)}; nothing written")
    return found


def run_in_cluster(
    client: Any, job: dict[str, Any], plan: list[SweepPoint], deadline: float, progress: Progress
) -> dict[str, Any]:
    """Create the Job, wait for it (bounded), read its pod's log.

    `client`: a llm_pd_eks_tools/ops/verify/kube.py KubeClient.
    """
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    client.post_json(f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    progress(f"created Job {ns}/{name} on the system nodes; {len(plan)} benchmark runs")
    while True:
        status = client.get_json(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}").get("status", {})
        if status.get("succeeded"):
            break
        if status.get("failed"):
            raise ToolError(Exit.FAILED, f"Job {ns}/{name} failed; see its pod's log; nothing written")
        if time.monotonic() > deadline:
            raise ToolError(Exit.FAILED, f"Job {ns}/{name} still running at the deadline; nothing written")
        progress(f"Job {name}: active {status.get('active', 0)}")
        time.sleep(POLL_SECONDS)
    pods = client.get_json(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"job-name={name}").get("items", [])
    if not pods:
        raise ToolError(Exit.FAILED, f"Job {ns}/{name} succeeded but its pod is gone; nothing written")
    log = client.get_text(f"/api/v1/namespaces/{ns}/pods/{pods[0]['metadata']['name']}/log")
    return parse_results(log, plan)
