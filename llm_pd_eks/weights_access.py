"""The workers' read access to `serving.weightsS3Uri`: an IRSA role that may list and read that prefix only.

Ray Serve LLM loads a model whose `model_source` is an `s3://` URI from that bucket prefix on every
node of the replica's placement group (ray-2.58.0 python/ray/llm/_internal/serve/engines/vllm/
vllm_models.py `from_llm_config`: a remote `model_source` becomes `CloudMirrorConfig(bucket_uri=...)`;
serve/utils/node_initialization_utils.py `initialize_node`). Its S3 file system is boto3
(common/utils/cloud_filesystem/s3_filesystem.py): `list_objects_v2(Bucket, Prefix="<prefix>/")` and a
`download_file` per key, with the default credential chain, which picks up the web identity token the
EKS pod identity webhook projects for an annotated service account (IRSA). So the role allows
`s3:ListBucket` on the bucket for keys under the prefix (condition `s3:prefix`) and `s3:GetObject` on
`<prefix>/*`, nothing else; on a bucket encrypted with a KMS key (SSE-KMS, `serving.weightsKmsKeyArn`),
S3 decrypts each object with the caller's own permission, so the role also gets `kms:Decrypt` on that key,
only through S3 in the stack's region (condition `kms:ViaService`: AWS KMS Developer Guide, "kms:ViaService").
The traffic leaves through the VPC's S3 gateway endpoint (llm_pd_eks/
network.py, on the private route tables), which serves buckets in the VPC's own region.
"""

from __future__ import annotations

import json
from typing import Optional

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from .cluster import irsa_trust_policy
from .config.serving import ServingConfig, s3_bucket_and_prefix
from .serving_names import NAMESPACE, WORKER_SERVICE_ACCOUNT

ROLE_ARN_ANNOTATION = "eks.amazonaws.com/role-arn"  # what the EKS pod identity webhook reads (IRSA)


def aws_partition(region: str) -> str:
    """The ARN partition of `region` (aws, aws-cn, aws-us-gov)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def weights_read_policy(uri: str, region: str, kms_key_arn: Optional[str] = None) -> str:
    """List and read under the URI's prefix, nothing else of the bucket or of S3 (and decrypt with the
    bucket's KMS key through S3, when it has one)."""
    bucket, prefix = s3_bucket_and_prefix(uri)
    arn = f"arn:{aws_partition(region)}:s3:::{bucket}"
    decrypt = (
        [
            {
                "Sid": "DecryptTheWeightsThroughS3",
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": kms_key_arn,
                "Condition": {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
            }
        ]
        if kms_key_arn
        else []
    )
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                *decrypt,
                {
                    "Sid": "ListTheWeightsPrefix",
                    "Effect": "Allow",
                    "Action": "s3:ListBucket",
                    "Resource": arn,
                    "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/", f"{prefix}/*"]}},
                },
                {
                    "Sid": "ReadTheWeights",
                    "Effect": "Allow",
                    "Action": "s3:GetObject",
                    "Resource": f"{arn}/{prefix}/*",
                },
            ],
        },
        sort_keys=True,
    )


def worker_service_account(
    name: str,
    serving: ServingConfig,
    region: str,
    oidc_provider_arn: pulumi.Input[str],
    oidc_issuer: pulumi.Input[str],
    namespace: pulumi.Input[str],
    tags: Optional[dict[str, str]],
    parent: pulumi.Resource,
    provider: k8s.Provider,
) -> k8s.core.v1.ServiceAccount:
    """The IRSA role with read access to `serving.weightsS3Uri` and the workers' service account bound to it."""
    assert serving.weights_s3_uri is not None
    aws_opts = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(
        f"{name}-weights-role",
        description=f"LLM workers reading {serving.weights_s3_uri} (IRSA, {NAMESPACE}/{WORKER_SERVICE_ACCOUNT})",
        assume_role_policy=pulumi.Output.all(oidc_provider_arn, oidc_issuer).apply(
            lambda a: irsa_trust_policy(a[0], a[1], NAMESPACE, WORKER_SERVICE_ACCOUNT)
        ),
        tags=dict(tags or {}),
        opts=aws_opts,
    )
    policy = aws.iam.RolePolicy(
        f"{name}-weights-read",
        role=role.id,
        policy=weights_read_policy(serving.weights_s3_uri, region, serving.weights_kms_key_arn),
        opts=aws_opts,
    )
    return k8s.core.v1.ServiceAccount(
        f"{name}-worker-sa",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=WORKER_SERVICE_ACCOUNT,
            namespace=namespace,
            annotations={ROLE_ARN_ANNOTATION: role.arn},
        ),
        # the pods may start only once the role can be assumed and read
        opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=[policy]),
    )
