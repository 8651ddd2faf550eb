"""Before `destroy`: what the state does not own in the stack's VPC and would stop its deletion.

EC2 is moto (5.2.5) on a loopback port, reached as a real endpoint would be; the VPC, subnet and the
leftovers are created there as EKS, the VPC CNI and GuardDuty would leave them.
"""

from __future__ import annotations

import json

import boto3
import pytest
from moto.server import ThreadedMotoServer

from llm_pd_eks_tools.core.cli import Exit
from llm_pd_eks_tools.ops import destroy_check

REGION = "us-east-1"


@pytest.fixture(scope="module")
def endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def ec2(endpoint, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    return boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)


def stack(ec2, tmp_path) -> tuple[str, str, object]:
    """A VPC and subnet the state owns; returns (vpc, subnet, the export file)."""
    vpc = ec2.create_vpc(CidrBlock="10.30.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.30.1.0/24", AvailabilityZone="us-east-1c")["Subnet"]["SubnetId"]
    own_eni = ec2.create_network_interface(SubnetId=subnet, Description="the stack's own")["NetworkInterface"]
    export = {
        "version": 3,
        "deployment": {
            "resources": [
                {"urn": "urn:vpc", "type": "aws:ec2/vpc:Vpc", "id": vpc},
                {"urn": "urn:subnet", "type": "aws:ec2/subnet:Subnet", "id": subnet},
                {
                    "urn": "urn:eni",
                    "type": "aws:ec2/networkInterface:NetworkInterface",
                    "id": own_eni["NetworkInterfaceId"],
                },
            ]
        },
    }
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    return vpc, subnet, path


def test_a_clean_vpc_lets_destroy_run(ec2, tmp_path, capsys):
    _, _, path = stack(ec2, tmp_path)
    assert destroy_check.main(["--stack", "prod", "--state", str(path)], ec2=ec2) == Exit.OK
    assert "`destroy` may run" in capsys.readouterr().out


def test_leaked_cni_interfaces_and_a_guardduty_endpoint_block_it(ec2, tmp_path, capsys):
    vpc, subnet, path = stack(ec2, tmp_path)
    leaked = ec2.create_network_interface(SubnetId=subnet, Description="aws-K8S-i-0123456789abcdef0")
    leaked_id = leaked["NetworkInterface"]["NetworkInterfaceId"]
    guardduty = ec2.create_vpc_endpoint(
        VpcId=vpc,
        ServiceName=f"com.amazonaws.{REGION}.guardduty-data",
        VpcEndpointType="Interface",
        SubnetIds=[subnet],
        TagSpecifications=[{"ResourceType": "vpc-endpoint", "Tags": [{"Key": "GuardDutyManaged", "Value": "true"}]}],
    )["VpcEndpoint"]["VpcEndpointId"]
    assert destroy_check.main(["--stack", "prod", "--state", str(path)], ec2=ec2) == Exit.FAILED
    out = capsys.readouterr().out
    assert f"network interface {leaked_id} in {subnet}" in out and "left by the VPC CNI" in out
    assert f"delete-network-interface --network-interface-id {leaked_id}" in out
    assert f"VPC endpoint {guardduty}" in out and "created by GuardDuty" in out and "GuardDutyExcluded" in out
    assert "the stack's own" not in out


def test_a_state_without_a_vpc_has_nothing_to_check(tmp_path, capsys):
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"version": 3, "deployment": {"resources": []}}))
    assert destroy_check.main(["--stack", "prod", "--state", str(path)], ec2=object()) == Exit.OK
    assert "holds no VPC" in capsys.readouterr().out
