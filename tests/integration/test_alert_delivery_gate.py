"""The deploy's alert-delivery gate: an alert topic with an unconfirmed subscription (an email nobody
clicked) or none at all is refused. SNS's answers come through botocore's Stubber on a real `sns`
client, so the request and response shapes are botocore's own (ListSubscriptionsByTopic)."""

from __future__ import annotations

import json

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from helpers import ROOT

from llm_pd_eks_tools.core.cli import Exit, ToolError
from llm_pd_eks_tools.ops import alert_delivery

PAGES = "arn:aws:sns:us-west-2:210987654321:observability-alerts-1a2b"
TICKETS = "arn:aws:sns:us-west-2:210987654321:observability-tickets-3c4d"


def export(*topics: tuple[str, str]) -> dict:
    """A `pulumi stack export` (version 3) holding these topics and one resource of another type."""
    resources = [
        {
            "urn": f"urn:pulumi:dev::llm-pd-eks::llm-pd-eks:index:Observability$aws:sns/topic:Topic::{name}",
            "type": "aws:sns/topic:Topic",
            "outputs": {"arn": arn},
        }
        for name, arn in topics
    ]
    resources.append({"urn": "urn:pulumi:dev::llm-pd-eks::aws:iam/role:Role::r", "type": "aws:iam/role:Role"})
    return {"version": 3, "deployment": {"resources": resources}}


def sub(arn: str, protocol: str = "email", endpoint: str = "oncall@acme.test") -> dict:
    return {
        "SubscriptionArn": arn,
        "Owner": "210987654321",
        "Protocol": protocol,
        "Endpoint": endpoint,
        "TopicArn": PAGES,
    }


@pytest.fixture
def sns():
    client = boto3.client("sns", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y")
    with Stubber(client) as stub:
        yield client, stub


def run(tmp_path, state: dict, client) -> int:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    return alert_delivery.main(["--state", str(path), "--region", "us-west-2"], sns=client)


def test_an_unconfirmed_email_subscription_is_refused(tmp_path, sns, capsys):
    client, stub = sns
    stub.add_response("list_subscriptions_by_topic", {"Subscriptions": [sub(f"{PAGES}:9f")]}, {"TopicArn": PAGES})
    stub.add_response(
        "list_subscriptions_by_topic",
        {"Subscriptions": [sub("PendingConfirmation", endpoint="tickets@acme.test")]},
        {"TopicArn": TICKETS},
    )
    code = run(tmp_path, export(("observability-alerts", PAGES), ("observability-tickets", TICKETS)), client)
    assert code == Exit.FAILED
    err = capsys.readouterr().err
    assert "observability-tickets: the email subscription tickets@acme.test is not confirmed" in err
    assert "observability-alerts" not in err


def test_confirmed_subscriptions_pass_and_an_empty_topic_does_not(tmp_path, sns, capsys):
    client, stub = sns
    stub.add_response("list_subscriptions_by_topic", {"Subscriptions": [sub(f"{PAGES}:9f")]}, {"TopicArn": PAGES})
    assert run(tmp_path, export(("observability-alerts", PAGES)), client) == Exit.OK
    stub.add_response("list_subscriptions_by_topic", {"Subscriptions": []}, {"TopicArn": TICKETS})
    assert run(tmp_path, export(("observability-tickets", TICKETS)), client) == Exit.FAILED
    assert "observability-tickets: no subscription" in capsys.readouterr().err


def test_sns_unreachable_is_unverified_and_no_topics_is_nothing_to_check(tmp_path, sns, capsys):
    client, stub = sns
    stub.add_client_error("list_subscriptions_by_topic", "AuthorizationError", "not authorized")
    with pytest.raises(ToolError) as raised:
        run(tmp_path, export(("observability-alerts", PAGES)), client)
    assert raised.value.exit_code == Exit.UNVERIFIED
    assert run(tmp_path, export(), client) == Exit.OK
    with pytest.raises(ToolError) as raised:
        run(tmp_path, {"version": 3}, client)
    assert raised.value.exit_code == Exit.USAGE


def test_the_deploy_runs_the_gate_after_verify():
    up = yaml.safe_load((ROOT / ".github" / "workflows" / "pulumi-up.yml").read_text())["jobs"]["up"]
    names = [s.get("name") or s.get("uses", "") for s in up["steps"]]
    gate = names.index("Alerts reach people (confirmed subscriptions)")
    assert names.index("Verify the deployed stack (make verify)") < gate == len(names) - 1
    run_ = up["steps"][gate]["run"]
    assert "pulumi stack export" in run_ and "llm_pd_eks_tools.ops.alert_delivery --state" in run_
