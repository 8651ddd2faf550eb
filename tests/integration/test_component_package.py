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
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.gates.yaml_program import check
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun

PROVIDER = ROOT / "provider"
EXAMPLE = ROOT / "examples" / "yaml"
# The plugin imports pulumi_aws, pulumi_eks and pulumi_kubernetes before it listens: generous on 2 loaded cores.
START_TIMEOUT_S = 240


class _Engine:
    """The engine's side of the provider protocol, in this process on ports from the OS: a resource
    monitor (the preview's mock monitor, so registrations get the preview's outputs) and the engine's
    log service. The provider dials both, as it would the CLI's."""

    def __init__(self) -> None:
        from concurrent import futures

        from llm_pd_eks.pulumi_sdk import engine_pb2_grpc, resource_pb2, resource_pb2_grpc
        from llm_pd_eks_tools.plan.preview.mockrun import recording_monitor

        self.recorded: list[Any] = []
        monitor = recording_monitor(self.recorded)
        monitor.make_urn = lambda parent, type_, name: _urn(parent, type_, name)  # no stack settings here
        self.monitor = monitor

        class Monitor(resource_pb2_grpc.ResourceMonitorServicer):
            def SupportsFeature(self, request, context):  # the mock's answer is no protobuf message
                return resource_pb2.SupportsFeatureResponse(hasSupport=request.id != "outputValues")

        for method in ("RegisterResource", "RegisterResourceOutputs", "Invoke", "GetDeploymentInfo", "RegisterPackage"):
            setattr(Monitor, method, lambda _self, request, context, _m=method: getattr(monitor, _m)(request))

        class Engine(engine_pb2_grpc.EngineServicer):
            def Log(self, request, context):
                from google.protobuf import empty_pb2

                return empty_pb2.Empty()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        resource_pb2_grpc.add_ResourceMonitorServicer_to_server(Monitor(), self.server)
        engine_pb2_grpc.add_EngineServicer_to_server(Engine(), self.server)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()


def _urn(parent: str, type_: str, name: str) -> str:
    if parent:
        type_ = parent.split("::")[2].split("$")[-1] + "$" + type_
    return f"urn:pulumi:wire::{PROJECT}::{type_}::{name}"


@pytest.fixture(scope="module")
def provider() -> Iterator[tuple[Any, _Engine]]:
    """The plugin, started as the language host starts it (`python <folder> <engine>`), and a stub of
    its gRPC port; its engine is `_Engine`."""
    from llm_pd_eks.pulumi_sdk import provider_pb2_grpc

    engine = _Engine()
    proc = subprocess.Popen(
        [sys.executable, str(PROVIDER), engine.address],
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
            yield provider_pb2_grpc.ResourceProviderStub(channel), engine
    finally:
        engine.server.stop(grace=None)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


@pytest.fixture(scope="module")
def schema(provider) -> dict[str, Any]:
    """GetSchema from the plugin, as the Pulumi CLI asks it for `pulumi package add`."""
    from llm_pd_eks.pulumi_sdk import provider_pb2

    stub, _ = provider
    response = stub.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=120)
    return json.loads(response.schema)


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
    assert inputs["network"]["$ref"] == f"#/types/{PROJECT}:index:NetworkConfig"
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


# -- Construct over the provider protocol, as a YAML or TypeScript program's engine sends it ------------
def _construct(provider, properties: dict[str, Any], config: dict[str, str] | None = None):
    """Construct `LlmPdEks` through the plugin's gRPC port; the inputs as a protobuf Struct, where every
    number is a double (google/protobuf/struct.proto: `number_value`), exactly what the engine sends."""
    from google.protobuf import struct_pb2

    from llm_pd_eks.pulumi_sdk import provider_pb2

    stub, engine = provider
    engine.recorded.clear()
    inputs = struct_pb2.Struct()
    inputs.update(properties)
    request = provider_pb2.ConstructRequest(
        project=PROJECT,
        stack="wire",
        config=config or {},
        dryRun=True,
        parallel=4,
        monitorEndpoint=engine.address,
        type=TYPE,
        name="from-yaml",
        inputs=inputs,
    )
    return stub.Construct(request, timeout=300), engine.recorded


def _wire_example() -> dict[str, Any]:
    (resource,) = _example()["resources"].values()
    props = dict(resource["properties"])
    props["hfToken"] = "hf_not_a_real_token_for_the_wire_test"  # `${hfToken}` in the program
    return props


