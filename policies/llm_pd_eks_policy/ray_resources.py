"""Rule for Ray worker groups: a custom Ray resource must reach the raylet through KubeRay.

KubeRay's operator turns a group's top-level `resources` into `ray start` flags (kuberay v1.7.0,
ray-operator/controllers/ray/common/pod.go `updateRayStartParamsResources`): a key whose lower-cased
name is `cpu` or `memory`, or ends in `gpu` or is an NVIDIA MIG profile (utils/resources.go
`IsGPUResourceKey`), becomes `--num-cpus` / `--memory` / `--num-gpus` and is dropped from
`--resources`. A custom resource named so (`prefill_gpu`) never reaches the raylet; the Ray autoscaler,
which reads the group spec, believes new nodes have it: bundles asking for it stay infeasible while
the group grows to its maximum. The canonical names (`CPU`, `GPU`, `memory`, `nvidia.com/gpu`, a
MIG profile) are what the operator means them for and pass.

The pack runs without the program's modules: it reads the operator's rules from its own
`policies/data/kuberay_resource_flags.json`, written by `make facts` from the program's
llm_pd_eks/ray_resources.py (`OPERATOR_FLAGS`); tests/integration/test_policies_facts.py keeps the two equal and
tests/integration/test_policies_ray_resources.py checks this predicate against the transcription of the operator's code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import dig, is_unknown, known_list, plain, resource_policy
from .ray_serving import ray_objects
from .workloads import RAY_CLUSTER_SPEC

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "kuberay_resource_flags.json"
# rule -> {"pattern": searched in the lower-cased name, "flag": the `ray start` flag}, in the operator's order
_RULES: dict[str, dict[str, str]] = json.loads(DATA_FILE.read_text())["rules"]
_MIG = re.compile(_RULES["mig-profile"]["pattern"])
_CANONICAL = ("cpu", "memory", "gpu")


def reinterpreted_flag(name: str) -> Optional[str]:
    """The `ray start` flag KubeRay turns group resource `name` into instead of `--resources`, if any."""
    normalized = name.lower()
    return next((r["flag"] for r in _RULES.values() if re.search(r["pattern"], normalized)), None)


def swallowed_custom_resource(name: str) -> Optional[str]:
    """The flag a name that looks custom (not CPU/GPU/memory or a vendor `<domain>/gpu`) is swallowed into."""
    flag = reinterpreted_flag(name)
    normalized = name.lower()
    if flag is None or normalized in _CANONICAL or normalized.endswith("/gpu") or _MIG.search(normalized):
        return None
    return flag


def _group_resources(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not args.resource_type.startswith("kubernetes:"):
        return
    for ray in ray_objects(args.resource_type, plain(args.props)):
        cluster = dig(ray.obj, *RAY_CLUSTER_SPEC[ray.kind])
        groups: list[tuple[str, Any]] = [("head group", dig(cluster, "headGroupSpec"))]
        for i, worker in enumerate(known_list(dig(cluster, "workerGroupSpecs")) or []):
            name = dig(worker, "groupName")
            groups.append((f"worker group '{name if isinstance(name, str) else i}'", worker))
        for label, group in groups:
            resources = dig(group, "resources")
            if not isinstance(resources, dict) or is_unknown(resources):
                continue
            for key in sorted(k for k in resources if isinstance(k, str)):
                flag = swallowed_custom_resource(key)
                if flag:
                    report(
                        f"{ray.label} {label}: resource {key!r} becomes KubeRay's `ray start {flag}` (a name "
                        f"ending in 'gpu', any case) and never reaches the raylet as a custom resource, while "
                        f"the autoscaler believes it does. Fix: rename it (e.g. '{key[:-3]}slot')."
                    )


ray_custom_resources = resource_policy(
    name="ray-custom-resources-reach-raylet",
    description="No Ray group advertises a custom resource that KubeRay's operator turns into "
    "--num-gpus/--num-cpus/--memory.",
    validate=_group_resources,
)

POLICIES = [ray_custom_resources]
