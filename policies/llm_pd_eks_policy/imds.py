"""IMDSv2 with a small hop limit on every launch path: launch templates, instances, launch
configurations and Karpenter EC2NodeClasses (IMDSv1, or a hop limit of 2, hands the node role's
credentials to any pod on the node).
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs

from .common import (
    EC2_INSTANCE,
    LAUNCH_CONFIGURATION,
    LAUNCH_TEMPLATE,
    as_int,
    config_with_defaults,
    dig,
    is_unknown,
    plain,
    resource_policy,
)

# -- 4. IMDSv2 and the hop limit ------------------------------------------------------------------
IMDS_CONFIG: dict[str, dict[str, Any]] = {
    "maxHopLimit": {
        "type": "integer",
        "minimum": 1,
        "description": "largest httpPutResponseHopLimit allowed (1 keeps pods off the node's IMDS credentials)",
        "default": 1,
    },
}


# Karpenter's EC2NodeClass keeps them under spec.metadataOptions, with Karpenter's defaults
# (karpenter.sh docs, EC2NodeClass: httpTokens required, httpPutResponseHopLimit 1).
EC2_NODE_CLASSES = ("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass", "kubernetes:karpenter.k8s.aws/v1beta1:EC2NodeClass")


def _imdsv2(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type not in (LAUNCH_TEMPLATE, EC2_INSTANCE, LAUNCH_CONFIGURATION, *EC2_NODE_CLASSES):
        return
    props = plain(args.props)
    if args.resource_type in EC2_NODE_CLASSES:
        given = dig(props, "spec", "metadataOptions")
        given = given if isinstance(given, dict) else {}
        props = {"metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1, **given}}
    if (
        args.resource_type == EC2_INSTANCE
        and dig(props, "launchTemplate") is not None
        and dig(props, "metadataOptions") is None
    ):
        # No metadataOptions of its own: EC2 launches it with its launch template's, and this rule
        # judges that template as a resource of its own (a template outside the stack of a GPU
        # instance is refused by gpu-references-in-stack).
        return
    endpoint = dig(props, "metadataOptions", "httpEndpoint")
    tokens = dig(props, "metadataOptions", "httpTokens")
    hops = dig(props, "metadataOptions", "httpPutResponseHopLimit")
    if is_unknown(endpoint) or endpoint == "disabled":
        return
    kind = args.resource_type.split(":")[-1]
    problems = []
    if not is_unknown(tokens) and tokens != "required":
        shown = f"'{tokens}'" if tokens else "unset (EC2 then defaults to 'optional')"
        problems.append(f"metadataOptions.httpTokens is {shown}, so IMDSv1 stays open to SSRF-style credential theft")
    limit = int(config_with_defaults(args, IMDS_CONFIG)["maxHopLimit"])
    value = as_int(hops)
    if not is_unknown(hops) and (hops is None or value is None or value > limit):
        shown = "unset (EC2 takes the AMI's or the service's default, which can be 2)" if hops is None else repr(hops)
        problems.append(
            f"metadataOptions.httpPutResponseHopLimit is {shown}; above {limit} every pod on "
            f"the node can reach the node role's credentials through IMDS"
        )
    if problems:
        report(
            f"{kind} '{args.name}': {'; '.join(problems)}. Fix: metadataOptions={{httpTokens: 'required', "
            f"httpEndpoint: 'enabled', httpPutResponseHopLimit: 1}}."
        )


imdsv2_required = resource_policy(
    name="launch-template-imdsv2",
    description="Launch templates, instances, launch configurations and Karpenter EC2NodeClasses require IMDSv2 "
    "with a small hop limit.",
    validate=_imdsv2,
    config=IMDS_CONFIG,
)

POLICIES = [imdsv2_required]
