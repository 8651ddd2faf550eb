"""Custom Ray resource names a worker group may advertise in its top-level `resources`.

KubeRay's operator turns that map into `ray start` flags (kuberay v1.7.0,
ray-operator/controllers/ray/common/pod.go `updateRayStartParamsResources`): a key whose
lower-cased name is `cpu` or `memory`, or ends in `gpu` / is an NVIDIA MIG profile
(utils/resources.go `IsGPUResourceKey`), becomes `--num-cpus` / `--memory` / `--num-gpus` and is
dropped from `--resources`. A custom resource so named never reaches the raylet, while the Ray
autoscaler (which reads the group spec) believes new nodes have it: placement groups that ask for
it stay infeasible and the autoscaler grows the group to its maximum. The config, the RayService
and the policy pack refuse such names with this one rule (tests/kuberay_start_params.py, a
transcription of the operator's code, is the judge). The pack, which must not import the program,
reads `OPERATOR_FLAGS` from `policies/data/kuberay_resource_flags.json`, written from this module by
`make facts` (llm_pd_eks_tools/maint/gen_ray_resources.py); tests/integration/test_policies_facts.py keeps it equal.
"""

from __future__ import annotations

import re
from typing import Optional

# The names Ray itself reserves for its predefined resources (ray_constants / the raylet): a custom
# resource of that name collides with what the raylet reports.
RAY_PREDEFINED = ("CPU", "GPU", "memory", "object_store_memory")
# What KubeRay's operator makes of a resource name, as data: rule -> (pattern searched in the
# lower-cased name, the `ray start` flag it becomes), in the operator's order.
OPERATOR_FLAGS: dict[str, tuple[str, str]] = {
    "cpu": (r"\Acpu\Z", "--num-cpus"),
    "memory": (r"\Amemory\Z", "--memory"),
    "gpu-suffix": (r"gpu\Z", "--num-gpus"),  # IsGPUResourceKey: a name ending in gpu
    "mig-profile": (r"nvidia\.com/mig-\d+g\.\d+gb$", "--num-gpus"),  # IsGPUResourceKey: a MIG profile
}


def operator_reinterpretation(name: str) -> Optional[str]:
    """The `ray start` flag KubeRay turns resource `name` into instead of `--resources`, if any."""
    normalized = name.lower()
    return next((flag for pattern, flag in OPERATOR_FLAGS.values() if re.search(pattern, normalized)), None)


def custom_resource_problem(name: str) -> Optional[str]:
    """Why `name` cannot be a custom Ray resource of a KubeRay worker group, or None."""
    flag = operator_reinterpretation(name)
    if flag is not None:
        return (
            f"custom Ray resource {name!r} would become KubeRay's `ray start {flag}` (a name that is cpu/memory, "
            "ends in 'gpu' or is a MIG profile, any case) and never reach the raylet; choose another name"
        )
    if name in RAY_PREDEFINED:
        return f"custom Ray resource {name!r} is one of Ray's predefined resources; choose another name"
    return None


def role_resource(role: str) -> str:
    """The custom Ray resource only `role`'s worker pods advertise (one unit per GPU) and only that
    role's placement bundles ask for. Not `<role>_gpu`: KubeRay would turn that into `--num-gpus`."""
    return f"{role}_slot"


# The Ray resource Ray Serve LLM asks for in each bundle (ray._common.utils.RESOURCE_CONSTRAINT_PREFIX).
ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"


def accelerator_resource_name(ray_accelerator_type: str) -> str:
    """`accelerator_type:<T>`: what a raylet on this GPU reports and Ray Serve LLM's bundles ask for."""
    return f"{ACCELERATOR_RESOURCE_PREFIX}{ray_accelerator_type}"
