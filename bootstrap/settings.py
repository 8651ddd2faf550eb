"""The bootstrap stack's config (`llm-pd-eks-bootstrap:*`), validated strictly, every problem at once."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

PROJECT = "llm-pd-eks"  # the main program's project: its stacks, ESC environments and team names
MAIN_BRANCH = "main"  # the only branch deploy and prod-preview jobs run from (deploy.yml: push to main)
# Stacks previewed in their own `<stack>-preview` environment before their up, never from a pull
# request (deploy.yml: `preview-first`); every other stack is previewed on pull requests.
PREVIEW_FIRST_STACKS = ("prod",)
# The longest `pulumi up` plus the deletes after it and the job's steps, in minutes
# (`python -m llm_pd_eks_tools.plan.up_budget`): the deploy and review roles' MaxSessionDuration, the
# workflows' job limits and credentials. tests/stack/test_bootstrap.py keeps it equal to the tool's figure.
UP_BUDGET_MINUTES = 360
PREVIEW_SESSION_MINUTES = 60  # pulumi-preview.yml and the preview job: 60-minute jobs


class BootstrapConfig(BaseModel):
    """One bootstrap stack: one AWS account, the main program's stacks that deploy into it."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False, frozen=True)

    github_repository: str = Field(
        pattern=r"^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$", description="The repository the workflows run in, owner/name."
    )
    pulumi_organization: str = Field(min_length=1, description="The Pulumi Cloud organization holding the stacks.")
    stacks: list[str] = Field(
        default_factory=list, description="The main program's stacks whose deploy role lives in this AWS account."
    )
    review_stacks: bool = Field(default=False, description="Review stacks (pr-<N>) deploy into this account.")
    prod_reviewers: list[int] = Field(
        default_factory=list, description="GitHub user ids that must approve a prod deploy (environment reviewers)."
    )
    pulumi_token_type: Literal["team", "organization"] = Field(
        default="team",
        description="team: a team token per job (Enterprise and Business Critical editions); organization: "
        "editions without team tokens (pull-request previews and review stacks are then off).",
    )
    manage_pulumi_cloud: bool = Field(default=True, description="Create the Pulumi Cloud side here (pulumiservice).")
    manage_github: bool = Field(default=True, description="Create the GitHub side here (pulumi_github).")
    primary: bool = Field(
        default=True,
        description="This stack holds the organization's and repository's singletons: the Pulumi OIDC issuer "
        "and its policies, the repository's OIDC subject template and variables. Exactly one bootstrap stack "
        "(of several AWS accounts) sets it.",
    )
    all_stacks: list[str] = Field(
        default_factory=list,
        description="On the primary stack, every main-program stack of every account (default: stacks): the "
        "issuer's policies name their teams.",
    )
    github_oidc_provider_arn: Optional[str] = Field(
        default=None, description="An existing token.actions.githubusercontent.com provider (one per account)."
    )
    pulumi_oidc_provider_arn: Optional[str] = Field(
        default=None, description="An existing api.pulumi.com/oidc provider (one per account)."
    )

    @model_validator(mode="after")
    def _coherent(self) -> "BootstrapConfig":
        problems = []
        if not self.stacks and not self.review_stacks:
            problems.append("stacks is empty and reviewStacks is false: nothing would deploy into this account")
        if "prod" in self.stacks and self.manage_github and not self.prod_reviewers:
            problems.append("stacks holds prod: prodReviewers must name who approves its deploys")
        if self.review_stacks and self.pulumi_token_type == "organization":
            problems.append("reviewStacks needs team tokens: an organization token would let PR code read every stack")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def every_stack(self) -> list[str]:
        return list(self.all_stacks or self.stacks)

    @property
    def owner(self) -> str:
        return self.github_repository.split("/", 1)[0]

    @property
    def repository(self) -> str:
        return self.github_repository.split("/", 1)[1]

    @property
    def pr_preview_stacks(self) -> list[str]:
        """Stacks a pull request previews (never prod: its secrets stay out of PR code)."""
        if self.pulumi_token_type == "organization":
            return []
        return [s for s in self.stacks if s not in PREVIEW_FIRST_STACKS]

    @property
    def preview_first_stacks(self) -> list[str]:
        return [s for s in self.stacks if s in PREVIEW_FIRST_STACKS]
