"""The bootstrap program: what a team sets up once, before the main program's first `pulumi up`.

AWS: the GitHub Actions OIDC provider; per stack a deploy role; per account a read-only preview
role and, where review stacks deploy, a review role; the Pulumi ESC OIDC provider and its trust on
the deploy roles (a person's `esc run llm-pd-eks/<stack>-aws`). Their policies are derived from the
resource types the main program's plans hold (permissions.py; tests/stack/test_bootstrap.py keeps the two
in step) and their session length from the up budget (llm_pd_eks_tools/plan/up_budget.py).
Pulumi Cloud (pulumi_pulumiservice): the teams, their stack and environment permissions, and the
GitHub issuer's token policies. GitHub (pulumi_github): the environments with their branch policies
and reviewers, the role variables, and the OIDC subject template that puts the branch in `sub`.
Its own project (bootstrap/Pulumi.yaml) and dependencies (bootstrap/requirements.txt).
"""
