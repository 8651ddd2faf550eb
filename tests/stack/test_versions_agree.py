"""Every copy of a version agrees with llm_pd_eks/versions.py, the one place that holds them.

A copy is anything that names a version the project cannot import from the versions file: the test
lock (requirements-dev.txt) and pyproject's pin, the bring-your-own image recipe, the stack files'
image and chart versions, the example YAML program, the docs, the vendored charts' SOURCE notes,
the policy pack's generated KubeRay rules, and the real run's record (what ran on the GPU).
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from helpers import DATA, ROOT, STACKS

from llm_pd_eks import versions
from llm_pd_eks.config.autoscaler import NodeAutoscalerConfig
from llm_pd_eks.config.observability import ObservabilityConfig
from llm_pd_eks.config.serving import DevicePluginsConfig, KubeRayConfig
from llm_pd_eks.image_ref import parse_image

PROJECT = "llm-pd-eks"
# The stack-file keys that hold a chart version, and the versions file's value for each.
CHART_KEYS = {
    ("kuberay", "chartVersion"): versions.KUBERAY_CHART_VERSION,
    ("devicePlugins", "nvidiaChartVersion"): versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
    ("devicePlugins", "efaChartVersion"): versions.EFA_DEVICE_PLUGIN_CHART_VERSION,
    ("nodeAutoscaler", "chartVersion"): versions.CLUSTER_AUTOSCALER_CHART_VERSION,
    ("observability", "kubePrometheusStackChartVersion"): versions.KUBE_PROMETHEUS_STACK_CHART_VERSION,
    ("observability", "dcgmExporterChartVersion"): versions.DCGM_EXPORTER_CHART_VERSION,
}


def stack_file(stack: str) -> dict:
    return yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]


def test_the_test_lock_and_pyproject_pin_the_images_ray():
    assert re.findall(r'"ray\[serve\]==([^"]+)"', (ROOT / "pyproject.toml").read_text()) == [versions.DLC_RAY_VERSION]
    lock = (ROOT / "requirements-dev.txt").read_text()
    assert re.findall(r"^ray==(\S+) ", lock, re.MULTILINE) == [versions.DLC_RAY_VERSION]


def test_the_tag_is_an_exact_patch_release_and_the_digest_a_sha256():
    assert re.fullmatch(r"serve-llm-cuda-v\d+\.\d+\.\d+", versions.DLC_TAG), versions.DLC_TAG
    assert versions.DLC_DIGEST is None or versions.DIGEST.fullmatch(versions.DLC_DIGEST)
    ref = parse_image(versions.DLC_IMAGE)
    assert (ref.repository, ref.tag, ref.digest) == (versions.DLC_REGISTRY, versions.DLC_TAG, versions.DLC_DIGEST)


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_serves_the_recorded_image(stack):
    image = stack_file(stack)[f"{PROJECT}:serving"]["image"]
    ref = parse_image(image)
    assert (ref.repository, ref.tag) == (versions.DLC_REGISTRY, versions.DLC_TAG), image
    if ref.digest is not None:
        assert ref.digest == versions.DLC_DIGEST, (
            f"Pulumi.{stack}.yaml pins {ref.digest}; set DLC_DIGEST in llm_pd_eks/versions.py to it "
            "(make resolve-image writes the stack file, the versions file records the same digest)"
        )


@pytest.mark.parametrize("stack", STACKS)
def test_every_stacks_chart_versions_are_the_recorded_ones(stack):
    config = stack_file(stack)
    for (section, key), expected in CHART_KEYS.items():
        value = (config.get(f"{PROJECT}:{section}") or {}).get(key)
        assert value in (None, expected), f"Pulumi.{stack}.yaml {section}.{key}: {value} != {expected}"


def test_the_example_yaml_program_pins_the_recorded_charts():
    props = yaml.safe_load((ROOT / "examples" / "yaml" / "Pulumi.yaml").read_text())["resources"]
    (component,) = [r["properties"] for r in props.values() if "kuberay" in r.get("properties", {})]
    for (section, key), expected in CHART_KEYS.items():
        assert component.get(section, {}).get(key) in (None, expected), (section, key)


def test_the_config_defaults_are_the_versions_files():
    assert KubeRayConfig().chart_version == versions.KUBERAY_CHART_VERSION
    devices = DevicePluginsConfig()
    assert (devices.nvidia_chart_version, devices.efa_chart_version) == (
        versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
        versions.EFA_DEVICE_PLUGIN_CHART_VERSION,
    )
    assert NodeAutoscalerConfig().chart_version == versions.CLUSTER_AUTOSCALER_CHART_VERSION
    observability = ObservabilityConfig()
    assert (observability.kube_prometheus_stack_chart_version, observability.dcgm_exporter_chart_version) == (
        versions.KUBE_PROMETHEUS_STACK_CHART_VERSION,
        versions.DCGM_EXPORTER_CHART_VERSION,
    )


def test_the_kuberay_validator_takes_the_recorded_minor_and_no_other():
    from pydantic import ValidationError

    major, minor_ = (int(p) for p in versions.KUBERAY_MINOR.split("."))
    assert KubeRayConfig.model_validate({"chartVersion": f"{versions.KUBERAY_MINOR}.9"}).chart_version.endswith(".9")
    for other in (f"{major}.{minor_ + 1}.0", f"{major}.{minor_ - 1}.0", f"{versions.KUBERAY_MINOR}.x"):
        with pytest.raises(ValidationError, match=rf"not a {re.escape(versions.KUBERAY_MINOR)}\.x release"):
            KubeRayConfig.model_validate({"chartVersion": other})


def test_the_image_recipe_builds_from_the_recorded_image_and_efa_installer():
    recipe = (ROOT / "images" / "ray-llm-efa" / "Dockerfile").read_text()
    assert re.findall(r"^ARG BASE_IMAGE=(\S+)$", recipe, re.M) == [versions.DLC_IMAGE]
    assert re.findall(r"^ARG EFA_INSTALLER_VERSION=(\S+)$", recipe, re.M) == [versions.DLC_EFA_INSTALLER_VERSION]


def test_the_real_run_record_ran_the_recorded_ray_vllm_and_nixl():
    for record in sorted((ROOT / "llm_pd_eks_sizing" / "realrun" / "data").glob("*/run.json")):
        ran = json.loads(record.read_text())["versions"]
        assert (ran["ray"], ran["vllm"], ran["nixl"], ran["nixl-cu13"]) == (
            versions.DLC_RAY_VERSION,
            versions.DLC_VLLM_VERSION,
            versions.DLC_NIXL_VERSION,
            versions.DLC_NIXL_VERSION,
        ), record


def test_the_vendored_charts_are_the_recorded_releases():
    assert f"tag v{versions.KUBERAY_VERSION} " in (DATA / "kuberay" / "SOURCE").read_text()
    assert f"tag v{versions.KUBERAY_VERSION} " in (DATA / "kuberay-start-params" / "SOURCE").read_text()
    assert (DATA / "cluster-autoscaler" / f"values-{versions.CLUSTER_AUTOSCALER_CHART_VERSION}.yaml").is_file()
    assert (DATA / "kube-prometheus-stack" / f"values-{versions.KUBE_PROMETHEUS_STACK_CHART_VERSION}.yaml").is_file()
    efa = f"aws-efa-k8s-device-plugin-values-{versions.EFA_DEVICE_PLUGIN_CHART_VERSION}.yaml"
    assert (DATA / "eks-charts" / efa).is_file()
    flags = json.loads((ROOT / "policies" / "data" / "kuberay_resource_flags.json").read_text())
    assert f"kuberay v{versions.KUBERAY_VERSION}," in flags["source"]["what"]


# Version mentions in the docs, each with the versions file's value: an image reference to the DLC's
# repository, and the words the docs use for Ray, vLLM, NIXL and the EFA installer.
DOC_PATTERNS = {
    r"deep-learning-containers/ray:(serve-llm-cuda-v[0-9.]*[0-9])": versions.DLC_TAG,
    r"\bRay (\d+\.\d+\.\d+)": versions.DLC_RAY_VERSION,
    r"ray\[serve\]==(\d+\.\d+\.\d+)": versions.DLC_RAY_VERSION,
    r"\bvLLM v?(\d+\.\d+\.\d+)": versions.DLC_VLLM_VERSION,
    r"\bNIXL (\d+\.\d+\.\d+)": versions.DLC_NIXL_VERSION,
    r"\bEFA installer (\d+\.\d+\.\d+)": versions.DLC_EFA_INSTALLER_VERSION,
    r"kuberay-operator` (\d+\.\d+)\.x": versions.KUBERAY_MINOR,
}
DOCS = ("README.md", "docs/serving.md", "docs/serving-image.md", "docs/observability.md")


@pytest.mark.parametrize("doc", DOCS)
def test_the_docs_name_the_recorded_versions(doc):
    path = ROOT / doc
    if not path.is_file():
        pytest.fail(f"{doc} is missing")
    text = " ".join(path.read_text().split())  # a version may follow its name across a line break
    wrong = [
        f"{m.group(0)!r} (expected {expected})"
        for pattern, expected in DOC_PATTERNS.items()
        for m in re.finditer(pattern, text)
        if m.group(1) != expected
    ]
    assert not wrong, f"{doc}: {wrong}"


def test_the_doc_patterns_catch_a_stale_version():
    stale = "the DLC public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v0.9.9 with Ray 1.0.0 and\nvLLM 0.0.1"
    found = {p for p in DOC_PATTERNS for m in re.finditer(p, " ".join(stale.split())) if m.group(1)}
    assert len(found) == 3


def test_the_vendored_vllm_facts_are_the_images_vllms():
    facts = DATA / "vllm"
    assert sorted(p.name for p in facts.glob("*.json")) == [
        f"engine-args-{versions.DLC_VLLM_VERSION}.json",
        f"metrics-{versions.DLC_VLLM_VERSION}.json",
    ]
    source = (facts / "SOURCE").read_text()
    assert f"from the wheel vllm-{versions.DLC_VLLM_VERSION}-" in source
    assert f"(vllm/_version.py {versions.DLC_VLLM_VERSION}, commit " in source
    assert re.search(r"wheel sha256 [0-9a-f]{64}\)", source)


def test_the_example_yaml_program_serves_the_recorded_image():
    props = yaml.safe_load((ROOT / "examples" / "yaml" / "Pulumi.yaml").read_text())["resources"]
    (component,) = [r["properties"] for r in props.values() if "serving" in r.get("properties", {})]
    ref = parse_image(component["serving"]["image"])
    assert (ref.repository, ref.tag) == (versions.DLC_REGISTRY, versions.DLC_TAG), component["serving"]["image"]
