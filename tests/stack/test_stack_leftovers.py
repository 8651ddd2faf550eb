"""Access entries keyed by principal (removing one admin touches no other entry), and what `destroy`
leaves behind listed, tagged, by the preview."""

from __future__ import annotations

from helpers import engine_config_with

from llm_pd_eks.cluster import access_entry_key
from llm_pd_eks_tools.plan.preview import left_behind
from llm_pd_eks_tools.plan.preview.harness import resource_records
from llm_pd_eks_tools.plan.preview.mockrun import run_program

ALICE = "arn:aws:iam::111122223333:user/alice"
ADMINS = "arn:aws:iam::111122223333:role/platform-admins"
BOB = "arn:aws:iam::111122223333:user/bob"


def entries(arns: list[str]) -> dict[str, str]:
    """access entry key -> principal ARN, as the program registers them for `arns`."""
    config, secret_keys = engine_config_with("dev", "cluster", adminPrincipalArns=arns)
    cluster = run_program("dev", config=config, secret_keys=secret_keys).one("eks:index:Cluster")
    return {key: entry["principalArn"] for key, entry in cluster.inputs["accessEntries"].items()}


def test_removing_an_admin_keeps_the_other_entries_keys():
    before, after = entries([ALICE, ADMINS, BOB]), entries([ADMINS, BOB])
    assert set(after.items()) < set(before.items())  # the remaining entries keep their keys
    assert {v: k for k, v in before.items()}[BOB] == {v: k for k, v in after.items()}[BOB]


def test_keys_name_the_principal_and_never_collide():
    assert access_entry_key(ADMINS).startswith("111122223333-role-platform-admins-")
    look_alike = "arn:aws:iam::111122223333:role/platform/admins"  # the same letters, another principal
    assert access_entry_key(look_alike) != access_entry_key(ADMINS)


def test_the_preview_lists_the_retained_volumes_with_their_tags():
    records = resource_records(run_program("prod"))
    (volumes,) = [item for item in left_behind.left_behind(records) if "StorageClass" in item.what]
    assert volumes.tags["project"] and volumes.tags["stack"] == "prod" and volumes.tagged
    text = left_behind.lines(records)
    assert text[0] == "What `destroy` leaves behind" and volumes.line() in text[1]
    assert "protected" in text[-1] and "network-vpc" in text[-1]  # prod protects the VPC and the cluster


def test_an_untagged_retained_resource_is_marked():
    prod = resource_records(run_program("prod"))
    (template,) = [r for r in prod if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate" and "gpu" in r["name"]]
    kept = {**template, "retain_on_delete": True, "inputs": {**template["inputs"], "tags": {}}}
    (line,) = [x for x in left_behind.lines([kept]) if "retainOnDelete" in x]
    assert line.endswith("UNTAGGED, invisible to the cost audit")
    tagged = left_behind.lines([{**template, "retain_on_delete": True}])
    assert "UNTAGGED" not in "".join(tagged) and "stack=prod" in tagged[1]
