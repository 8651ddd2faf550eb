"""Entry point the policy host runs (`python -m pulumi.policy <engine> policies/`): build the pack.

Constructing `PolicyPack` starts the analyzer server and blocks, so nothing else lives here; the
rules are in `llm_pd_eks_policy/` where tests can import them without starting a server.
"""

from pulumi_policy import EnforcementLevel, PolicyPack

from llm_pd_eks_policy import PACK_NAME, POLICIES

PolicyPack(
    name=PACK_NAME,
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=POLICIES,
    description="EFA GPU nodes in one AZ and one cluster placement group, NIXL over LIBFABRIC, no exposure",
)
