"""Benchmark: the policy pack judging a large stack through the real analyzer protocol.

`python -m llm_pd_eks_tools.maint.bench_policies [--resources 10000]` builds a stack of N resources (GPU node groups
with their launch templates, placement groups, security groups and subnets, plus ConfigMaps and
Services), sends Configure, Analyze per resource and one AnalyzeStack, and prints the seconds each
phase took and the verdict count. Not a test: the numbers depend on the machine. The issue's bound
is that a 10,000-resource stack is judged at all, in minutes, not hours.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Optional

import yaml
from google.protobuf import struct_pb2

from llm_pd_eks.pulumi_sdk import analyzer_pb2
from llm_pd_eks_tools.core.cli import exit_with
from llm_pd_eks_tools.plan.preview.analyzer import PolicyPackServer

STACK, PROJECT = "bench", "llm-pd-eks"


def _resource(
    type_: str, name: str, props: dict, deps: Optional[dict[str, list[str]]] = None
) -> analyzer_pb2.AnalyzerResource:
    struct = struct_pb2.Struct()
    struct.update(props)
    deps = deps or {}
    return analyzer_pb2.AnalyzerResource(
        type=type_,
        name=name,
        urn=f"urn:pulumi:{STACK}::{PROJECT}::{type_}::{name}",
        properties=struct,
        dependencies=sorted({u for us in deps.values() for u in us}),
        propertyDependencies={k: analyzer_pb2.AnalyzerPropertyDependencies(urns=v) for k, v in deps.items()},
    )


def build_stack(count: int) -> list[analyzer_pb2.AnalyzerResource]:
    """About `count` resources: groups of 5 AWS resources (a compliant p4d node group) and Kubernetes
    objects in between."""
    out: list[analyzer_pb2.AnalyzerResource] = []
    i = 0
    while len(out) < count:
        subnet = _resource(
            "aws:ec2/subnet:Subnet",
            f"subnet-{i}",
            {
                "availabilityZone": "us-west-2a",
                "mapPublicIpOnLaunch": False,
                "vpcId": "vpc-1",
                "cidrBlock": f"10.{i % 250}.{i // 250 % 250}.0/24",
                "id": f"subnet-{i:08x}",
            },
        )
        pg = _resource("aws:ec2/placementGroup:PlacementGroup", f"pg-{i}", {"strategy": "cluster", "name": f"pg-{i}"})
        sg = _resource(
            "aws:ec2/securityGroup:SecurityGroup",
            f"sg-{i}",
            {
                "vpcId": "vpc-1",
                "id": f"sg-{i:08x}",
                "ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}],
                "egress": [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}],
            },
        )
        lt = _resource(
            "aws:ec2/launchTemplate:LaunchTemplate",
            f"lt-{i}",
            {
                "instanceType": "p4d.24xlarge",
                "id": f"lt-{i:08x}",
                "networkInterfaces": [
                    {
                        "networkCardIndex": c,
                        "deviceIndex": 0 if c == 0 else 1,
                        "interfaceType": "efa" if c == 0 else "efa-only",
                        "securityGroups": [f"sg-{i:08x}"],
                    }
                    for c in range(4)
                ],
                "metadataOptions": {"httpTokens": "required", "httpEndpoint": "enabled", "httpPutResponseHopLimit": 1},
                "placement": {"groupName": f"pg-{i}"},
            },
            {"placement": [pg.urn], "networkInterfaces": [sg.urn]},
        )
        ng = _resource(
            "aws:eks/nodeGroup:NodeGroup",
            f"ng-{i}",
            {
                "clusterName": "bench",
                "nodeGroupName": f"ng-{i}",
                "subnetIds": [f"subnet-{i:08x}"],
                "launchTemplate": {"id": f"lt-{i:08x}", "version": "1"},
                "scalingConfig": {"minSize": 2, "desiredSize": 2, "maxSize": 2},
            },
            {"subnetIds": [subnet.urn], "launchTemplate": [lt.urn]},
        )
        cm = _resource(
            "kubernetes:core/v1:ConfigMap",
            f"cm-{i}",
            {"metadata": {"name": f"cm-{i}", "namespace": "llm"}, "data": {"FI_PROVIDER": "efa"}},
        )
        svc = _resource(
            "kubernetes:core/v1:Service",
            f"svc-{i}",
            {"metadata": {"name": f"svc-{i}", "namespace": "llm"}, "spec": {"type": "ClusterIP"}},
        )
        out += [subnet, pg, sg, lt, ng, cm, svc]
        i += 1
    return out[:count]


def _dashboard(i: int, size: int) -> str:
    """Grafana-like dashboard JSON of about `size` characters that names `kind` and `apiVersion`."""
    panel: dict[str, Any] = {"type": "timeseries", "targets": [{"expr": f"rate(vllm:requests_total[{i % 5 + 1}m])"}]}
    panel["fieldConfig"] = {"defaults": {"custom": {"kind": "line", "apiVersion": "v1"}}}
    panels: list[dict[str, Any]] = []
    text = ""
    while len(text) < size:
        panels += [dict(panel, id=len(panels), title=f"panel {len(panels)}") for _ in range(50)]
        text = json.dumps({"title": f"dash-{i}", "panels": panels})
    return text


def _deployment(i: int, group: int) -> dict:
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.11.0",
        "command": ["vllm", "serve", "m", "--kv-transfer-config", json.dumps(_KV)],
        "env": [{"name": "FI_PROVIDER", "value": "efa"}],
        "resources": {"limits": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}},
    }
    selector = {"eks.amazonaws.com/nodegroup": f"ng-{group}"}  # its P/D pods on one group
    spec = {"template": {"spec": {"containers": [container], "nodeSelector": selector}}}
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"d-{i}", "namespace": "llm"}}
    return {**body, "spec": spec}


_KV = {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"backends": ["LIBFABRIC"]}}


def build_varied(count: int, dashboard_bytes: int = 2_350_000) -> list[analyzer_pb2.AnalyzerResource]:
    """About `count` resources of every family the pack reads: the AWS groups of `build_stack`, GPU
    Deployments, ConfigGroups carrying manifests as YAML text, and ten ConfigMaps sharing
    `dashboard_bytes` of dashboard JSON that names `kind` and `apiVersion`."""
    out = [
        _resource(
            "kubernetes:core/v1:ConfigMap",
            f"dash-{i}",
            {
                "metadata": {"name": f"dash-{i}", "namespace": "monitoring"},
                "data": {"d.json": _dashboard(i, dashboard_bytes // 10)},
            },
        )
        for i in range(10)
    ]
    aws = build_stack(count // 2)
    out += aws
    groups = max(1, sum(1 for r in aws if r.type == "aws:eks/nodeGroup:NodeGroup"))
    i = 0
    while len(out) < count:
        out.append(_resource("kubernetes:apps/v1:Deployment", f"d-{i}", _deployment(i, i % groups)))
        carried = _deployment(i + 1_000_000, i % groups)
        out.append(_resource("kubernetes:yaml/v2:ConfigGroup", f"cg-{i}", {"yaml": [yaml.safe_dump(carried)]}))
        i += 1
    return out[:count]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_policies", description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=10_000, help="stack size (default 10000)")
    parser.add_argument(
        "--shape",
        choices=("mixed", "varied"),
        default="mixed",
        help="mixed: AWS GPU groups, ConfigMaps, Services; varied: also GPU Deployments, ConfigGroups of YAML "
        "text and 2.35 MB of dashboard JSON in ConfigMaps",
    )
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    resources = build_stack(args.resources) if args.shape == "mixed" else build_varied(args.resources)
    t1 = time.monotonic()
    with PolicyPackServer(startup_timeout=120) as server:
        server.configure()
        t2 = time.monotonic()
        verdicts = [v for r in resources for v in server.analyze(r)]
        t3 = time.monotonic()
        verdicts += server.analyze_stack(resources)
        t4 = time.monotonic()
    by_policy: dict[str, int] = {}
    for verdict in verdicts:
        by_policy[verdict.policy] = by_policy.get(verdict.policy, 0) + 1
    print(
        f"{len(resources)} resources: build {t1 - t0:.1f}s, Analyze x{len(resources)} {t3 - t2:.1f}s, "
        f"AnalyzeStack {t4 - t3:.1f}s, {len(verdicts)} verdict(s) {by_policy or ''}"
    )
    return 0


if __name__ == "__main__":
    exit_with("bench_policies", main)
