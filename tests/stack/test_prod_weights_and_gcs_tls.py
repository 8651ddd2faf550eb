"""Prod loads its weights from S3 (an SSE-KMS bucket needs kms:Decrypt on its key, through S3 only), and the
Ray head verifies the GCS store's TLS certificate against the serving image's CA bundle."""

from __future__ import annotations

import json

import pytest
from helpers import engine_config_with, run_with

from llm_pd_eks.config import ConfigError, validate_engine_config
from llm_pd_eks_tools.core.stack import stack_config
from llm_pd_eks_tools.plan.preview.mockrun import run_program

ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
KEY = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def weights_policy(run) -> dict:
    return json.loads(run.one(ROLE_POLICY, "weights-read").inputs["policy"])


def test_prod_reads_its_weights_from_s3_with_the_buckets_key():
    config = stack_config("prod")
    assert config.serving.weights_s3_uri and config.serving.weights_kms_key_arn
    statements = {s["Sid"]: s for s in weights_policy(run_program("prod"))["Statement"]}
    decrypt = statements["DecryptTheWeightsThroughS3"]
    assert decrypt["Action"] == "kms:Decrypt" and decrypt["Resource"] == config.serving.weights_kms_key_arn
    assert decrypt["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}
    assert {"ListTheWeightsPrefix", "ReadTheWeights"} <= set(statements)


def test_without_a_key_there_is_no_kms_permission():
    run = run_with("prod", serving={"weightsKmsKeyArn": None})
    assert all(s["Action"] != "kms:Decrypt" for s in weights_policy(run)["Statement"])


@pytest.mark.parametrize(
    "serving, expected",
    [
        ({"weightsS3Uri": None, "weightsKmsKeyArn": KEY}, "weightsKmsKeyArn is set without weightsS3Uri"),
        ({"weightsKmsKeyArn": "arn:aws:kms:us-east-1:111122223333:alias/weights"}, "is not a KMS key ARN"),
        (
            {"weightsKmsKeyArn": KEY.replace("us-east-1", "eu-west-1")},
            "the key is in eu-west-1, the stack in us-east-1",
        ),
    ],
)
def test_a_key_is_checked(serving, expected):
    with pytest.raises(ConfigError) as info:
        validate_engine_config(*engine_config_with("prod", "serving", **serving))
    assert any(expected in p for p in info.value.problems), info.value.problems


# --- the Ray head verifies the GCS store's TLS certificate ------------------------------------------

RAY_SERVICE = "kubernetes:ray.io/v1:RayService"


def head_env(run) -> dict[str, str]:
    cluster = run.one(RAY_SERVICE, "rayservice").inputs["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in head.get("env") or []}


def test_with_gcs_fault_tolerance_the_head_trusts_the_images_ca_bundle():
    run = run_program("prod")
    cluster = run.one(RAY_SERVICE, "rayservice").inputs["spec"]["rayClusterConfig"]
    assert cluster["gcsFaultToleranceOptions"]["redisAddress"].startswith("rediss://")
    assert head_env(run)["RAY_REDIS_CA_CERT"] == "/etc/pki/tls/certs/ca-bundle.crt"


def test_without_a_store_there_is_no_ca_setting():
    assert "RAY_REDIS_CA_CERT" not in head_env(run_with("prod", serving={"gcsFaultTolerance": False}))
