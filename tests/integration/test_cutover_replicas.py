"""The next Ray cluster starts at the serving cluster's replica counts (as many as fit), not at the minimum.

The live counts are the Kubernetes API's JSON for a serving RayService (KubeRay v1.7.0: the active
RayCluster's worker groups, `replicas` as Ray's autoscaler set them); the stack file written is a copy's,
read back through the program under mocks.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import RAY_SERVICE, copy_checkout, run_with

from llm_pd_eks.config import ConfigError
from llm_pd_eks_tools.core.cli import Exit, ToolError
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan import cutover_replicas as tool


class LiveCluster:
    def __init__(self, prefill: int, decode: int, serving: bool = True):
        status = {"activeServiceStatus": {"rayClusterName": "llm-raycluster-a"}} if serving else {}
        self.objects: dict[str, Any] = {
            "/apis/ray.io/v1/rayservices": {
                "items": [{"metadata": {"name": "llm", "namespace": "llm"}, "status": status}]
            },
            "/apis/ray.io/v1/namespaces/llm/rayclusters/llm-raycluster-a": {
                "spec": {
                    "workerGroupSpecs": [
                        {"groupName": "prefill", "replicas": prefill},
                        {"groupName": "decode", "replicas": decode},
                    ]
                }
            },
        }

    def get_object(self, path: str, **query: str) -> dict[str, Any]:
        return self.objects[path]

    def get_items(self, path: str, **query: str) -> list[dict[str, Any]]:
        return self.objects[path]["items"]


@pytest.fixture
def checkout(tmp_path):
    return copy_checkout(tmp_path / "checkout")


def set_max_size(root, size: int) -> None:
    path = root / "Pulumi.prod.yaml"
    head, gpu = path.read_text().split("  llm-pd-eks:gpuNodes:\n", 1)
    path.write_text(head + "  llm-pd-eks:gpuNodes:\n" + gpu.replace("    maxSize: 6\n", f"    maxSize: {size}\n", 1))


def test_at_full_load_with_room_the_next_cluster_starts_full(checkout, capsys):
    set_max_size(checkout, 8)  # 4 serving at most + 4 for the next cluster
    assert tool.main(["--stack", "prod", "--write"], kube=LiveCluster(2, 2), root=checkout) == Exit.OK
    assert "prefill 2 (live pods 2), decode 2 (live pods 2)" in capsys.readouterr().out
    serving = stack_config("prod", checkout).serving
    assert (serving.prefill.cutover_replicas, serving.decode.cutover_replicas) == (2, 2)
    assert "# serving: Llama 3.3 70B" in (checkout / "Pulumi.prod.yaml").read_text()  # comments kept


def test_the_count_is_lowered_to_what_fits_next_to_the_serving_cluster():
    config = stack_config("prod")  # maxSize 6: the serving cluster may hold 4, so 2 nodes are left
    assert tool.start_replicas(config, {"prefill": 2, "decode": 2}) == {"prefill": 1, "decode": 1}
    assert tool.start_replicas(config, {"prefill": 0, "decode": 0}) == {"prefill": 1, "decode": 1}


def test_the_program_starts_the_new_cluster_at_the_written_counts():
    run = run_with(
        "prod",
        gpuNodes={"maxSize": 7},
        serving={"prefill": {"tensorParallelSize": 8, "minReplicas": 1, "maxReplicas": 2, "cutoverReplicas": 2}},
    )
    spec = run.one(RAY_SERVICE, "rayservice").inputs["spec"]
    groups = {g["groupName"]: g for g in spec["rayClusterConfig"]["workerGroupSpecs"]}
    assert (groups["prefill"]["replicas"], groups["decode"]["replicas"]) == (2, 1)
    assert groups["prefill"]["minReplicas"] == 1  # the bounds are unchanged
    apps = spec["serveConfigV2"]
    config = json.loads(apps) if apps.lstrip().startswith("{") else __import__("yaml").safe_load(apps)
    args = config["applications"][0]["args"]
    prefill = args["prefill_config"]["deployment_config"]["autoscaling_config"]
    decode = args["decode_config"]["deployment_config"]["autoscaling_config"]
    assert prefill["initial_replicas"] == 2 and "initial_replicas" not in decode


def test_a_count_that_does_not_fit_is_refused_by_the_config():
    with pytest.raises(Exception) as info:
        run_with(
            "prod",
            serving={"prefill": {"tensorParallelSize": 8, "minReplicas": 1, "maxReplicas": 2, "cutoverReplicas": 2}},
        )
    assert "lower cutoverReplicas" in str(info.value)


def test_no_serving_cluster_writes_nothing(checkout, capsys):
    before = (checkout / "Pulumi.prod.yaml").read_text()
    assert tool.main(["--stack", "prod", "--write"], kube=LiveCluster(2, 2, serving=False), root=checkout) == Exit.OK
    assert "no Ray cluster serves yet" in capsys.readouterr().out
    assert (checkout / "Pulumi.prod.yaml").read_text() == before


def test_an_unknown_stack_is_a_usage_error(checkout):
    with pytest.raises(ToolError) as info:
        tool.main(["--stack", "nosuch"], kube=LiveCluster(1, 1), root=checkout)
    assert info.value.exit_code == Exit.USAGE


def test_outside_the_bounds_is_refused():
    with pytest.raises(ConfigError):
        from helpers import validate_values

        validate_values(
            {
                "network": {"availabilityZones": ["us-west-2a", "us-west-2b"]},
                "gpuNodes": {"instanceType": "p5.48xlarge", "availabilityZone": "us-west-2a", "maxSize": 8},
                "serving": {"prefill": {"minReplicas": 1, "maxReplicas": 2, "cutoverReplicas": 3}},
            }
        )
