"""GCS fault tolerance: the Ray head's state in an external Valkey, so the head can restart without
taking the Ray cluster (and serving) down with it (`serving.gcsFaultTolerance`).

Without it the GCS keeps the cluster's state in the head's memory: a restarted head is a new, empty
cluster, and KubeRay's workers and Serve replicas are gone with the old one. With an external store
the new head reloads the state and the workers reconnect: KubeRay gives them 600 s to do so
(RAY_GCS_RPC_SERVER_RECONNECT_TIMEOUT_S, ray-project/kuberay v1.7.0 ray-operator/controllers/ray/common/pod.go).

- The store: an ElastiCache replication group on the Valkey engine (Redis-protocol), a primary and a
  replica in two of the private subnets with automatic failover, encrypted at rest and in transit
  (`transit_encryption_mode: required`), an AUTH token, reachable on its port only from the cluster
  security group (every node is a member; the head is the only client).
- The token: a random password kept a Pulumi secret in state (pulumi-random `RandomPassword.result`
  is secret), stable across `up`s; the RayService reads it from a Kubernetes Secret, never a literal.
- KubeRay 1.7.0 `spec.rayClusterConfig.gcsFaultToleranceOptions` (ray-operator/apis/ray/v1/
  raycluster_types.go `GcsFaultToleranceOptions`: `redisAddress`, `redisPassword` as a
  `RedisCredential` with `valueFrom`, `backend` defaulting to `redis`) sets RAY_REDIS_ADDRESS and
  REDIS_PASSWORD on the head (`configureRedisFT` in pod.go). TLS is asked for by the address's
  scheme: Ray 2.57.0 ray/_private/services.py `get_address` takes `rediss://ip:port` "for SSL", and
  KubeRay's cleanup Job passes `use_ssl=parsed.scheme=='rediss'` (raycluster_controller.go
  `buildRedisCleanupJob`).
- TLS trust: the GCS's Redis client (ray-project/ray src/ray/gcs/store_client/redis_context.cc, the
  `RedisContext` constructor, source read at 09400b9a) builds one hiredis SSL context from the RayConfig
  entries REDIS_CA_CERT, REDIS_CA_PATH, REDIS_CLIENT_CERT, REDIS_CLIENT_KEY and REDIS_SERVER_NAME (each
  settable as a `RAY_<name>` environment variable), passing null for an empty one; hiredis
  (ssl.c `redisCreateSSLContextWithOptions`) then falls back to the TLS library's default verify paths
  and verifies the peer. The ray 2.58.0 wheel's own `gcs_server` binary carries the same pieces (its
  strings: the five entry names, the constructor's "Failed to construct a ssl context for redis client",
  `redisCreateSSLContextWithOptions`, `SSL_CTX_set_default_verify_paths`), and its TLS library's
  defaults are /etc/ssl/cert.pem and /etc/ssl/certs, paths an Amazon Linux image need not have. So
  the head names the image's CA bundle: the serving image is built on Amazon Linux 2023
  (aws/deep-learning-containers docker/ray_llm/Dockerfile.cuda at 140b5392, `base:runtime-cu130-amzn2023`),
  whose ca-certificates bundle is /etc/pki/tls/certs/ca-bundle.crt, with the Amazon roots ElastiCache's
  in-transit certificates chain to. A wrong path fails the head at start (the constructor's RAY_CHECK),
  never silently unverified. Read only: not yet run against a live ElastiCache.
- Each RayCluster keeps its state under its own namespace in the store (its UID, `configureRedisFT`),
  so the old and new clusters of a NewCluster upgrade share the store without meeting. When KubeRay
  deletes the old cluster it runs that cleanup Job from the old head's pod spec (its node group
  included) with a 300 s deadline; if the old node group is already gone the Job fails and the old
  cluster's keys stay behind in the store (a few MiB, not the serving cluster's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pulumi_random as random

GCS_STORE_PORT = 6379
GCS_STORE_ENGINE = ("valkey", "8.0")
GCS_SECRET_KEY = "password"
# ElastiCache AUTH tokens: 16-128 printable characters without `@`, `"` or `/` (ElastiCache
# CreateReplicationGroup `AuthToken`); letters and digits only, 64 of them.
AUTH_TOKEN_LENGTH = 64


def replication_group_id(cluster_name: str) -> str:
    """`<cluster>-ray-gcs` as ElastiCache takes it (CreateReplicationGroup `ReplicationGroupId`: at most
    40 lowercase letters, digits and hyphens, a letter first, no two hyphens in a row, none last)."""
    base = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", cluster_name.lower())).strip("-")
    base = base if base[:1].isalpha() else f"c-{base}"
    return f"{base[:32].rstrip('-')}-ray-gcs"


@dataclass(frozen=True)
class GcsConnection:
    """How the Ray head reaches its store: the primary endpoint and the AUTH token (a secret)."""

    host: pulumi.Input[str]
    auth_token: pulumi.Input[str]

    def address(self) -> pulumi.Output[str]:
        return pulumi.Output.concat("rediss://", self.host, f":{GCS_STORE_PORT}")


@dataclass(frozen=True)
class GcsStoreArgs:
    """Inputs of `GcsStore`; the VPC, subnets and the nodes' security group come from `Network` and `Cluster`."""

    cluster_name: str
    """The EKS cluster (the replication group's id starts with it)."""
    vpc_id: pulumi.Input[str]
    """The VPC of the store's security group."""
    private_subnet_ids: Sequence[pulumi.Input[str]]
    """The private subnets: the primary and its replica land in two of them."""
    node_security_group_id: pulumi.Input[str]
    """The cluster security group every node is a member of: the only source admitted."""


