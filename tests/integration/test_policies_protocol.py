"""The pack as a plugin: how it starts, what GetAnalyzerInfo announces, how Configure and the
per-resource Analyze behave, and that its own EFA table matches the program's catalog."""

from __future__ import annotations

import re

import pytest
from google.protobuf import json_format
from helpers import LAUNCH_TEMPLATE
from policy_fixtures import Res, gpu_stack, judge, of, pack

from llm_pd_eks.catalog import EC2_GPU_TYPES, GPU_INSTANCE_TYPES
from llm_pd_eks.pulumi_sdk import analyzer_pb2
from llm_pd_eks_tools.plan.preview.analyzer import ROOT, PolicyPackServer

# The program's copy of the generated table: every EFA GPU type EC2 lists, not only those the
# program supports (the pack judges any of them).
CATALOG_EFA = {name: row["maximumEfaInterfaces"] for name, row in EC2_GPU_TYPES.items()}
POLICIES_NEEDING_EFA_TABLE = [
    "gpu-node-group-single-az",
    "efa-on-gpu-nodes",
    "efa-interface-count",
    "gpu-cluster-placement-group",
    "gpu-nodes-private",
    "efa-security-group",
    "gpu-references-in-stack",
    "ray-gpu-pods-efa",
]


def _policies() -> dict[str, analyzer_pb2.PolicyInfo]:
    return {p.name: p for p in pack().info().policies}


def test_info_announces_every_rule_with_its_level_and_kind():
    info = pack().info()
    assert info.name == "llm-pd-eks-policies" and info.supportsConfig
    policies = _policies()
    stack_rules = {
        "gpu-node-group-single-az",
        "efa-on-gpu-nodes",
        "efa-interface-count",
        "gpu-cluster-placement-group",
        "gpu-nodes-private",
        "efa-security-group",
        "gpu-references-in-stack",
        "ray-gpu-pods-efa",
        "capacity-reservation-in-gpu-az",
    }
    resource_rules = {
        "launch-template-imdsv2",
        "nixl-libfabric-backend",
        "no-literal-secrets-in-pods",
        "serve-endpoint-not-internet-facing",
        "eks-public-endpoint-restricted",
        "ray-custom-resources-reach-raylet",
        "resource-decodable",
        "serving-workloads-visible",
        "unjudgeable-type",
    }
    assert set(policies) == stack_rules | resource_rules
    for name, p in policies.items():
        kind = analyzer_pb2.POLICY_TYPE_STACK if name in stack_rules else analyzer_pb2.POLICY_TYPE_RESOURCE
        assert p.policy_type == kind, name
        assert p.description, name
        # Every rule gates deployments by default; a stack lowers a level through policy config.
        assert p.enforcementLevel == analyzer_pb2.MANDATORY, name


@pytest.mark.parametrize("policy", POLICIES_NEEDING_EFA_TABLE)
def test_pack_efa_table_defaults_agree_with_the_program_catalog(policy):
    schema = json_format.MessageToDict(_policies()[policy].configSchema)
    default = {k: int(v) for k, v in schema["properties"]["efaGpuTypes"]["default"].items()}
    assert default == CATALOG_EFA


def test_pack_efa_table_module_agrees_with_the_program_catalog():
    from llm_pd_eks_policy.efa_table import EFA_GPU_TYPES

    assert EFA_GPU_TYPES == CATALOG_EFA


def test_pack_gpu_counts_agree_with_the_program_catalog():
    from llm_pd_eks_policy.efa_table import GPUS_PER_INSTANCE

    assert GPUS_PER_INSTANCE == {name: row["gpus"] for name, row in EC2_GPU_TYPES.items()}
    assert {name: t.gpus for name, t in GPU_INSTANCE_TYPES.items()}.items() <= GPUS_PER_INSTANCE.items()


