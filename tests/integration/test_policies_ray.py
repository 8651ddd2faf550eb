"""Rules 6-7 (RayService: NIXL over LIBFABRIC, EFA devices in GPU pods) through the analyzer protocol."""

from __future__ import annotations

import pytest
import yaml
from policy_fixtures import UNKNOWN, Res, gpu_container, judge, kv_transfer, of, ray_service, serve_config


def test_compliant_ray_service_passes_every_rule():
    assert judge([ray_service()]) == []


# -- 6. NIXL over LIBFABRIC --------------------------------------------------------------------
@pytest.mark.parametrize(
    "backends, violation",
    [
        (["LIBFABRIC"], False),
        (["UCX", "LIBFABRIC"], True),  # NIXL creates both and may pick UCX for a transfer
        (["LIBFABRIC", "UCX"], True),
        (["libfabric"], True),  # NIXL plugin names are case-sensitive
        ("LIBFABRIC", True),  # a string: NIXL's Python API iterates it letter by letter
        (["UCX"], True),
        ([], True),
        (None, True),  # no kv_connector_extra_config: NIXL defaults to UCX
    ],
)
def test_nixl_connector_must_name_libfabric(backends, violation):
    svc = ray_service(serve_config(kv_transfer(backends)))
    found = of(judge([svc]), "nixl-libfabric-backend")
    # Both the prefill and the decode config carry the connector: one verdict each.
    assert len(found) == (2 if violation else 0)
    if violation:
        assert {v.urn for v in found} == {svc.urn}
        assert "prefill_config" in found[0].message + found[1].message
        assert "decode_config" in found[0].message + found[1].message
        assert "backends: ['LIBFABRIC']" in found[0].message


def test_only_the_decode_side_wrong_is_named():
    svc = ray_service(serve_config(kv_transfer(["LIBFABRIC"]), kv_transfer(["UCX"])))
    found = of(judge([svc]), "nixl-libfabric-backend")
    assert len(found) == 1 and "decode_config" in found[0].message and "prefill_config" not in found[0].message


def test_nixl_inside_a_multi_connector_is_checked():
    multi = {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"connectors": [kv_transfer(["UCX"]), {"kv_connector": "LMCacheConnectorV1"}]},
    }
    found = of(judge([ray_service(serve_config(multi))]), "nixl-libfabric-backend")
    # Per side: the UCX NixlConnector and the LMCache connector, each named by its place.
    assert len(found) == 4
    assert sum("connectors[0]" in v.message and "backends" in v.message for v in found) == 2
    assert sum("connectors[1]" in v.message and "'LMCacheConnectorV1'" in v.message for v in found) == 2
    allowed = {"nixl-libfabric-backend": {"allowedConnectors": ["LMCacheConnectorV1"]}}
    assert len(of(judge([ray_service(serve_config(multi))], allowed), "nixl-libfabric-backend")) == 2


def test_kv_transfer_config_given_as_json_text_is_checked():
    import json

    cfg = serve_config(kv_transfer(["UCX"]))
    for side in ("prefill_config", "decode_config"):
        kv = cfg["applications"][0]["args"][side]["engine_kwargs"]
        kv["kv_transfer_config"] = json.dumps(kv["kv_transfer_config"])
    assert len(of(judge([ray_service(cfg)]), "nixl-libfabric-backend")) == 2


@pytest.mark.parametrize("connector", ["LMCacheConnectorV1", "P2pNcclConnector", "MooncakeConnector"])
def test_another_kv_connector_is_judged(connector):
    other = {"kv_connector": connector, "kv_role": "kv_both"}
    found = of(judge([ray_service(serve_config(other))]), "nixl-libfabric-backend")
    assert len(found) == 2 and all(f"KV connector {connector!r}" in v.message for v in found)
    allowed = {"nixl-libfabric-backend": {"allowedConnectors": [connector]}}
    assert of(judge([ray_service(serve_config(other))], allowed), "nixl-libfabric-backend") == []


