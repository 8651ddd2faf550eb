"""The cluster's GPU-pod admission policy: a ValidatingAdmissionPolicy and its binding
(admissionregistration.k8s.io/v1, GA since Kubernetes 1.30; the stacks run 1.35).

The API server evaluates it on every pod CREATE (and every UPDATE that changes the spec) in every
namespace but the exempt ones, whatever made the pod; the rules and why are in admission_cel.py. The
binding's actions follow `admissionPolicy.mode`: Audit (the failure lands in the API server's audit
log), Warn + Audit, or Deny + Audit. `failurePolicy: Fail`: an expression that cannot be evaluated
counts as a failure, so it is audited in audit mode and refuses the pod in deny mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.admissionregistration import v1 as adm

from .admission_cel import POLICY_NAME, VALIDATION_ACTIONS, PolicyCel, namespace_selector_expressions, policy_cel
from .config import StackConfig
from .config.admission import AdmissionPolicyConfig


@dataclass(frozen=True)
class GpuPodAdmissionArgs:
    """Inputs of `GpuPodAdmission`."""

    config: AdmissionPolicyConfig
    """The `admissionPolicy` section: audit, warn or deny; the exempt namespaces."""
    gpu_instance_type: str
    """The GPU node group's instance type: the EFA share of a GPU pod not pinned to another type."""
    provider: k8s.Provider
    """The cluster's Kubernetes provider."""
    depends_on: Sequence[pulumi.Resource] = ()
    """What must exist first (the API reachable)."""


def admission_args(config: StackConfig, provider: k8s.Provider, api_ready: pulumi.Resource) -> GpuPodAdmissionArgs:
    """The stack's `admissionPolicy` and GPU type as the component's inputs, registered once the API answers."""
    return GpuPodAdmissionArgs(config.admission_policy, config.gpu_nodes.instance_type, provider, [api_ready])


def policy_spec(cel: PolicyCel, exempt_namespaces: list[str]) -> adm.ValidatingAdmissionPolicySpecArgs:
    """The policy's spec: pods CREATE/UPDATE outside the exempt namespaces, then the CEL."""
    return adm.ValidatingAdmissionPolicySpecArgs(
        failure_policy="Fail",
        match_constraints=adm.MatchResourcesArgs(
            resource_rules=[
                adm.NamedRuleWithOperationsArgs(
                    api_groups=[""], api_versions=["v1"], operations=["CREATE", "UPDATE"], resources=["pods"]
                )
            ],
            namespace_selector=k8s.meta.v1.LabelSelectorArgs(
                match_expressions=[
                    k8s.meta.v1.LabelSelectorRequirementArgs(**expr)
                    for expr in namespace_selector_expressions(exempt_namespaces)
                ]
            ),
        ),
        match_conditions=[adm.MatchConditionArgs(name=c.name, expression=c.expression) for c in cel.match_conditions],
        variables=[adm.VariableArgs(name=v.name, expression=v.expression) for v in cel.variables],
        validations=[
            adm.ValidationArgs(expression=r.expression, message=f"{r.name}: {r.message}", reason=r.reason)
            for r in cel.validations
        ],
    )


class GpuPodAdmission(pulumi.ComponentResource):
    """A ValidatingAdmissionPolicy judging every pod that asks for GPUs, and its binding."""

    policy: adm.ValidatingAdmissionPolicy
    binding: adm.ValidatingAdmissionPolicyBinding

    def __init__(self, name: str, args: GpuPodAdmissionArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("llm-pd-eks:index:GpuPodAdmission", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.depends_on))
        self.policy = adm.ValidatingAdmissionPolicy(
            f"{name}-policy",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=POLICY_NAME),
            spec=policy_spec(policy_cel(args.gpu_instance_type), list(args.config.exempt_namespaces)),
            opts=child,
        )
        self.binding = adm.ValidatingAdmissionPolicyBinding(
            f"{name}-binding",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=POLICY_NAME),
            spec=adm.ValidatingAdmissionPolicyBindingSpecArgs(
                policy_name=POLICY_NAME, validation_actions=list(VALIDATION_ACTIONS[args.config.mode])
            ),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.policy])),
        )
        self.register_outputs({"policyName": self.policy.metadata.name, "bindingName": self.binding.metadata.name})
