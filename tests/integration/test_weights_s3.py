"""serving.weightsS3Uri: the weights from S3 over the gateway endpoint, read with a role scoped to the prefix.

The S3 side is judged by Ray Serve LLM's own code (the installed Ray): its LLMConfig takes the URI as
`model_source`, its cloud-mirror check calls it remote, and its S3 file system's URI parsing gives the
bucket and the listing prefix the IAM policy must allow, and nothing wider. IAM wildcard matching
(`*` any run of characters, `?` one) is the IAM User Guide's ("IAM JSON policy elements: Resource").
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from helpers import RAY_SERVICE, run_with
from stack.test_serving_config import problems, validate

from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.core.stackfile import PROJECT
from llm_pd_eks_tools.plan.preview.figures import key_figures
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun
from llm_pd_eks_tools.plan.preview.render import figure_lines

URI = "s3://example-llm-weights/qwen2.5-7b-instruct"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"


@pytest.fixture(scope="module")
def s3_run() -> ProgramRun:
    return run_with("dev", serving={"weightsS3Uri": URI + "/"})


def llm_configs(run: ProgramRun) -> list[dict]:
    (app,) = yaml.safe_load(run.one(RAY_SERVICE).inputs["spec"]["serveConfigV2"])["applications"]
    return [app["args"][f"{role}_config"] for role in ("prefill", "decode")]


def worker_pods(run: ProgramRun) -> list[dict]:
    groups = run.one(RAY_SERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return [g["template"]["spec"] for g in groups]


def iam_matches(pattern: str, value: str) -> bool:
    return (
        re.fullmatch("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), value)
        is not None
    )


# --- config --------------------------------------------------------------------------------------


def test_the_uri_is_kept_without_its_trailing_slash():
    assert validate({"serving": {"weightsS3Uri": URI + "/"}}).serving.weights_s3_uri == URI


@pytest.mark.parametrize(
    "uri",
    [
        "s3://example-llm-weights",
        "s3://example-llm-weights/",
        "s3://Upper/x",
        "s3://b/x*",
        "https://b/x",
        "s3://bucket//x",
        "s3://bucket/x//",
    ],
)
def test_a_uri_without_a_bucket_and_prefix_is_refused(uri):
    (problem,) = problems({"serving": {"weightsS3Uri": uri}})
    assert problem.startswith(f"{PROJECT}:serving.weightsS3Uri: ") and "s3://<bucket>/<prefix>" in problem
    assert "\n" not in problem


# --- Ray Serve LLM loads from it ---------------------------------------------------------------


def test_both_roles_load_the_model_from_the_s3_prefix(s3_run: ProgramRun):
    from ray.llm._internal.common.utils.cloud_utils import CloudMirrorConfig, is_remote_path
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    model_id = stack_config("dev").serving.model_id
    for raw in llm_configs(s3_run):
        config = LLMConfig.model_validate(raw)
        source = config.model_loading_config.model_source
        assert source == URI and config.model_id == model_id  # the served name stays the model's
        assert is_remote_path(source) and CloudMirrorConfig(bucket_uri=source).storage_type == "s3"


def test_without_it_the_model_comes_from_hugging_face(programs):
    run = programs("dev")
    model_id = stack_config("dev").serving.model_id
    assert {c["model_loading_config"]["model_source"] for c in llm_configs(run)} == {model_id}
    assert all("serviceAccountName" not in pod for pod in worker_pods(run))
    assert not [r for r in run.of_type(SERVICE_ACCOUNT) if "worker" in r.name]


# --- the workers' access -------------------------------------------------------------------------


def test_the_workers_run_as_the_service_account_whose_role_trusts_only_it(s3_run: ProgramRun):
    (sa,) = [r for r in s3_run.of_type(SERVICE_ACCOUNT) if "worker" in r.name]
    name, namespace = sa.inputs["metadata"]["name"], sa.inputs["metadata"]["namespace"]
    pods = worker_pods(s3_run)
    assert {pod["serviceAccountName"] for pod in pods} == {name}
    assert s3_run.one(RAY_SERVICE).inputs["metadata"]["namespace"] == namespace
    assert sa.urn in s3_run.one(RAY_SERVICE).dependencies  # the account exists before any pod
    role = s3_run.one(ROLE, "weights")
    assert role.urn in sa.property_dependencies["metadata"]  # its role-arn annotation is this role's
    assert "eks.amazonaws.com/role-arn" in sa.inputs["metadata"]["annotations"]
    (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    (condition,) = statement["Condition"].values()
    subjects = [v for k, v in condition.items() if k.endswith(":sub")]
    assert subjects == [f"system:serviceaccount:{namespace}:{name}"]


def test_the_role_lists_and_reads_exactly_what_ray_serve_llm_asks_for(s3_run: ProgramRun):
    from ray.llm._internal.common.utils.cloud_filesystem.s3_filesystem import S3FileSystem

    bucket, prefix, anonymous = S3FileSystem._parse_s3_uri(URI)
    assert not anonymous
    listing_prefix = prefix if prefix.endswith("/") else f"{prefix}/"  # s3_filesystem.download_files
    policy = json.loads(s3_run.one(ROLE_POLICY, "weights").inputs["policy"])
    allowed = {(s["Action"], s["Resource"]) for s in policy["Statement"]}
    assert {a for a, _ in allowed} == {"s3:ListBucket", "s3:GetObject"}
    assert all(s["Effect"] == "Allow" for s in policy["Statement"])
    (listing,) = [s for s in policy["Statement"] if s["Action"] == "s3:ListBucket"]
    (reading,) = [s for s in policy["Statement"] if s["Action"] == "s3:GetObject"]
    assert listing["Resource"] == f"arn:aws:s3:::{bucket}"
    patterns = listing["Condition"]["StringLike"]["s3:prefix"]
    # Ray's own listing and key reads are allowed ...
    assert any(iam_matches(p, listing_prefix) for p in patterns)
    assert iam_matches(reading["Resource"], f"arn:aws:s3:::{bucket}/{listing_prefix}model-00001-of-00004.safetensors")
    # ... and nothing next to the prefix, nor the bucket's root
    for other in ("", f"{prefix}-other/", "other/"):
        assert not any(iam_matches(p, other) for p in patterns), other
    assert not iam_matches(reading["Resource"], f"arn:aws:s3:::{bucket}/{prefix}-other/config.json")


def test_the_workers_ask_s3_in_the_stack_s_region_over_the_gateway_endpoint(s3_run: ProgramRun):
    region = stack_config("dev").region
    for pod in worker_pods(s3_run):
        container = pod["containers"][0]
        assert {e["name"]: e.get("value") for e in container["env"]}["AWS_REGION"] == region
    # the private route tables carry the S3 gateway endpoint (tests/stack/test_cluster_aws.py judges its routes)
    endpoint = s3_run.one("aws:ec2/vpcEndpoint:VpcEndpoint", "s3")
    assert (endpoint.inputs["serviceName"], endpoint.inputs["vpcEndpointType"]) == (
        f"com.amazonaws.{region}.s3",
        "Gateway",
    )


# --- the preview ---------------------------------------------------------------------------------


def test_the_preview_says_what_a_cold_start_pulls_through_nat_and_what_s3_saves(programs, s3_run: ProgramRun):
    from llm_pd_eks.models import MODELS

    config = stack_config("dev")
    gb = round(MODELS[config.serving.model_id].weights_gib_bf16 * 2**30 / 1e9, 1)
    plain = key_figures(programs("dev"), config, config.region).weights
    assert (plain["nat_gb_per_node_cold_start"], plain["nat_gb_saved_per_node_cold_start"]) == (gb, 0.0)
    s3_config = validate({"serving": {"weightsS3Uri": URI}})
    s3 = key_figures(s3_run, stack_config("dev").model_copy(update={"serving": s3_config.serving}), config.region)
    assert (s3.weights["nat_gb_per_node_cold_start"], s3.weights["nat_gb_saved_per_node_cold_start"]) == (0.0, gb)
    line = dict(figure_lines(s3))["Weights"]
    assert f"{gb:,.1f} GB of NAT traffic saved" in line and URI in line
    assert (
        f"{gb:,.1f} GB through the NAT gateway"
        in dict(figure_lines(key_figures(programs("dev"), config, config.region)))["Weights"]
    )


def test_the_pack_finds_no_mandatory_violation_with_weights_from_s3(s3_run: ProgramRun):
    from policy_fixtures import mandatory, pack

    from llm_pd_eks_tools.plan.preview.analyzer import analyze_run

    verdicts = analyze_run(s3_run, server=pack())
    assert mandatory(verdicts) == [], "\n".join(v.message for v in mandatory(verdicts))
    assert [v for v in verdicts if "can't run policy" in v.message] == []