def test_unknown_serve_config_is_refused_and_unknown_backends_skip():
    (found,) = of(judge([ray_service(UNKNOWN)]), "nixl-libfabric-backend")  # first preview: Output text
    assert "not known at preview" in found.message
    unknown_backends = kv_transfer(None)
    unknown_backends["kv_connector_extra_config"] = {"backends": UNKNOWN}
    cfg = yaml.safe_dump(serve_config(unknown_backends)).replace(f"'{UNKNOWN}'", UNKNOWN)
    assert of(judge([ray_service(cfg)]), "nixl-libfabric-backend") == []


def test_unparsable_serve_config_is_refused():
    found = of(judge([ray_service("applications: [unclosed")]), "nixl-libfabric-backend")
    assert len(found) == 1 and "not valid YAML" in found[0].message


def test_required_backend_comes_from_config():
    svc = ray_service(serve_config(kv_transfer(["UCX"])))
    assert of(judge([svc], {"nixl-libfabric-backend": {"requiredBackend": "UCX"}}), "nixl-libfabric-backend") == []


# -- 7. EFA devices in GPU pods ----------------------------------------------------------------
@pytest.mark.parametrize(
    "container, missing",
    [
        (gpu_container(efa=None), ["vpc.amazonaws.com/efa"]),
        (gpu_container(efa=0), ["vpc.amazonaws.com/efa"]),
        (gpu_container(fi_provider=None), ["FI_PROVIDER=efa"]),
        (gpu_container(fi_provider="tcp"), ["FI_PROVIDER=efa (is 'tcp'"]),
        (gpu_container(efa=None, fi_provider=None), ["vpc.amazonaws.com/efa", "FI_PROVIDER=efa"]),
    ],
)
def test_gpu_worker_without_efa_is_refused(container, missing):
    svc = ray_service(worker=container)
    found = of(judge([svc]), "ray-gpu-pods-efa")
    assert [v.urn for v in found] == [svc.urn]
    assert "worker group 'gpu'" in found[0].message and "ray-worker" in found[0].message
    for item in missing:
        assert item in found[0].message


def test_cpu_worker_needs_no_efa():
    cpu = gpu_container(gpus=0, efa=None, fi_provider=None)
    assert of(judge([ray_service(worker=cpu)]), "ray-gpu-pods-efa") == []


def test_unknown_quantities_skip_and_an_unknown_provider_source_is_refused():
    unknown_gpus = gpu_container(efa=None)
    unknown_gpus["resources"] = UNKNOWN
    unknown_efa = gpu_container()
    unknown_efa["resources"]["limits"]["vpc.amazonaws.com/efa"] = UNKNOWN
    unknown_efa["resources"]["requests"]["vpc.amazonaws.com/efa"] = UNKNOWN
    from_configmap = gpu_container(
        fi_provider=None,
        env=({"name": "FI_PROVIDER", "valueFrom": {"configMapKeyRef": {"name": "efa", "key": "provider"}}},),
    )
    # The ConfigMap is in the stack but its data is not known yet (first preview).
    pending = Res(
        "kubernetes:core/v1:ConfigMap", "efa", {"metadata": {"name": "efa", "namespace": "llm"}, "data": UNKNOWN}
    )
    for container in (unknown_gpus, unknown_efa):
        assert of(judge([ray_service(worker=container)]), "ray-gpu-pods-efa") == []
    # FI_PROVIDER from a ConfigMap whose data is built in the same apply: no rule can read it
    (found,) = of(judge([ray_service(worker=from_configmap), pending]), "ray-gpu-pods-efa")
    assert "not known at preview" in found.message


def test_ray_cluster_worker_groups_are_checked_too():
    cluster = Res(
        "kubernetes:ray.io/v1:RayCluster",
        "raw",
        {
            "spec": {
                "workerGroupSpecs": [
                    {"groupName": "gpu", "template": {"spec": {"containers": [gpu_container(efa=None)]}}}
                ]
            }
        },
    )
    assert len(of(judge([cluster]), "ray-gpu-pods-efa")) == 1
