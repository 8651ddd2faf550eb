"""Run the Pulumi program under the mock runtime and record every registration.

One harness for the tests, the policy checks and the offline preview. The stack's config reaches
the program exactly as the engine hands it over: `project:key` -> string (objects as JSON text),
secure values replaced by a marked placeholder and listed as secret keys.

A mock monitor sees what the engine's monitor would: type, name, parent, dependencies, property
dependencies, inputs (as the protobuf Struct, secrets and unknowns still marked) and the resource
options; not what the engine adds itself (default providers, Check-ed inputs, full URN chains) nor
what a remote component registers (llm_pd_eks_tools/plan/preview/remote_children.py puts pulumi-eks's
back). docs/preview.md lists every difference.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pulumi.runtime import Mocks

from llm_pd_eks_tools.core.cli import ROOT
from llm_pd_eks_tools.core.stack import load_stack_config
from llm_pd_eks_tools.core.stackfile import PROJECT


@dataclass
class Registration:
    """One RegisterResource call as the engine receives it."""

    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    protect: bool
    provider: str
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    inputs: dict[str, Any]  # deserialized; secrets unwrapped
    inputs_struct: Any  # google.protobuf.Struct, secrets and unknowns still marked
    id: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    ignore_changes: list[str] = field(default_factory=list)  # property paths `pulumi up` leaves alone
    delete_before_replace: bool = False  # a replacement deletes this resource before creating the new one
    retain_on_delete: bool = False  # `destroy` removes it from the stack but leaves it in the cloud
    delete_before_replace_defined: bool = False  # deleteBeforeReplace was given (true or false)
    additional_secret_outputs: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)  # the URNs its aliases name, as the engine resolves them
    custom_timeouts: dict[str, float] = field(default_factory=dict)  # create/update/delete, in seconds
    version: str = ""  # the provider version the registration asks for ("" where the program's SDK's)
    recorded_by: str = ""  # where a registration the mocks cannot produce came from ("" for the program's)


@dataclass
class ProgramRun:
    """What one run of the program registered, in registration order."""

    stack: str
    resources: list[Registration]
    stack_outputs: dict[str, Any]
    secret_outputs: set[str] = field(default_factory=set)  # stack outputs the engine would store encrypted
    mock_values: set[str] = field(default_factory=set)  # ids and outputs the mocks made up (not AWS's)

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name_contains: str = "") -> Registration:
        found = [r for r in self.of_type(type_) if name_contains in r.name]
        if len(found) != 1:
            raise AssertionError(f"expected one {type_} named *{name_contains}*, found {[r.name for r in found]}")
        return found[0]

    def by_urn(self, urn: str) -> Registration:
        for r in self.resources:
            if r.urn == urn:
                return r
        raise KeyError(urn)


MOCK_ACCOUNT = "123456789012"


def _hex_id(*parts: str, length: int = 16) -> str:
    """A stable lowercase-hex suffix, the shape AWS uses in `sg-0…`, `lt-0…`, `cr-0…` ids."""
    import hashlib

    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


def _region() -> str:
    from pulumi import Config

    return Config("aws").get("region") or "us-west-2"


def eks_cluster_ids(name: str) -> dict[str, str]:
    """The distinct ids a real pulumi-eks `Cluster` named `name` would report.

    - `pulumiEksClusterSecurityGroupId`: pulumi-eks's OWN control-plane group (its output
      `clusterSecurityGroupId`), which admits 443 only from pulumi-eks's node group;
    - `eksClusterSecurityGroupId`: the group EKS itself creates (`eksCluster.vpcConfig.clusterSecurityGroupId`),
      attached to the control-plane ENIs and, by EKS, to managed nodes without custom interfaces;
    - `nodeSecurityGroupId`: pulumi-eks's node group SG (used by none of this program's nodes).
    Distinct on purpose: a test that wires the wrong one must fail.
    """
    oidc_id = _hex_id(name, "oidc", length=32).upper()
    issuer = f"oidc.eks.{_region()}.amazonaws.com/id/{oidc_id}"
    return {
        "pulumiEksClusterSecurityGroupId": f"sg-0{_hex_id(name, 'pulumi-eks-cluster-sg')}",
        "eksClusterSecurityGroupId": f"sg-0{_hex_id(name, 'eks-cluster-sg')}",
        "nodeSecurityGroupId": f"sg-0{_hex_id(name, 'pulumi-eks-node-sg')}",
        "oidcIssuer": issuer,
        "oidcProviderUrl": f"https://{issuer}",
        "oidcProviderArn": f"arn:aws:iam::{MOCK_ACCOUNT}:oidc-provider/{issuer}",
        "eksClusterUrn": f"urn:pulumi:mock::{PROJECT}::aws:eks/cluster:Cluster::{name}-eksCluster",
    }


def _eks_cluster_state(name: str, inputs: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    """State of the `aws.eks.Cluster` inside pulumi-eks, as the AWS provider reports it."""
    return {
        "name": inputs.get("name") or name,
        "arn": f"arn:aws:eks:{_region()}:{MOCK_ACCOUNT}:cluster/{inputs.get('name') or name}",
        "version": inputs.get("version"),
        "vpcConfig": {
            "clusterSecurityGroupId": ids["eksClusterSecurityGroupId"],
            "securityGroupIds": [ids["pulumiEksClusterSecurityGroupId"]],
            "subnetIds": inputs.get("privateSubnetIds", []),
            "endpointPrivateAccess": inputs.get("endpointPrivateAccess", False),
            "endpointPublicAccess": inputs.get("endpointPublicAccess", True),
            "vpcId": inputs.get("vpcId"),
        },
        "identities": [{"oidcs": [{"issuer": ids["oidcProviderUrl"]}]}],
    }


def _resource_ref(urn: str, id_: str) -> dict[str, Any]:
    """A resource reference as the engine sends it (what a component's resource-typed output is)."""
    from llm_pd_eks.pulumi_sdk import rpc

    return {rpc._special_sig_key: rpc._special_resource_sig, "urn": urn, "id": id_, "packageVersion": ""}


def _fake_outputs(type_: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """Outputs a provider would compute, so the program's applies have something to work with."""
    arn = f"arn:aws:mock:::{type_.split(':')[-1].lower()}/{name}"
    extra: dict[str, Any] = {"arn": arn}
    if type_ == "eks:index:Cluster":
        kubeconfig = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": name}]}
        ids = eks_cluster_ids(name)
        skipped = bool(inputs.get("skipDefaultSecurityGroups"))
        extra.update(
            kubeconfig=kubeconfig,
            kubeconfigJson=json.dumps(kubeconfig),
            # skipped, pulumi-eks creates neither of its groups and both outputs are EKS's own group
            # (pulumi/pulumi-eks v4.3.0 nodejs/eks/cluster/cluster.ts)
            clusterSecurityGroupId=ids["eksClusterSecurityGroupId" if skipped else "pulumiEksClusterSecurityGroupId"],
            nodeSecurityGroupId=ids["eksClusterSecurityGroupId" if skipped else "nodeSecurityGroupId"],
            oidcProviderArn=ids["oidcProviderArn"],
            oidcProviderUrl=ids["oidcProviderUrl"],
            oidcIssuer=ids["oidcIssuer"],
            eksCluster=_resource_ref(ids["eksClusterUrn"], inputs.get("name") or name),
        )
    elif type_ == "aws:ec2/launchTemplate:LaunchTemplate":
        extra["latestVersion"] = 1
    elif type_ == "aws:eks/nodeGroup:NodeGroup":
        ng_name = inputs.get("nodeGroupName") or f"{name}-ng"
        extra["nodeGroupName"] = ng_name
        # EKS names the group's Auto Scaling group eks-<nodegroup>-<uuid>.
        uuid = _hex_id(name, "asg", length=32)
        asg = f"eks-{ng_name}-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:32]}"
        extra["resources"] = [{"autoscalingGroups": [{"name": asg}], "remoteAccessSecurityGroupId": ""}]
    elif type_ == "aws:ec2/placementGroup:PlacementGroup":
        extra["name"] = inputs.get("name") or name
    elif type_ == "aws:elasticache/replicationGroup:ReplicationGroup":
        extra["primaryEndpointAddress"] = f"master.{inputs.get('replicationGroupId') or name}.mock.cache.amazonaws.com"
    elif type_ == "random:index/randomPassword:RandomPassword":
        extra["result"] = "mock" + _hex_id(name, length=32)
    elif type_ == "aws:iam/role:Role":
        extra["arn"] = f"arn:aws:iam::{MOCK_ACCOUNT}:role/{inputs.get('name') or name}"
    return {**extra, **inputs}


def _resource_id(type_: str, name: str) -> str:
    """Realistic ids where the program or the tests read them (security groups), `<name>-id` elsewhere."""
    if type_ == "aws:ec2/securityGroup:SecurityGroup":
        return f"sg-0{_hex_id(name)}"
    return f"{name}-id"


class _Mocks(Mocks):
    """Resource ids are `<name>-id` (security groups `sg-0…`); outputs echo the inputs plus computed fields."""

    monitor: Any = None  # the MockMonitor, set once it exists (resource references resolve through it)

    def __init__(self, first_preview: bool = False) -> None:
        super().__init__()
        self.made_up: set[str] = set()  # every id and computed output returned, so reports can mark them
        self.first_preview = first_preview

    def new_resource(self, args):  # MockResourceArgs
        if not args.custom and "$" not in args.typ and args.typ.split(":")[0] not in ("eks", "kubernetes"):
            return "", {}
        if self.first_preview:
            # Nothing exists yet: a provider's preview echoes the inputs and leaves the id and every
            # computed output unknown; a remote component's outputs all come from such resources.
            return "", (dict(args.inputs) if args.custom else {})
        outputs = _fake_outputs(args.typ, args.name, args.inputs)
        if args.typ == "eks:index:Cluster" and self.monitor is not None:
            # pulumi-eks's `eksCluster` output is a reference to its inner aws.eks.Cluster; the SDK
            # resolves it with the engine's getResource, which the mock monitor answers from here.
            from llm_pd_eks.pulumi_sdk import MockMonitor

            ids = eks_cluster_ids(args.name)
            state = _eks_cluster_state(args.name, args.inputs, ids)
            self.monitor.resources[ids["eksClusterUrn"]] = MockMonitor.ResourceRegistration(
                ids["eksClusterUrn"], state["name"], state
            )
        resource_id = _resource_id(args.typ, args.name)
        self.made_up.add(resource_id)
        self.made_up.update(v for k, v in outputs.items() if k not in args.inputs and isinstance(v, str))
        return resource_id, outputs

    def call(self, args):  # MockCallArgs
        if args.token == "aws:index/getRegion:getRegion":
            return {"name": "us-west-2", "region": "us-west-2"}
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": "123456789012", "arn": "arn:aws:iam::123456789012:user/mock", "userId": "mock"}
        if args.token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com"}
        return {}

    def register_transform(self, transform):  # pragma: no cover - no transforms in this program
        pass

    def register_invoke_transform(self, transform):  # pragma: no cover
        pass


def duration_seconds(value: str) -> float:
    """A Go duration as the engine parses customTimeouts ("10m", "1h30m", "90s") -> seconds."""
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    for char in value:
        if char.isdigit() or char == ".":
            number += char
        elif char in units and number:
            total, number = total + float(number) * units[char], ""
        else:
            raise ValueError(f"{value!r} is not a duration such as '10m'")
    if number:
        raise ValueError(f"{value!r} has a number without a unit")
    return total


def _alias_urns(request: Any, urn: str) -> list[str]:
    """The URNs a registration's aliases name, resolved as the engine does: each field of an alias
    defaults to the resource's own; `noParent` drops the parent's types, `parentUrn` replaces them."""
    stack_part, project_part, types, name = urn.split("::")
    stack, project, own_type = stack_part.split(":")[-1], project_part, types.split("$")[-1]
    urns = list(request.aliasURNs)
    for alias in request.aliases:
        if alias.WhichOneof("alias") == "urn":
            urns.append(alias.urn)
            continue
        spec = alias.spec
        kind = spec.WhichOneof("parent")
        if kind == "noParent" and spec.noParent:
            chain = ""
        elif kind == "parentUrn":
            # the root stack's children carry no parent type (the stack is in no URN's chain)
            parent_types = [*spec.parentUrn.split("::"), "", "", ""][2]
            chain = "" if parent_types in ("", "pulumi:pulumi:Stack") else parent_types + "$"
        else:
            chain = "$".join(types.split("$")[:-1]) + "$" if "$" in types else ""
        where = f"urn:pulumi:{spec.stack or stack}::{spec.project or project}"
        urns.append(f"{where}::{chain}{spec.type or own_type}::{spec.name or name}")
    return urns


def _timeouts(request: Any) -> dict[str, float]:
    """customTimeouts as the engine hands them to an analyzer: seconds, parsed from the SDK's strings."""
    if not request.HasField("customTimeouts"):
        return {}
    given = {k: getattr(request.customTimeouts, k) for k in ("create", "update", "delete")}
    return {k: duration_seconds(v) for k, v in given.items() if v}


def _make_monitor(mocks: _Mocks, recorded: list[Registration], stack_outputs: dict[str, Any], secret_outputs: set[str]):
    from google.protobuf import struct_pb2

    from llm_pd_eks.pulumi_sdk import MockMonitor, rpc

    class RecordingMonitor(MockMonitor):
        def RegisterResource(self, request):
            response = super().RegisterResource(request)
            if request.type == "pulumi:pulumi:Stack":
                return response
            struct = struct_pb2.Struct()
            struct.CopyFrom(request.object)
            recorded.append(
                Registration(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    parent=request.parent,
                    custom=bool(request.custom),
                    protect=bool(request.protect) if request.HasField("protect") else False,
                    provider=request.provider,
                    dependencies=list(request.dependencies),
                    property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
                    inputs=rpc.deserialize_properties(request.object),
                    inputs_struct=struct,
                    id=response.id,
                    ignore_changes=list(request.ignoreChanges),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    retain_on_delete=bool(request.retainOnDelete),
                    delete_before_replace_defined=bool(request.deleteBeforeReplaceDefined),
                    additional_secret_outputs=list(request.additionalSecretOutputs),
                    aliases=_alias_urns(request, response.urn),
                    custom_timeouts=_timeouts(request),
                    version=request.version,
                )
            )
            return response

        def RegisterResourceOutputs(self, request):
            if request.urn.split("::")[2] == "pulumi:pulumi:Stack":
                stack_outputs.update(rpc.deserialize_properties(request.outputs, keep_unknowns=True))
                for key, value in request.outputs.fields.items():
                    if (
                        value.HasField("struct_value")
                        and value.struct_value.fields.get(rpc._special_sig_key)
                        and value.struct_value.fields[rpc._special_sig_key].string_value == rpc._special_secret_sig
                    ):
                        secret_outputs.add(key)
            return super().RegisterResourceOutputs(request)

    return RecordingMonitor(mocks)


def run_program(
    stack: str,
    config: Optional[dict[str, str]] = None,
    secret_keys: Optional[list[str]] = None,
    root: Path = ROOT,
    first_preview: bool = False,
) -> ProgramRun:
    """Run `<root>/__main__.py` for `stack` under mocks, as a preview (dry run), and record it.

    `config` defaults to the stack's Pulumi.<stack>.yaml. Exceptions from the program propagate.
    `first_preview`: no resource exists yet, so every id and computed output is unknown, as in the
    first `pulumi preview` of a new stack; otherwise the mocks report ids and outputs, as a preview
    of a stack whose resources exist (its inputs known).
    """
    import pulumi

    from llm_pd_eks.pulumi_sdk import run_in_stack, runtime_config, settings, sync_await

    if config is None:
        config, secret_keys = load_stack_config(stack, root)
    recorded: list[Registration] = []
    stack_outputs: dict[str, Any] = {}
    mocks = _Mocks(first_preview=first_preview)
    secret_outputs: set[str] = set()
    monitor = _make_monitor(mocks, recorded, stack_outputs, secret_outputs)
    mocks.monitor = monitor

    settings.reset_options(project=PROJECT, stack=stack, preview=True)
    saved_env = {k: os.environ.pop(k) for k in ("PULUMI_CONFIG", "PULUMI_CONFIG_SECRET_KEYS") if k in os.environ}
    os.environ["PULUMI_CONFIG"] = json.dumps(config)
    os.environ["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(list(secret_keys or []))
    runtime_config.set_all_config(dict(config), list(secret_keys or []))
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=True, monitor=monitor)
    settings.ROOT.set(None)  # run_in_stack makes the root Stack, as the language host does
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:

        def program() -> None:
            runpy.run_path(str(root / "__main__.py"), run_name="__main__")

        sync_await(run_in_stack(program))
    except BaseException as exc:
        exc.registrations = recorded  # type: ignore[attr-defined]  # what got registered before the failure
        raise
    finally:
        for k in ("PULUMI_CONFIG", "PULUMI_CONFIG_SECRET_KEYS"):
            os.environ.pop(k, None)
        os.environ.update(saved_env)
    outputs_by_urn = {urn: reg.state for urn, reg in monitor.resources.items()}
    for r in recorded:
        r.outputs = outputs_by_urn.get(r.urn, {})
    return ProgramRun(
        stack=stack,
        resources=recorded,
        stack_outputs=stack_outputs,
        secret_outputs=secret_outputs,
        mock_values=set(mocks.made_up),
    )


def recording_monitor(recorded: list[Registration]) -> Any:
    """The preview's mock monitor on its own (a `MockMonitor` with this module's outputs), appending
    every registration to `recorded`: for serving the resource-monitor protocol to another process."""
    mocks = _Mocks()
    monitor = _make_monitor(mocks, recorded, {}, set())
    mocks.monitor = monitor
    return monitor
