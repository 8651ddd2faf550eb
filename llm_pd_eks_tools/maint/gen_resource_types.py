"""Write the pack's list of inert resource types (`make facts`) from the installed providers' schemas.

The pack judges a closed universe (policies/llm_pd_eks_policy/universe.py): a resource type is judged by
a rule, known inert, or refused as `unjudgeable-type`. "Inert" is a judgement stated here once, as a
reason per provider module, Kubernetes kind or single type; the type tokens come from the provider SDKs
pinned in requirements-dev.txt (pulumi-aws, pulumi-kubernetes, pulumi-eks register every resource token
of their schema in their package's `resource_modules`), so a new provider release adds its new tokens
to nothing: they stay refused until a line here names them. Types no installed SDK carries (CRDs of
other operators) are listed by token. Output: `policies/data/inert_types.txt`, one type a line,
`token<TAB>reason` or `token<TAB>unless=prop,prop<TAB>reason` (inert only while none of those
properties is set). tests/integration/test_policies_universe.py keeps the file equal to what this produces.
`--check` exits 1 when it is stale.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
from pathlib import Path
from typing import Optional

from llm_pd_eks_tools.core.cli import ROOT, exit_with
from llm_pd_eks_tools.maint.facts import sync

OUTPUT = ROOT / "policies" / "data" / "inert_types.txt"
PROVIDERS = ("pulumi_aws", "pulumi_kubernetes", "pulumi_eks")

_NOTHING = "launches no instance, runs no pod, opens no network path"
# AWS modules (`aws:<module>/...`) whose every resource is inert for what the pack guards: GPU
# capacity and the network that feeds it, the pods a vLLM engine runs in, exposure and secrets.
AWS_MODULES: dict[str, str] = {
    "acm": f"TLS certificates; {_NOTHING}",
    "budgets": f"spend budgets and alerts; {_NOTHING}",
    "cloudtrail": f"API audit trails; {_NOTHING}",
    "cloudwatch": f"metrics, logs, alarms and event rules' storage; {_NOTHING}",
    "costexplorer": f"cost reports; {_NOTHING}",
    "ecr": f"image repositories; {_NOTHING}",
    "iam": f"identities and permissions; {_NOTHING}",
    "kms": f"encryption keys; {_NOTHING}",
    "route53": f"DNS zones and records (names, not network paths); {_NOTHING}",
    "s3": f"object storage and its settings (encryption, versioning, access blocks); {_NOTHING}",
    "secretsmanager": f"secret storage (secrets belong there); {_NOTHING}",
    "sns": f"notification topics; {_NOTHING}",
    "sqs": f"message queues; {_NOTHING}",
}
# Single AWS / pulumi-eks / Pulumi types (`unless`: inert only while none of those inputs is set).
TYPES: dict[str, tuple[str, str]] = {
    "aws:autoscaling/tag:Tag": ("", f"a tag on an Auto Scaling group (autoscaler node templates); {_NOTHING}"),
    "aws:ec2/tag:Tag": ("", f"a tag on an EC2 resource; {_NOTHING}"),
    "aws:ec2/eip:Eip": (
        "instance,networkInterface,associateWithPrivateIp",
        "an address for a NAT gateway; one attached to an instance or ENI would make a node public",
    ),
    "aws:ec2/natGateway:NatGateway": ("", "egress-only address translation; accepts no inbound connection"),
    "aws:ec2/vpcEndpoint:VpcEndpoint": ("", "a private path from the VPC to an AWS service; opens nothing inbound"),
    "aws:ec2/keyPair:KeyPair": ("", f"an SSH public key; {_NOTHING}"),
    "aws:ec2/flowLog:FlowLog": ("", f"traffic logging; {_NOTHING}"),
    "aws:eks/addon:Addon": ("", "an EKS-managed add-on (AWS's own pods and images); runs no model workload"),
    "aws:eks/accessEntry:AccessEntry": ("", f"cluster API access for an IAM principal; {_NOTHING}"),
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": ("", f"cluster API permissions; {_NOTHING}"),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": ("", f"a pod's IAM role; {_NOTHING}"),
    "aws:ssm/parameter:Parameter": ("", f"a stored parameter; {_NOTHING}"),
    "aws:s3/bucket:Bucket": ("", f"object storage; {_NOTHING}"),
    "aws:s3/bucketV2:BucketV2": ("", f"object storage; {_NOTHING}"),
    "aws:elasticache/replicationGroup:ReplicationGroup": (
        "",
        "a managed cache (the Ray GCS store); launches no EC2 instance or pod, reachable only through its "
        "security group (judged)",
    ),
    "aws:elasticache/subnetGroup:SubnetGroup": ("", f"the subnets a cache may use; {_NOTHING}"),
    **{
        f"random:index/{kind[0].lower()}{kind[1:]}:{kind}": ("", f"a generated value kept in state; {_NOTHING}")
        for kind in (
            "RandomBytes",
            "RandomId",
            "RandomInteger",
            "RandomPassword",
            "RandomPet",
            "RandomShuffle",
            "RandomString",
            "RandomUuid",
        )
    },
    **{
        f"time:index/{kind.lower()}:{kind}": ("", f"a point in time or a pause kept in state; {_NOTHING}")
        for kind in ("Offset", "Rotating", "Sleep", "Static")
    },
    # An event target can start a command, an ECS task or a Batch job (on the GPU nodes too).
    "aws:cloudwatch/eventTarget:EventTarget": (
        "runCommandTargets,ecsTarget,batchTarget,sagemakerPipelineTarget,roleArn",
        "delivers an event to a function, queue or topic; one that runs commands, tasks or jobs launches work",
    ),
    "eks:index:VpcCniAddon": ("", "the VPC CNI add-on's settings; runs no model workload"),
    "eks:index:Addon": ("", "an EKS-managed add-on (AWS's own pods and images); runs no model workload"),
    "pulumi:pulumi:Stack": ("", "the stack itself; every resource in it is judged on its own"),
    "pulumi:pulumi:StackReference": ("", "reads another stack's outputs; where they are used is judged"),
    # Operators' CRDs the project installs (not in pulumi-kubernetes' schema).
    "kubernetes:monitoring.coreos.com/v1:PodMonitor": ("", f"a Prometheus scrape target; {_NOTHING}"),
    "kubernetes:monitoring.coreos.com/v1:ServiceMonitor": ("", f"a Prometheus scrape target; {_NOTHING}"),
    "kubernetes:monitoring.coreos.com/v1:PrometheusRule": ("", f"Prometheus alert and recording rules; {_NOTHING}"),
}
# Kubernetes kinds (every group/version pulumi-kubernetes has, and their `...Patch` forms).
K8S_KINDS: dict[str, str] = {
    "Namespace": f"a namespace; {_NOTHING}",
    "ServiceAccount": f"a pod identity; {_NOTHING}",
    "Role": f"RBAC permissions; {_NOTHING}",
    "RoleBinding": f"RBAC permissions; {_NOTHING}",
    "ClusterRole": f"RBAC permissions; {_NOTHING}",
    "ClusterRoleBinding": f"RBAC permissions; {_NOTHING}",
    "PodDisruptionBudget": "limits voluntary evictions; runs no pod",
    "HorizontalPodAutoscaler": "scales a workload the rules judge; runs no pod of its own",
    "StorageClass": f"how volumes are provisioned; {_NOTHING}",
    "PersistentVolumeClaim": f"a volume request; {_NOTHING}",
    "PersistentVolume": f"a volume; {_NOTHING}",
    "PriorityClass": "a scheduling priority; runs no pod",
    "ResourceQuota": "namespace resource limits; runs no pod",
    "NetworkPolicy": "restricts pod traffic; cannot open a path a Service does not",
    "CustomResourceDefinition": "defines a kind; objects of that kind are judged on their own",
    "IngressClass": "names an ingress controller; its IngressClassParams are judged",
    "CSIDriver": f"a storage driver's registration; {_NOTHING}",
    "Lease": f"a coordination lock; {_NOTHING}",
    "ValidatingWebhookConfiguration": "can only refuse objects, never change them",
    "ValidatingAdmissionPolicy": "can only refuse objects, never change them",
    "ValidatingAdmissionPolicyBinding": "can only refuse objects, never change them",
}


def provider_tokens() -> dict[str, list[str]]:
    """Every resource token each installed provider SDK registers (its `resource_modules`)."""
    out: dict[str, list[str]] = {}
    for package in PROVIDERS:
        init = Path(str(__import__(package).__file__)).read_text()
        match = re.search(r'resource_modules="""\n(.*?)\n"""', init, re.DOTALL)
        modules = json.loads(match.group(1)) if match else []
        out[package] = sorted({token for module in modules for token in module["classes"]})
    return out


def generate(tokens: Optional[dict[str, list[str]]] = None) -> str:
    tokens = provider_tokens() if tokens is None else tokens
    lines: dict[str, str] = {}
    for token in tokens.get("pulumi_aws", []):
        module = token.split(":")[1].split("/")[0]
        if module in AWS_MODULES:
            lines[token] = AWS_MODULES[module]
    for token in tokens.get("pulumi_kubernetes", []):
        kind = token.split(":")[-1]
        kind = kind[: -len("Patch")] if kind.endswith("Patch") else kind
        if kind in K8S_KINDS:
            lines[token] = K8S_KINDS[kind]
    known = {t for ts in tokens.values() for t in ts}
    for token, (unless, reason) in TYPES.items():
        if token.startswith(("aws:", "eks:")) and token not in known:
            continue  # not in this provider release
        lines[token] = f"unless={unless}\t{reason}" if unless else reason
    versions = ", ".join(f"{p.replace('_', '-')} {importlib.metadata.version(p.replace('_', '-'))}" for p in PROVIDERS)
    head = (
        f"# Resource types the pack knows to be inert, one a line: token<TAB>[unless=props<TAB>]reason.\n"
        f"# Generated by llm_pd_eks_tools/maint/gen_resource_types.py (make facts) from {versions}; do not edit.\n"
    )
    return head + "".join(f"{token}\t{lines[token]}\n" for token in sorted(lines))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gen_resource_types", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the pack's copy differs")
    return sync(generate(), (OUTPUT,), ROOT, parser.parse_args(argv).check)


if __name__ == "__main__":
    exit_with("gen_resource_types", main)