class GcsStore(pulumi.ComponentResource):
    """Valkey for the Ray GCS: subnet group, security group, AUTH token, replication group."""

    security_group: aws.ec2.SecurityGroup
    replication_group: aws.elasticache.ReplicationGroup
    connection: GcsConnection

    def __init__(
        self,
        name: str,
        args: GcsStoreArgs,
        node_type: str,
        tags: Mapping[str, str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`node_type`: the cache node type (`serving.gcsStoreNodeType`); `tags` on every resource."""
        if len(args.private_subnet_ids) < 2:
            raise pulumi.InputPropertyError(
                "private_subnet_ids", "fewer than 2; the store's replica needs a second availability zone"
            )
        super().__init__("llm-pd-eks:index:GcsStore", name, None, opts)
        tags = dict(tags or {})
        child = pulumi.ResourceOptions(parent=self)
        subnets = aws.elasticache.SubnetGroup(
            f"{name}-subnets",
            description=f"Ray GCS store of {args.cluster_name}: private subnets",
            subnet_ids=list(args.private_subnet_ids),
            tags=tags,
            opts=child,
        )
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            description="Ray GCS store: its port from the cluster's nodes only",
            vpc_id=args.vpc_id,
            ingress=[
                aws.ec2.SecurityGroupIngressArgs(
                    protocol="tcp",
                    from_port=GCS_STORE_PORT,
                    to_port=GCS_STORE_PORT,
                    security_groups=[args.node_security_group_id],
                    description="Ray head (GCS) on the cluster's nodes",
                )
            ],
            egress=[],  # the store opens no connection
            tags={**tags, "Name": f"{name}-sg"},
            opts=child,
        )
        token = random.RandomPassword(f"{name}-auth-token", length=AUTH_TOKEN_LENGTH, special=False, opts=child)
        engine, version = GCS_STORE_ENGINE
        self.replication_group = aws.elasticache.ReplicationGroup(
            f"{name}-valkey",
            replication_group_id=replication_group_id(args.cluster_name),
            description=f"Ray GCS fault tolerance of {args.cluster_name}",
            engine=engine,
            engine_version=version,
            node_type=node_type,
            num_cache_clusters=2,  # a primary and a replica
            automatic_failover_enabled=True,
            multi_az_enabled=True,
            port=GCS_STORE_PORT,
            subnet_group_name=subnets.name,
            security_group_ids=[self.security_group.id],
            at_rest_encryption_enabled=True,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            auth_token=token.result,
            tags=tags,
            opts=child,
        )
        self.connection = GcsConnection(self.replication_group.primary_endpoint_address, token.result)
        self.register_outputs({"primaryEndpoint": self.replication_group.primary_endpoint_address})


# RayConfig REDIS_CA_CERT as an environment variable, and the serving image's system CA bundle (above).
GCS_TLS_CA_ENV = "RAY_REDIS_CA_CERT"
IMAGE_CA_BUNDLE = "/etc/pki/tls/certs/ca-bundle.crt"


def gcs_tls_env() -> list[dict[str, str]]:
    """The head container's environment that makes the GCS verify the store's certificate against the
    image's trust store (module docstring, "TLS trust")."""
    return [{"name": GCS_TLS_CA_ENV, "value": IMAGE_CA_BUNDLE}]


def gcs_fault_tolerance_options(
    name: str, connection: GcsConnection, namespace: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> dict[str, Any]:
    """The Secret holding the AUTH token in the serving namespace, and the RayCluster's
    `gcsFaultToleranceOptions` that point the head at the store through it."""
    secret = k8s.core.v1.Secret(
        f"{name}-gcs-store",
        metadata=k8s.meta.v1.ObjectMetaArgs(name="ray-gcs-store", namespace=namespace),
        type="Opaque",
        string_data={GCS_SECRET_KEY: pulumi.Output.secret(connection.auth_token)},
        opts=opts,
    )
    return {
        "redisAddress": connection.address(),
        "redisPassword": {"valueFrom": {"secretKeyRef": {"name": secret.metadata.name, "key": GCS_SECRET_KEY}}},
    }
