"""The component package: `LlmPdEks` served by the provider (provider/__main__.py) and used by the
program and by a Pulumi YAML program (examples/yaml/Pulumi.yaml).

The schema is requested from the real plugin process over the provider protocol (GetSchema on its
gRPC port, as the Pulumi CLI does for `pulumi package add`), so it is the analyzer of the installed
pulumi SDK that judges the annotations, not a copy of its rules.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import grpc
import pytest
import yaml
from helpers import ROOT

from llm_pd_eks.config import PROJECT, ConfigError, StackConfig
from llm_pd_eks.deployment import INSTANCE_NAME, TYPE, LlmPdEksArgs, config_from_args
from llm_pd_eks_tools.preview.mockrun import ProgramRun, stack_config
from llm_pd_eks_tools.yaml_program import check

PROVIDER = ROOT / "provider"
EXAMPLE = ROOT / "examples" / "yaml"
# The plugin imports pulumi_aws, pulumi_eks and pulumi_kubernetes before it listens: generous on 2 loaded cores.
START_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def schema() -> Iterator[dict[str, Any]]:
    """GetSchema from the plugin, started as the language host starts it: `python <folder> <engine>`."""
    from llm_pd_eks.pulumi_sdk import provider_pb2, provider_pb2_grpc

    # The engine address is only dialled by Construct; GetSchema never reaches it.
    proc = subprocess.Popen(
        [sys.executable, str(PROVIDER), "127.0.0.1:9"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    port: list[str] = []
    reader = threading.Thread(target=lambda: port.append(proc.stdout.readline().strip()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(START_TIMEOUT_S)
    try:
        if not port or not port[0].isdigit():
            proc.kill()
            raise AssertionError(f"the provider printed no port: {proc.communicate(timeout=30)[1][-2000:]}")
        with grpc.insecure_channel(f"127.0.0.1:{port[0]}") as channel:
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            response = stub.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=120)
        yield json.loads(response.schema)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(p[:1].upper() + p[1:] for p in rest)


def test_schema_names_every_input_with_its_type_and_description(schema):
    assert schema["name"] == PROJECT
    component = schema["resources"][TYPE]
    assert component["isComponent"] is True
    inputs = component["inputProperties"]
    assert set(inputs) == {_camel(k) for k in LlmPdEksArgs.__annotations__}
    for key, spec in inputs.items():
        assert spec.get("type") or spec.get("$ref"), key
        assert spec.get("description", "").strip(), key
    assert inputs["region"]["type"] == "string" and inputs["protect"]["type"] == "boolean"
    assert inputs["network"]["type"] == "object"
    # the secrets are Inputs (may be outputs of other resources); the sections decide the graph: plain
    assert "plain" not in inputs["hfToken"] and inputs["network"].get("plain") is True
    assert sorted(component["requiredInputs"]) == ["gpuNodes", "network", "region"]


def test_every_config_section_is_an_input(schema):
    """A new section of the stack config model must reach other languages' programs too."""
    inputs = schema["resources"][TYPE]["inputProperties"]
    sections = {field.alias or name for name, field in StackConfig.model_fields.items()}
    assert sections <= set(inputs)
    # what StackConfig requires, the schema requires
    required = {field.alias or name for name, field in StackConfig.model_fields.items() if field.is_required()}
    assert required == set(schema["resources"][TYPE]["requiredInputs"])


def test_schema_outputs_are_the_stack_outputs(schema, programs):
    outputs = set(schema["resources"][TYPE]["properties"])
    run: ProgramRun = programs("dev")
    assert outputs == set(run.stack_outputs)


def test_program_is_one_component_holding_every_former_top_level_section(programs):
    run: ProgramRun = programs("dev")
    by_urn = {r.urn: r for r in run.resources}
    (top,) = [r for r in run.resources if r.parent not in by_urn]
    assert (top.type, top.name) == (TYPE, INSTANCE_NAME)
    children = {r.name for r in run.resources if r.parent == top.urn}
    assert {"network", "cluster", "system-nodes", "gpu-nodes", "core-addons", "kuberay", "llm"} <= children


def _example() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLE / "Pulumi.yaml").read_text())


def test_yaml_example_passes_the_schema(schema):
    assert check(_example(), schema, EXAMPLE, PROVIDER) == []


def test_yaml_example_values_pass_the_config_model():
    """The checker sees maps of Any; the component validates them when constructed: so must the example."""
    (resource,) = _example()["resources"].values()
    props = {k: v for k, v in resource["properties"].items() if not str(v).startswith("${")}
    props["hfToken"] = "placeholder"
    config = config_from_args(props)
    assert config.gpu_nodes.instance_type == stack_config("dev").gpu_nodes.instance_type


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda r: r["properties"].update(gpuNode={}), "properties.gpuNode: not an input"),
        (lambda r: r["properties"].pop("network"), "the required input 'network' is missing"),
        (lambda r: r["properties"].update(protect="yes"), "properties.protect: 'yes' is not a boolean"),
        (lambda r: r["properties"].update(region=["us-west-2"]), "properties.region: ['us-west-2'] is not a string"),
        (lambda r: r.update(type=f"{PROJECT}:index:LlmPdEKS"), "is not in the package"),
        (lambda r: r["properties"].update(protect="${hfToken}"), "config key 'hfToken' is a string"),
    ],
)
def test_yaml_checker_finds_each_mistake(schema, change, expected):
    program = _example()
    change(program["resources"]["serving"])
    problems = check(program, schema, EXAMPLE, PROVIDER)
    assert len(problems) == 1 and expected in problems[0], problems


def test_yaml_checker_finds_a_missing_output_and_a_wrong_package_path(schema):
    program = _example()
    program["outputs"]["url"] = "${serving.url}"
    program["packages"][PROJECT] = "../provider"
    problems = check(program, schema, EXAMPLE, PROVIDER)
    assert any("serving has no output 'url'" in p for p in problems)
    assert any(p.startswith(f"packages.{PROJECT}:") for p in problems)
    assert len(problems) == 2


def test_bad_inputs_from_another_language_are_reported_together():
    """Construct validates like a stack file: every problem, each naming its key."""
    props = dict(_example()["resources"]["serving"]["properties"])
    props.pop("hfToken")
    props["gpuNodes"] = {**props["gpuNodes"], "maxSize": 1, "availabilityZone": "eu-west-1a"}
    props["kuberay"] = {"chartVersion": "1.7.0", "extra": True}
    with pytest.raises(ConfigError) as info:
        config_from_args(props)
    text = "\n".join(info.value.problems)
    assert f"{PROJECT}:kuberay.extra: unknown key" in text
    assert f"{PROJECT}:gpuNodes" in text and len(info.value.problems) >= 3


def test_plugin_manifest_names_the_python_runtime():
    manifest = yaml.safe_load((PROVIDER / "PulumiPlugin.yaml").read_text())
    assert manifest["runtime"]["name"] == "python"
    assert (PROVIDER / "__main__.py").is_file()
    assert "-r ../requirements.txt" in (PROVIDER / "requirements.txt").read_text()
    assert Path(ROOT / ".gitignore").read_text().count("provider/venv/") == 1