def test_the_yaml_example_constructs_through_the_provider_with_whole_number_doubles(provider):
    props = _wire_example()
    response, recorded = _construct(provider, props)
    from google.protobuf import struct_pb2

    sent = struct_pb2.Struct()
    sent.update(props)
    assert isinstance(sent["gpuNodes"]["maxSize"], float)  # the wire's double, not an int
    by_type: dict[str, list[Any]] = {}
    for r in recorded:
        by_type.setdefault(r.type, []).append(r)
    (gpu_group,) = [r for r in by_type["aws:eks/nodeGroup:NodeGroup"] if "gpu" in r.name]
    assert gpu_group.inputs["scalingConfig"] == {"minSize": 2, "desiredSize": 2, "maxSize": 2}
    (service,) = by_type["kubernetes:ray.io/v1:RayService"]
    assert "tensor_parallel_size: 1" in service.inputs["spec"]["serveConfigV2"]
    # the program has no aws:region: the component made the provider for its `region` input
    (aws_provider,) = by_type["pulumi:providers:aws"]
    assert aws_provider.inputs["region"] == "us-west-2"
    (vpc,) = by_type["aws:ec2/vpc:Vpc"]
    assert vpc.provider.startswith(aws_provider.urn + "::")
    assert {"kubeconfig", "kubeconfigJson", "clusterName"} <= set(response.state.fields)


def test_a_given_default_region_makes_no_provider_and_a_fraction_is_refused_by_the_model(provider):
    _, recorded = _construct(provider, _wire_example(), config={"aws:region": "us-west-2"})
    assert recorded and not [r for r in recorded if r.type == "pulumi:providers:aws"]
    props = _wire_example()
    props["gpuNodes"] = {**props["gpuNodes"], "maxSize": 2.5}
    with pytest.raises(grpc.RpcError) as info:
        _construct(provider, props)
    assert f"{PROJECT}:gpuNodes.maxSize" in info.value.details()  # type: ignore[attr-defined]
    assert "integer" in info.value.details()  # type: ignore[attr-defined]


def test_every_config_section_is_a_typed_object_from_the_model(schema):
    inputs = schema["resources"][TYPE]["inputProperties"]
    models = StackConfig.model_json_schema(by_alias=True)
    for key, prop in models["properties"].items():
        if "$ref" not in prop:
            continue
        name = prop["$ref"].rsplit("/", 1)[-1]
        assert inputs[key]["$ref"] == f"#/types/{PROJECT}:index:{name}", key
        typed = schema["types"][f"{PROJECT}:index:{name}"]
        assert set(typed["properties"]) == set(models["$defs"][name]["properties"]), key
        assert all(spec.get("description") for spec in typed["properties"].values()), key
    gpu = schema["types"][f"{PROJECT}:index:GpuNodesConfig"]
    assert gpu["properties"]["maxSize"]["type"] == "integer" and "instanceType" in gpu["required"]
    assert {o.get("$ref", o.get("type")) for o in gpu["properties"]["capacity"]["oneOf"]} == {
        "string",
        f"#/types/{PROJECT}:index:CapacityReservation",
        f"#/types/{PROJECT}:index:CapacityBlock",
    }
    serving = schema["types"][f"{PROJECT}:index:ServingConfig"]
    assert serving["properties"]["prefill"]["$ref"] == f"#/types/{PROJECT}:index:ReplicaGroupConfig"
    assert schema["resources"][TYPE]["properties"]["kubeconfigJson"]["type"] == "string"


@pytest.fixture
def recorded() -> list[Any]:
    """The preview's mock monitor in this process (pulumi.runtime.set_mocks), recording registrations."""
    import pulumi

    from llm_pd_eks_tools.plan.preview.mockrun import recording_monitor

    registrations: list[Any] = []
    monitor = recording_monitor(registrations)
    pulumi.runtime.set_mocks(monitor.mocks, project=PROJECT, stack="unit", preview=True, monitor=monitor)
    return registrations


def test_a_provider_passed_in_is_the_one_and_only_aws_provider(recorded):
    """A provider passed in reaches every child through the parent chain: the component makes none."""
    import pulumi
    import pulumi_aws as aws

    from llm_pd_eks.deployment import LlmPdEks
    from llm_pd_eks.pulumi_sdk import sync_await

    given = aws.Provider("given", region="us-west-2")
    props = {k: v for k, v in _wire_example().items() if k != "hfToken"}
    component = LlmPdEks("from-ts", props, opts=pulumi.ResourceOptions(providers=[given]))  # type: ignore[arg-type]
    sync_await(component.vpc_id.future())
    assert [r.name for r in recorded if r.type == "pulumi:providers:aws"] == ["given"]
    (vpc,) = [r for r in recorded if r.type == "aws:ec2/vpc:Vpc"]
    assert vpc.provider.startswith(next(r.urn for r in recorded if r.name == "given") + "::")
