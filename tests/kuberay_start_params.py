"""Test oracle: the `ray start` command KubeRay's operator writes for a head or worker group.

A faithful transcription (same order of checks, same map handling) of KubeRay's Go code at tag
v1.7.0 (https://github.com/ray-project/kuberay, commit 59d663aeec13760646da3db9c1cf8cfe883e30b7):

- ray-operator/controllers/ray/utils/resources.go, lines 8-17: `IsGPUResourceKey`
- ray-operator/controllers/ray/common/pod.go:
  - lines 40-49: the accelerator resource names and `customAcceleratorToRayResourceMap`
    (aws.amazon.com/neuroncore -> neuron_cores, google.com/tpu -> TPU)
  - lines 1345-1388: `setMissingRayStartParams` (worker: address; head: dashboard-host; both:
    metrics-export-port, block, dashboard-agent-listen-port)
  - lines 1390-1430: `generateRayStartCommand` (num-cpus from the container's CPU limit, else its
    request; memory from its memory limit; then `addWellKnownAcceleratorResources`)
  - lines 1432-1479: `addWellKnownAcceleratorResources`, 1481-1507: `isCustomAcceleratorPresentInResources`,
    `getResourcesMap`, 1509-1516: `getSortedResourceKeys`, 1518-1546: `convertParamMap`
  - lines 1649-1685: `updateRayStartParamsResources` (the group's top-level `resources`: a key whose
    lower-cased name is `cpu`/`memory` or passes IsGPUResourceKey becomes num-cpus/memory/num-gpus
    and is dropped from `--resources`)
  - call order for a worker pod: `DefaultWorkerPodTemplate` lines 663-683 (updateRayStartParamsResources,
    updateRayStartParamsLabels, setMissingRayStartParams), then `BuildPod` line 890 (generateRayStartCommand
    with the Ray container's resources).
Kubernetes quantities follow k8s.io/apimachinery pkg/api/resource (ParseQuantity; `Value()` rounds
up to an integer; `AsApproximateFloat64`), for the suffixes a manifest here uses.

Checked against KubeRay's own table tests (tests/data/kuberay-start-params, test_kuberay_start_params.py).
Not product code: the program's own rule is llm_pd_eks/ray_resources.py, judged by this.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from decimal import Decimal
from typing import Any, Mapping, Optional

# pod.go lines 40-49
NEURON_CORE_CONTAINER_RESOURCE = "aws.amazon.com/neuroncore"
TPU_CONTAINER_RESOURCE = "google.com/tpu"
CUSTOM_ACCELERATOR_TO_RAY_RESOURCE = {NEURON_CORE_CONTAINER_RESOURCE: "neuron_cores", TPU_CONTAINER_RESOURCE: "TPU"}
DEFAULT_METRICS_PORT = 8080  # utils.DefaultMetricsPort (utils/constant.go line 108)
DEFAULT_DASHBOARD_AGENT_LISTEN_PORT = 52365  # utils.DefaultDashboardAgentListenPort (constant.go line 109)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")


def parse_quantity(text: str) -> Decimal:
    """resource.ParseQuantity: a number with a binary or decimal SI suffix or an exponent."""
    match = _QUANTITY.match(text.strip())
    if not match:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    number, exponent, suffix = match.groups()
    value = Decimal(number)
    if exponent:
        return value * (Decimal(10) ** int(exponent[1:]))
    suffix = suffix or ""
    return value * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


def quantity_value(text: str) -> int:
    """Quantity.Value(): the value rounded up to an integer (quantity.go, ScaledValue(0))."""
    return math.ceil(parse_quantity(text))


def go_float(value: float) -> str:
    """How encoding/json writes a float64 (strconv 'f' format, shortest; 'e' outside [1e-6, 1e21))."""
    if value != 0 and (abs(value) < 1e-6 or abs(value) >= 1e21):
        mantissa, _, exp = f"{value:e}".partition("e")
        return f"{float(mantissa):g}e{int(exp):+03d}".replace("e+0", "e+").replace("e-0", "e-")
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def go_json_map(values: Mapping[str, float]) -> str:
    """json.Marshal of a map[string]float64: keys sorted, no spaces."""
    return "{" + ",".join(f"{json.dumps(k)}:{go_float(v)}" for k, v in sorted(values.items())) + "}"


def is_gpu_resource_key(key: str) -> bool:
    """utils.IsGPUResourceKey (resources.go lines 8-17). Case-sensitive; callers lower-case first."""
    if key.endswith("gpu"):
        return True
    return re.search(r"nvidia\.com/mig-\d+g\.\d+gb$", key) is not None


def update_ray_start_params_resources(params: dict[str, str], group_resources: Optional[Mapping[str, str]]) -> None:
    """updateRayStartParamsResources (pod.go lines 1649-1685), in place like the Go map."""
    if not group_resources:
        return
    ray_resources: dict[str, float] = {}
    for name, quantity in group_resources.items():
        try:
            q = parse_quantity(quantity)
        except ValueError:
            continue  # the operator logs and skips a quantity it cannot parse
        normalized = name.lower()
        if normalized == "cpu":
            params["num-cpus"] = str(math.ceil(q))
        elif normalized == "memory":
            params["memory"] = str(math.ceil(q))
        elif is_gpu_resource_key(normalized):
            params["num-gpus"] = str(math.ceil(q))
        else:
            ray_resources[name] = float(q)
    if ray_resources:
        params["resources"] = f"'{go_json_map(ray_resources)}'"


def _resources_map(params: Mapping[str, str]) -> dict[str, float]:
    """getResourcesMap (pod.go lines 1494-1507): the JSON inside `resources`, quotes trimmed."""
    if "resources" not in params:
        return {}
    text = params["resources"].strip("'\"` ")
    return {k: float(v) for k, v in json.loads(text).items()}


def add_well_known_accelerator_resources(params: dict[str, str], limits: Mapping[str, str]) -> None:
    """addWellKnownAcceleratorResources (pod.go lines 1432-1479)."""
    if not limits:
        return
    try:
        resources = _resources_map(params)
    except ValueError:
        return  # the operator logs "failed to get resources map" and leaves the params as they are
    added = any(name in resources for name in CUSTOM_ACCELERATOR_TO_RAY_RESOURCE.values())
    for key in sorted(limits):
        value = parse_quantity(limits[key])
        if "num-gpus" not in params and is_gpu_resource_key(key) and value != 0:
            params["num-gpus"] = str(math.ceil(value))
        if not added and key in CUSTOM_ACCELERATOR_TO_RAY_RESOURCE and value != 0:
            ray_name = CUSTOM_ACCELERATOR_TO_RAY_RESOURCE[key]
            if ray_name not in resources:
                resources[ray_name] = float(value)
                params["resources"] = f"'{go_json_map(resources)}'"
            added = True


def convert_param_map(params: Mapping[str, str]) -> str:
    """convertParamMap (pod.go lines 1518-1546): sorted ` --key=value ` flags; true/false are switches."""
    special = ("log-color", "include-dashboard", "include-log-monitor")
    out = ""
    for option in sorted(params):
        argument = params[option]
        if argument.lower() in ("true", "false") and option not in special:
            if argument.lower() == "true":
                out += f" --{option} "
        else:
            out += f" --{option}={argument} "
    return out


def generate_ray_start_command(
    node_type: str, params: dict[str, str], resources: Mapping[str, Mapping[str, str]]
) -> str:
    """generateRayStartCommand (pod.go lines 1390-1430); `resources` is the container's requests/limits."""
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if "num-cpus" not in params:
        if limits.get("cpu") and parse_quantity(limits["cpu"]) != 0:
            params["num-cpus"] = str(quantity_value(limits["cpu"]))
        elif requests.get("cpu") and parse_quantity(requests["cpu"]) != 0:
            params["num-cpus"] = str(quantity_value(requests["cpu"]))
    if "memory" not in params and limits.get("memory") and parse_quantity(limits["memory"]) != 0:
        params["memory"] = str(quantity_value(limits["memory"]))
    add_well_known_accelerator_resources(params, limits)
    if node_type == "head":
        return f"ray start --head {convert_param_map(params)}"
    if node_type == "worker":
        return f"ray start {convert_param_map(params)}"
    return ""


