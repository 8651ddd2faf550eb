"""Entry point the policy host runs (`python -m pulumi.policy <engine> policies/`): build the pack.

Constructing `PolicyPack` starts the analyzer server and blocks, so nothing else lives here; the
rules are in `llm_pd_eks_policy/` where tests can import them without starting a server.
"""

import gc

from pulumi_policy import EnforcementLevel, PolicyPack

from llm_pd_eks_policy import PACK_NAME, POLICIES

# The host decodes a resource's properties again for every policy (18 dicts and proxies a resource,
# ~180,000 for 10,000 resources), and keeps a stack's worth alive while a stack rule runs. With the
# collector's default thresholds the oldest generation is scanned again and again as they pile up:
# half of AnalyzeStack's time on 10,000 resources (`make bench-policies`). What the import built lives
# as long as the process: freeze it out of every scan, and collect young objects less often.
gc.freeze()
gc.set_threshold(100_000, 50, 1_000)

PolicyPack(
    name=PACK_NAME,
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=POLICIES,
    description="EFA GPU nodes in one AZ and one cluster placement group, NIXL over LIBFABRIC, no exposure",
)
