"""Do the stack's alerts reach people? The deploy's last gate, after `pulumi up` and `make verify`.

An SNS email (or http/https) subscription exists from the first `up`, but delivers nothing until its
recipient confirms it (SNS lists it with SubscriptionArn `PendingConfirmation`): a stack would go on
to the next stage with its pages and tickets reaching nobody. This reads the stack's alert topics
from its state (`pulumi stack export`: every `aws:sns/topic:Topic`, its `arn` output) and their
subscriptions from SNS (ListSubscriptionsByTopic), and refuses a topic with an unconfirmed
subscription or with no confirmed one.

    pulumi stack export --stack ORG/STACK > state.json
    python -m llm_pd_eks_tools.ops.alert_delivery --state state.json --region us-west-2

Exit: 0 every topic delivers, 1 refused (each reason on stderr: confirm the subscription, from the
mail AWS sent, or `aws sns confirm-subscription`; then rerun the job), 2 unreadable state,
5 SNS could not be asked (credentials, network).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from llm_pd_eks_tools.core.cli import ArgumentParser, Exit, ToolError, exit_with, one_line

TOPIC_TYPE = "aws:sns/topic:Topic"
PENDING = "PendingConfirmation"  # SNS's SubscriptionArn of a subscription not yet confirmed


@dataclass(frozen=True)
class Topic:
    """An alert topic of the stack: its resource name (…-alerts: pages, …-tickets: tickets) and ARN."""

    name: str
    arn: str


def stack_topics(state: dict[str, Any]) -> list[Topic]:
    """The SNS topics of a `pulumi stack export` (version 3: deployment.resources[] with type, urn, outputs)."""
    resources = (state.get("deployment") or {}).get("resources")
    if not isinstance(resources, list):
        raise ToolError(Exit.USAGE, "not a `pulumi stack export`: no deployment.resources list")
    topics = []
    for resource in resources:
        if isinstance(resource, dict) and resource.get("type") == TOPIC_TYPE:
            arn = (resource.get("outputs") or {}).get("arn")
            if isinstance(arn, str) and arn:
                topics.append(Topic(str(resource.get("urn", "")).rsplit("::", 1)[-1], arn))
    return sorted(topics, key=lambda t: t.name)


def refusals(topic: Topic, subscriptions: Iterable[dict[str, Any]]) -> list[str]:
    """Why `topic` does not deliver (ListSubscriptionsByTopic's Subscriptions), or nothing."""
    found, confirmed = [], 0
    for sub in subscriptions:
        if sub.get("SubscriptionArn") == PENDING:
            found.append(
                f"{topic.name}: the {sub.get('Protocol')} subscription {sub.get('Endpoint')} is not confirmed: "
                "it receives nothing until its recipient follows the link AWS mailed (then rerun this job)"
            )
        else:
            confirmed += 1
    if not confirmed and not found:
        found.append(
            f"{topic.name}: no subscription: its alerts reach nobody (observability.alerting.snsSubscriptions)"
        )
    return found


def subscriptions(sns: Any, arn: str) -> list[dict[str, Any]]:
    """Every subscription of one topic, all pages of ListSubscriptionsByTopic."""
    out: list[dict[str, Any]] = []
    for page in sns.get_paginator("list_subscriptions_by_topic").paginate(TopicArn=arn):
        out.extend(page.get("Subscriptions", []))
    return out


def judge(topics: list[Topic], sns: Any) -> list[str]:
    from botocore.exceptions import BotoCoreError, ClientError

    found = []
    for topic in topics:
        try:
            found += refusals(topic, subscriptions(sns, topic.arn))
        except (BotoCoreError, ClientError) as error:
            raise ToolError(
                Exit.UNVERIFIED, f"{topic.name}: SNS could not be asked ({one_line(str(error), 160)})"
            ) from None
    return found


def main(argv: Optional[list[str]] = None, sns: Any = None) -> int:
    parser = ArgumentParser(prog="python -m llm_pd_eks_tools.ops.alert_delivery", description=__doc__.splitlines()[0])
    parser.add_argument("--state", required=True, help="the stack's `pulumi stack export` JSON")
    parser.add_argument("--region", required=True, help="the stack's aws:region")
    args = parser.parse_args(argv)
    try:
        state = json.loads(Path(args.state).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ToolError(
            Exit.USAGE, f"{args.state}: not a readable stack export ({one_line(str(error), 120)})"
        ) from None
    topics = stack_topics(state if isinstance(state, dict) else {})
    if not topics:
        print("no alert topics in the stack (observability off): nothing to check")
        return Exit.OK
    if sns is None:
        import boto3

        from llm_pd_eks_tools.ops.preflight import client_config

        sns = boto3.client("sns", region_name=args.region, config=client_config())
    found = judge(topics, sns)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print(f"alert delivery: {len(found)} problem(s); the stage is not promoted", file=sys.stderr)
        return Exit.FAILED
    print(f"alert delivery: {', '.join(t.name for t in topics)} each have confirmed subscriptions only")
    return Exit.OK


if __name__ == "__main__":
    exit_with("alert_delivery", main)