def set_missing_ray_start_params(params: dict[str, str], node_type: str, head_address: str) -> dict[str, str]:
    """setMissingRayStartParams (pod.go lines 1345-1388)."""
    if node_type == "worker":
        params.setdefault("address", head_address)
    if node_type == "head":
        params.setdefault("dashboard-host", "0.0.0.0")
    params.setdefault("metrics-export-port", str(DEFAULT_METRICS_PORT))
    params["block"] = "true"
    params.setdefault("dashboard-agent-listen-port", str(DEFAULT_DASHBOARD_AGENT_LISTEN_PORT))
    return params


HEAD_ADDRESS = "llm-pd-head-svc.llm-serving.svc.cluster.local:6379"  # any: only `--address` carries it


def worker_ray_start(group: Mapping[str, Any], head_address: str = HEAD_ADDRESS) -> str:
    """The `ray start` line of a worker pod of `group` (a workerGroupSpecs entry), in the operator's order."""
    params = {str(k): str(v) for k, v in (group.get("rayStartParams") or {}).items()}
    update_ray_start_params_resources(params, {str(k): str(v) for k, v in (group.get("resources") or {}).items()})
    set_missing_ray_start_params(params, "worker", head_address)
    container = group["template"]["spec"]["containers"][0]  # utils.RayContainerIndex
    resources = {
        part: {str(k): str(v) for k, v in (container.get("resources") or {}).get(part, {}).items()}
        for part in ("requests", "limits")
    }
    return generate_ray_start_command("worker", params, resources)


def raylet_resources(command: str) -> dict[str, float]:
    """What a raylet started by `command` registers: CPU, GPU, memory and the `--resources` JSON."""
    out: dict[str, float] = {}
    for token in shlex.split(command):
        if not token.startswith("--") or "=" not in token:
            continue
        flag, value = token[2:].split("=", 1)
        if flag == "num-cpus":
            out["CPU"] = float(value)
        elif flag == "num-gpus":
            out["GPU"] = float(value)
        elif flag == "memory":
            out["memory"] = float(value)
        elif flag == "resources":
            out.update({k: float(v) for k, v in json.loads(value).items()})
    return out