def test_policy_page_config_example_is_accepted_and_covers_every_policy():
    """docs/policies.md's example config is valid for the pack, and its table names every policy."""
    import json

    section = (ROOT / "docs" / "policies.md").read_text()
    example = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    sent = pack().configure(example)
    assert sent["gpu-references-in-stack"]["enforcementLevel"] == "advisory"
    for name in _policies():
        assert f"| `{name}` |" in section, name


def test_pack_pins_the_same_pulumi_policy_as_the_project():
    def pin(path):
        text = path.read_text()
        return re.search(r"^pulumi-policy==(\S+)", text, re.M).group(1)

    assert pin(ROOT / "policies" / "requirements.txt") == pin(ROOT / "requirements-preview.txt") == "1.21.0"


def test_configure_fills_schema_defaults_and_keeps_levels():
    sent = pack().configure({"efa-interface-count": {"efaGpuTypes": {"p5.48xlarge": 32}}})
    assert sent["efa-interface-count"]["enforcementLevel"] == "mandatory"
    assert sent["efa-interface-count"]["properties"] == {
        "efaGpuTypes": {"p5.48xlarge": 32},
        "extraEfaGpuTypes": {},
        "gpuFamilyPattern": r"^(p|g|gr|trn)\d",
        "nonEfaGpuTypes": [],
        "unlistedGpuTypes": "deny",
    }
    assert sent["serve-endpoint-not-internet-facing"] == {
        "enforcementLevel": "mandatory",
        "properties": {"allowInternetFacing": False},
    }


@pytest.mark.parametrize(
    "config, complaint",
    [
        ({"no-such-policy": "advisory"}, "unknown policies ['no-such-policy']"),
        ({"launch-template-imdsv2": "sometimes"}, "enforcementLevel 'sometimes'"),
        ({"serve-endpoint-not-internet-facing": {"allowInternetFacing": "yes"}}, "allowInternetFacing"),
        ({"efa-on-gpu-nodes": {"efaGpuType": {}}}, "efaGpuType"),
        ({"nixl-libfabric-backend": {"strict": True}}, "strict"),
        ({"gpu-references-in-stack": {"unlistedGpuTypes": "maybe"}}, "unlistedGpuTypes"),
    ],
)
def test_bad_policy_config_is_refused_by_name(config, complaint):
    with pytest.raises(ValueError, match=re.escape(complaint)):
        pack().configure(config)


def test_enforcement_level_overrides_reach_the_pack():
    stack = gpu_stack(azs=("us-west-2a", "us-west-2b"))
    assert of(judge(stack, {"gpu-node-group-single-az": "advisory"}), "gpu-node-group-single-az", "advisory")
    assert [
        v for v in judge(stack, {"gpu-node-group-single-az": "disabled"}) if v.policy == "gpu-node-group-single-az"
    ] == []
    assert of(judge(stack), "gpu-node-group-single-az")  # back to mandatory with the default config


def test_analyze_attributes_a_resource_verdict_to_the_resource():
    lt = Res(LAUNCH_TEMPLATE, "bare-lt", {"instanceType": "m7i.large"})  # no metadataOptions
    server = pack()
    server.configure()
    verdicts = server.analyze(lt.message())
    assert [(v.policy, v.enforcement, v.urn) for v in verdicts] == [("launch-template-imdsv2", "mandatory", lt.urn)]
    assert verdicts[0].message.startswith(verdicts[0].description)  # the engine's "description\nmessage"
    assert server.analyze_stack([lt.message()]) == []  # stack rules see no GPU resources here


def test_server_process_is_stopped_on_exit():
    with PolicyPackServer() as server:
        proc = server._proc
        assert server.info().policies
    assert proc.poll() is not None


def test_broken_pack_fails_to_start_with_its_error(tmp_path):
    (tmp_path / "__main__.py").write_text("raise SystemExit('no pack here')\n")
    with pytest.raises(RuntimeError, match="no pack here"):
        PolicyPackServer(pack_dir=tmp_path, startup_timeout=30).start()
