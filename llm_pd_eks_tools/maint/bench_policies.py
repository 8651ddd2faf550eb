"""Benchmark: the policy pack judging a large stack through the real analyzer protocol.

`python -m llm_pd_eks_tools.maint.bench_policies [--resources 10000] [--shape varied]` builds a stack of N
resources (GPU node groups with their launch templates, placement groups, security groups and
subnets, plus ConfigMaps and Services; `varied` adds GPU Deployments, ConfigGroups of YAML text and
dashboards), sends Configure, Analyze per resource and one AnalyzeStack, and prints each phase's wall
seconds, the analyzer process's CPU seconds and the verdict count. Then it runs the same stack
through the control: a pack of the same policies, by name and kind, whose rules do nothing. What
the control takes is the floor no rule can lower: the gRPC exchange of each call (client and
server) and pulumi-policy decoding a request's properties again for every policy. Not a test: the
numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml
from google.protobuf import struct_pb2

from llm_pd_eks.pulumi_sdk import analyzer_pb2
from llm_pd_eks_tools.core.cli import exit_with
from llm_pd_eks_tools.plan.preview.analyzer import POLICY_PACK_DIR, PolicyPackServer

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


# The control pack: the real pack's policies, same names and kinds, each rule a no-op.
_CONTROL_PACK = """
import gc, sys
sys.path.insert(0, {pack!r})
from pulumi_policy import EnforcementLevel, PolicyPack, ResourceValidationPolicy, StackValidationPolicy
from llm_pd_eks_policy import POLICIES

gc.freeze()
gc.set_threshold(100_000, 50, 1_000)


def nothing(args, report):
    return None


PolicyPack(
    name="control",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=[
        (ResourceValidationPolicy if isinstance(p, ResourceValidationPolicy) else StackValidationPolicy)(
            name=p.name, description=p.description, validate=nothing
        )
        for p in POLICIES
    ],
)
"""


@dataclass(frozen=True)
class Timing:
    """One pack's run over the stack: wall seconds of each phase, the analyzer's CPU seconds."""

    analyze_s: float
    analyze_cpu_s: float
    stack_s: float
    stack_cpu_s: float
    verdicts: dict[str, int]

    def line(self, label: str) -> str:
        total, cpu = self.analyze_s + self.stack_s, self.analyze_cpu_s + self.stack_cpu_s
        return (
            f"{label}: {total:.1f}s wall (Analyze {self.analyze_s:.1f}s, AnalyzeStack {self.stack_s:.1f}s), "
            f"analyzer CPU {cpu:.1f}s (Analyze {self.analyze_cpu_s:.1f}s, AnalyzeStack {self.stack_cpu_s:.1f}s)"
        )


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat: utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def judge(resources: list[analyzer_pb2.AnalyzerResource], pack_dir: Path = POLICY_PACK_DIR) -> Timing:
    with PolicyPackServer(pack_dir=pack_dir, startup_timeout=120) as server:
        server.configure()
        pid = server.pid
        c0, t0 = _cpu_s(pid), time.monotonic()
        verdicts = [v for r in resources for v in server.analyze(r)]
        c1, t1 = _cpu_s(pid), time.monotonic()
        verdicts += server.analyze_stack(resources)
        c2, t2 = _cpu_s(pid), time.monotonic()
    by_policy: dict[str, int] = {}
    for verdict in verdicts:
        by_policy[verdict.policy] = by_policy.get(verdict.policy, 0) + 1
    return Timing(t1 - t0, c1 - c0, t2 - t1, c2 - c1, by_policy)


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
    parser.add_argument("--no-control", action="store_true", help="skip the control run (the host's floor)")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    resources = build_stack(args.resources) if args.shape == "mixed" else build_varied(args.resources)
    print(f"{len(resources)} resources ({args.shape}) built in {time.monotonic() - t0:.1f}s", flush=True)
    pack = judge(resources)
    print(pack.line("pack"), f"{sum(pack.verdicts.values())} verdict(s) {pack.verdicts or ''}".rstrip(), flush=True)
    if not args.no_control:
        with tempfile.TemporaryDirectory(prefix="bench-control-") as folder:
            control_dir = Path(folder)
            (control_dir / "PulumiPolicy.yaml").write_text("runtime: python\n")
            (control_dir / "__main__.py").write_text(_CONTROL_PACK.format(pack=str(POLICY_PACK_DIR)))
            control = judge(resources, control_dir)
        print(control.line("control (same policies, rules that do nothing)"))
        rules = pack.analyze_cpu_s + pack.stack_cpu_s - control.analyze_cpu_s - control.stack_cpu_s
        print(f"the rules' own share: {rules:.1f}s of analyzer CPU")
    return 0


if __name__ == "__main__":
    exit_with("bench_policies", main)
