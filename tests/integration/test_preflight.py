"""`make preflight` against a real AWS API emulator.

EC2 is served by a moto server (moto 5.2.5) on a loopback port, reached through AWS_ENDPOINT_URL
exactly as a real endpoint would be; moto ships AWS's own instance-type and per-AZ offering data,
so what it says about our catalog types is what EC2 said when moto captured it. Service Quotas:
moto 5.2.5 implements GetServiceQuota only for service code "vpc" (the ec2 codes raise
NoSuchResource and GetAWSDefaultServiceQuota is missing), so quota answers come from a botocore
Stubber on a real service-quotas client; the CLI run against moto shows those items as
could-not-check.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from helpers import ROOT, STACKS, copy_checkout, engine_config_with

from llm_pd_eks.catalog import GPU_INSTANCE_TYPES
from llm_pd_eks.config import ConfigError, StackConfig, validate_engine_config
from llm_pd_eks.versions import EKS_ADDON_VERSIONS, NODE_AMI_RELEASE_VERSIONS
from llm_pd_eks_tools.ops import preflight
from llm_pd_eks_tools.ops.preflight_fleet import SSM_AMI_PATHS, recommended_release_parameter

# --- the emulator ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_url(tmp_path_factory):
    """A moto server on a free loopback port for the whole session, killed afterwards."""
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"moto server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"moto server did not come up on {url}: {log.read_text()[-2000:]}")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _aws_env(tmp: Path, endpoint: str | None, credentials: bool = True) -> dict[str, str]:
    """A clean AWS environment: nothing from the host's profiles, metadata service off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp / "no-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    if credentials:
        env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    if endpoint:
        env["AWS_ENDPOINT_URL"] = endpoint
    return env


@pytest.fixture
def aws(moto_url, tmp_path, monkeypatch):
    """Point this process's boto3 at moto with dummy credentials; returns the moto URL."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in _aws_env(tmp_path, moto_url).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    return moto_url


def ec2_client(region: str):
    return boto3.client("ec2", region_name=region)


def stubbed_quotas(region: str, answers: list[tuple[str, float]]) -> tuple[object, Stubber]:
    """A real service-quotas client answering GetServiceQuota for `answers` in order, params checked."""
    client = boto3.client("service-quotas", region_name=region)
    stub = Stubber(client)
    for code, value in answers:
        stub.add_response(
            "get_service_quota",
            {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": f"quota {code}", "Value": value}},
            {"ServiceCode": "ec2", "QuotaCode": code},
        )
    stub.activate()
    return client, stub


def stubbed_eks_versions(region: str, version: str, status: str):
    """A real EKS client answering DescribeClusterVersions (moto 5.2.5 lacks it), shapes checked by botocore."""
    from datetime import datetime

    client = boto3.client("eks", region_name=region)
    stub = Stubber(client)
    stub.add_response(
        "describe_cluster_versions",
        {
            "clusterVersions": [
                {
                    "clusterVersion": version,
                    "clusterType": "eks",
                    "versionStatus": status,
                    "status": status,
                    "endOfStandardSupportDate": datetime(2027, 3, 27, tzinfo=UTC),
                    "endOfExtendedSupportDate": datetime(2028, 3, 27, tzinfo=UTC),
                }
            ]
        },
        {"clusterVersions": [version]},
    )
    for addon, pinned in EKS_ADDON_VERSIONS[version].items():  # DescribeAddonVersions offers every pin
        stub.add_response(
            "describe_addon_versions",
            {"addons": [{"addonName": addon, "addonVersions": [{"addonVersion": pinned}]}]},
            {"addonName": addon, "kubernetesVersion": version},
        )
    stub.activate()
    return client, stub


def stubbed_ssm_releases(region: str, version: str, release: str):
    """A real SSM client answering EKS's recommended AMI release (`release`) for both AMI types."""
    client = boto3.client("ssm", region_name=region)
    stub = Stubber(client)
    for ami_type in SSM_AMI_PATHS:
        name = recommended_release_parameter(version, ami_type)
        stub.add_response("get_parameter", {"Parameter": {"Name": name, "Value": release}}, {"Name": name})
    stub.activate()
    return client, stub


def quota_answers(config: StackConfig, ec2, gpu: float, system: float, eip: float) -> list[tuple[str, float]]:
    """Stub answers in the order run_checks asks: GPU family, system family, Elastic IPs."""
    gpu_code = GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type].family_quota_code
    system_code = preflight.standard_quota_code(config.system_nodes.instance_type)
    return [(gpu_code, gpu), (system_code, system), (preflight.EIP_QUOTA_CODE, eip)]


def variant(stack: str, section: str, **changes) -> StackConfig:
    """A checked-in stack with one section changed, validated through the project's own model."""
    return validate_engine_config(*engine_config_with(stack, section, **changes))


def by_check(results: list[preflight.Result]) -> dict[str, preflight.Result]:
    return {r.check: r for r in results}


# --- catalog drift --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GPU_INSTANCE_TYPES))
def test_catalog_matches_ec2(aws, name):
    """EFA interfaces build the launch template and vCPUs size the quota check: both must be EC2's."""
    ec2 = ec2_client("us-west-2")
    info = preflight.instance_type_info(ec2, name)
    entry = GPU_INSTANCE_TYPES[name]
    assert info is not None, f"EC2 does not know {name}"
    assert preflight.efa_interfaces(info) == entry.efa_interfaces
    assert info["VCpuInfo"]["DefaultVCpus"] == entry.vcpus
    assert info["GpuInfo"]["Gpus"][0]["Count"] == entry.gpus
    assert preflight.check_efa(ec2, name, entry.efa_interfaces).status == "ok"


def test_efa_count_drift_is_a_failure(aws):
    ec2 = ec2_client("us-west-2")
    wrong = GPU_INSTANCE_TYPES["g6e.24xlarge"].efa_interfaces + 1
    result = preflight.check_efa(ec2, "g6e.24xlarge", wrong)
    assert result.status == "FAIL"
    assert f"{wrong - 1} EFA interfaces" in result.detail and f"says {wrong}" in result.detail


def test_type_without_efa_or_unknown_type_fails(aws):
    ec2 = ec2_client("us-west-2")
    no_efa = preflight.check_efa(ec2, "g4dn.xlarge", 1)  # EC2: EfaSupported false for g4dn.xlarge
    assert (no_efa.status, no_efa.detail) == ("FAIL", "g4dn.xlarge does not support EFA")
    unknown = preflight.check_efa(ec2, "p9.48xlarge", 1)
    assert (unknown.status, unknown.detail) == ("FAIL", "p9.48xlarge does not exist in this region")


# --- whole stacks ---------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_checked_in_stacks_pass_with_just_enough_quota(aws, stack):
    """Every stack's AZs and types exist as configured; quotas exactly equal to the need pass (GPU:
    maxSize plus the nodes a blue/green template change runs next to them)."""
    config = preflight.load_config(stack)
    ec2 = ec2_client(config.region)
    gpu = GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type]
    system_vcpus = ec2.describe_instance_types(InstanceTypes=[config.system_nodes.instance_type])["InstanceTypes"][0][
        "VCpuInfo"
    ]["DefaultVCpus"]
    nat = 1 if config.network.nat_gateways == "single" else len(config.network.availability_zones)
    gpu_nodes = config.gpu_nodes.max_size + config.gpu_nodes.roll_surge()
    answers = quota_answers(
        config, ec2, gpu=gpu_nodes * gpu.vcpus, system=config.system_nodes.max_size * system_vcpus, eip=nat
    )
    quotas, stub = stubbed_quotas(config.region, answers)
    eks, eks_stub = stubbed_eks_versions(config.region, config.cluster.kubernetes_version, "STANDARD_SUPPORT")
    version = config.cluster.kubernetes_version
    ssm, ssm_stub = stubbed_ssm_releases(config.region, version, NODE_AMI_RELEASE_VERSIONS[version])
    autoscaling = boto3.client("autoscaling", region_name=config.region)
    results = preflight.run_checks(config, ec2, quotas, eks=eks, ssm=ssm, autoscaling=autoscaling)
    stub.assert_no_pending_responses()
    eks_stub.assert_no_pending_responses()
    ssm_stub.assert_no_pending_responses()
    assert [r.check for r in results] == list(preflight.CHECK_NAMES)
    # on demand, the capacity is a warning that says what was not checked
    expected = {"gpu-capacity": "warning"} if config.gpu_nodes.capacity == "onDemand" else {}
    assert {r.check: r.status for r in results} == {name: expected.get(name, "ok") for name in preflight.CHECK_NAMES}


def test_nonexistent_az_fails_and_names_the_region_azs(aws):
    config = variant("dev", "network", availabilityZones=["us-west-2a", "us-west-2e"])
    ec2 = ec2_client("us-west-2")
    region_azs = sorted(z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"])
    assert "us-west-2e" not in region_azs
    quotas, _ = stubbed_quotas("us-west-2", quota_answers(config, ec2, 10_000, 10_000, 100))
    results = by_check(preflight.run_checks(config, ec2, quotas))
    azs = results["availability-zones"]
    assert azs.status == "FAIL"
    assert azs.detail == f"us-west-2e not in us-west-2 (the region has {', '.join(region_azs)})"
    assert results["system-offering"].status == "FAIL"
    assert "not offered in us-west-2e" in results["system-offering"].detail
    assert results["gpu-offering"].status == "ok"  # the GPU AZ (us-west-2a) is real


def test_gpu_type_not_offered_in_az_lists_the_azs_that_offer_it(aws):
    # p5e.48xlarge is a catalog type that EC2 (per moto's captured data) offers only in some us-west-2 AZs.
    config = variant("dev", "gpuNodes", instanceType="p5e.48xlarge", availabilityZone="us-west-2a")
    ec2 = ec2_client("us-west-2")
    # The expected list by a different route: every offering of the region, filtered here.
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="availability-zone")
    offering = sorted(
        {o["Location"] for p in pages for o in p["InstanceTypeOfferings"] if o["InstanceType"] == "p5e.48xlarge"}
    )
    assert offering and "us-west-2a" not in offering
    result = preflight.check_offered(ec2, "gpu-offering", "p5e.48xlarge", [config.gpu_nodes.availability_zone])
    assert result.status == "FAIL"
    assert result.detail == f"p5e.48xlarge is not offered in us-west-2a; AZs that offer it: {', '.join(offering)}"


# --- quotas ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stack, code, needed",
    [
        ("dev", "L-417A185B", 192),  # P family: maxSize 2 x p4d.24xlarge 96 vCPUs
        ("prod", "L-417A185B", 1152),  # P family: maxSize 6 x p5.48xlarge 192 vCPUs
    ],
)
def test_gpu_vcpu_quota_boundary(aws, stack, code, needed):
    config = preflight.load_config(stack)
    gpu = GPU_INSTANCE_TYPES[config.gpu_nodes.instance_type]
    for value, status in ((needed - 1, "FAIL"), (needed, "ok")):
        quotas, stub = stubbed_quotas(config.region, [(code, value)])
        result = preflight.check_vcpu_quota(
            quotas, "gpu-vcpu-quota", gpu.family_quota_code, config.gpu_nodes.max_size, gpu.vcpus
        )
        stub.assert_no_pending_responses()  # and the Stubber checked that `code` was asked for
        assert result.status == status
        assert f"{value} vCPUs" in result.detail and str(needed) in result.detail


def test_quota_too_small_fails_the_whole_run(aws):
    config = preflight.load_config("dev")
    ec2 = ec2_client("us-west-2")
    quotas, _ = stubbed_quotas("us-west-2", quota_answers(config, ec2, gpu=0, system=10_000, eip=100))
    results = by_check(preflight.run_checks(config, ec2, quotas))
    assert results["gpu-vcpu-quota"].status == "FAIL"
    assert "request an increase" in results["gpu-vcpu-quota"].detail
    assert preflight.verdict(list(results.values())) == "FAIL"


def test_eip_quota_counts_allocated_addresses(aws):
    """prod has natGateways perAz over 3 AZs: 3 new addresses beside the ones already allocated."""
    config = preflight.load_config("prod")
    ec2 = ec2_client(config.region)
    assert preflight.nat_gateway_count(config) == 3
    allocated = [ec2.allocate_address(Domain="vpc")["AllocationId"] for _ in range(2)]
    try:
        for quota, status in ((4, "FAIL"), (5, "ok")):  # 2 allocated + 3 NAT = 5
            quotas, _ = stubbed_quotas(config.region, [(preflight.EIP_QUOTA_CODE, quota)])
            result = preflight.check_eip_quota(ec2, quotas, preflight.nat_gateway_count(config))
            assert result.status == status, result
            assert "2 allocated" in result.detail or "2 already allocated" in result.detail
    finally:
        for allocation in allocated:
            ec2.release_address(AllocationId=allocation)


def test_unapplied_quota_falls_back_to_the_aws_default(aws):
    quotas = boto3.client("service-quotas", region_name="us-west-2")
    with Stubber(quotas) as stub:
        stub.add_client_error(
            "get_service_quota",
            "NoSuchResourceException",
            "no applied value",
            expected_params={"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
        )
        stub.add_response(
            "get_aws_default_service_quota",
            {"Quota": {"QuotaCode": "L-417A185B", "QuotaName": "P vCPUs", "Value": 0.0}},
            {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
        )
        result = preflight.check_vcpu_quota(quotas, "gpu-vcpu-quota", "L-417A185B", 2, 96)
    assert result.status == "FAIL"
    assert "AWS default" in result.detail and "need 192" in result.detail  # 2 x 96


def test_quota_without_value_cannot_be_checked(aws):
    quotas = boto3.client("service-quotas", region_name="us-west-2")
    with Stubber(quotas) as stub:
        stub.add_response(
            "get_service_quota",
            {
                "Quota": {
                    "QuotaCode": "L-0263D0A3",
                    "ErrorReason": {"ErrorCode": "DEPENDENCY_ACCESS_DENIED_ERROR", "ErrorMessage": "access denied"},
                }
            },
        )
        result = preflight.check_eip_quota(ec2_client("us-west-2"), quotas, 1)
    assert result.status == "could-not-check"
    assert "access denied" in result.detail


# --- the CLI --------------------------------------------------------------------------------


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.ops.preflight", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_against_moto_json_and_warning_exit(moto_url, tmp_path):
    env = _aws_env(tmp_path, moto_url)
    proc = run_cli(env, "--stack", "dev", "--json")
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr  # could-not-check alone is a warning
    report = json.loads(proc.stdout)
    assert set(report) == {"stack", "region", "account", "verdict", "checks"}
    assert (report["stack"], report["region"], report["verdict"]) == ("dev", "us-west-2", "warning")
    assert report["account"] == "123456789012"  # moto's default account, from STS GetCallerIdentity
    assert [c["check"] for c in report["checks"]] == list(preflight.CHECK_NAMES)
    assert all(set(c) == {"check", "status", "detail"} for c in report["checks"])
    status = {c["check"]: c["status"] for c in report["checks"]}
    for ec2_item in ("availability-zones", "gpu-offering", "gpu-efa", "system-offering"):
        assert status[ec2_item] == "ok"
    # moto: no ec2 quotas, no EKS DescribeClusterVersions or DescribeAddonVersions, no EKS AMI parameters
    for unknown_item in (
        "gpu-vcpu-quota",
        "system-vcpu-quota",
        "eip-quota",
        "eks-version",
        "ami-release",
        "addon-versions",
    ):
        assert status[unknown_item] == "could-not-check"
    assert status["gpu-capacity"] == "warning"  # dev runs on demand: nothing EC2 can answer
    assert status["gpu-block-end"] == "ok"  # no Capacity Block

    strict = run_cli(env, "--stack", "dev", "--strict")
    assert strict.returncode == 5  # Exit.UNVERIFIED
    assert "WARNING: 6 of 12 check(s) could not be run" in strict.stdout


def test_cli_unreachable_endpoint_is_one_clear_line(tmp_path):
    closed = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    proc = run_cli(_aws_env(tmp_path, closed), "--stack", "dev")
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f'preflight: cannot reach AWS: Could not connect to the endpoint URL: "{closed}/"'
    ]
    assert proc.returncode == 5  # Exit.UNVERIFIED: it verified nothing
    assert "nothing was verified" in proc.stdout
    assert proc.stdout.count("could-not-check") == len(preflight.CHECK_NAMES)

    as_json = json.loads(run_cli(_aws_env(tmp_path, closed), "--stack", "dev", "--json").stdout)
    assert as_json["verdict"] == "warning" and as_json["account"] is None
    assert {c["status"] for c in as_json["checks"]} == {"could-not-check"}


def test_cli_without_credentials_says_so(moto_url, tmp_path):
    proc = run_cli(_aws_env(tmp_path, moto_url, credentials=False), "--stack", "dev", "--strict")
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("preflight: no usable AWS credentials")
    assert proc.returncode == 5


def test_cli_unknown_stack_exits_2(tmp_path):
    proc = run_cli(_aws_env(tmp_path, None), "--stack", "nosuchstack")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "no stack file Pulumi.nosuchstack.yaml" in proc.stderr


def test_main_exit_codes_with_injected_clients(aws, capsys):
    config = preflight.load_config("dev")
    sts = boto3.client("sts", region_name="us-west-2")
    ec2 = ec2_client("us-west-2")

    version = config.cluster.kubernetes_version
    autoscaling = boto3.client("autoscaling", region_name="us-west-2")

    def fleet_clients(eks_status: str) -> tuple:
        eks, _ = stubbed_eks_versions("us-west-2", version, eks_status)
        ssm, _ = stubbed_ssm_releases("us-west-2", version, NODE_AMI_RELEASE_VERSIONS[version])
        return eks, ssm, autoscaling

    quotas, _ = stubbed_quotas("us-west-2", quota_answers(config, ec2, 10_000, 10_000, 100))
    clients = (sts, ec2, quotas, *fleet_clients("STANDARD_SUPPORT"))
    assert preflight.main(["--stack", "dev", "--json"], clients=clients) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "ok"

    # extended support warns, and does not fail the run (on demand warns too: nothing EC2 can answer)
    quotas, _ = stubbed_quotas("us-west-2", quota_answers(config, ec2, 10_000, 10_000, 100))
    assert preflight.main(["--stack", "dev"], clients=(sts, ec2, quotas, *fleet_clients("EXTENDED_SUPPORT"))) == 0
    out = capsys.readouterr().out
    assert any(line.split()[:2] == ["warning", "eks-version"] for line in out.splitlines())
    assert "ok: all 12 checks passed, 2 with a warning" in out

    quotas, _ = stubbed_quotas("us-west-2", quota_answers(config, ec2, 1, 10_000, 100))
    assert preflight.main(["--stack", "dev"], clients=(sts, ec2, quotas)) == 1
    out = capsys.readouterr().out
    assert "FAIL: 1 check(s) failed" in out
    assert any(line.split()[:2] == ["FAIL", "gpu-vcpu-quota"] for line in out.splitlines())


def test_a_secret_hf_token_is_read_like_the_program_reads_it(tmp_path):
    # A stack with an encrypted hfToken must load (the secret is recognised, not refused as plain text).
    stack = (ROOT / "Pulumi.dev.yaml").read_text()
    (tmp_path / "Pulumi.dev.yaml").write_text(stack + "  llm-pd-eks:hfToken:\n    secure: v1:abc:def\n")
    config = preflight.load_config("dev", tmp_path)
    assert config.gpu_nodes.instance_type == preflight.load_config("dev").gpu_nodes.instance_type
    (tmp_path / "Pulumi.dev.yaml").write_text(stack + "  llm-pd-eks:hfToken: hf_plain\n")
    with pytest.raises(ConfigError, match="hfToken: set in plain text"):
        preflight.load_config("dev", tmp_path)


# --- endpoints that misbehave: one line, a documented exit code, bounded time ------------


class _BadEndpoint(socketserver.BaseRequestHandler):
    """Reads a request, then misbehaves as `server.mode` says."""

    def handle(self) -> None:
        self.request.settimeout(5)
        mode = self.server.mode  # type: ignore[attr-defined]
        try:
            self.request.recv(65536)
            if mode == "close":
                return
            if mode == "drip":  # headers, then one byte every half second: no read timeout ever trips
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                for _ in range(600):
                    self.request.sendall(b"<")
                    time.sleep(0.5)
                return
            body, kind = {
                "html": (b"<html><body>Welcome to nginx</body></html>", b"text/html"),
                "json": (b'{"ok": true, "items": [1, 2, 3]}', b"application/json"),
            }[mode]
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
        except OSError:  # the client gave up (the deadline passed): nothing to do
            pass


@pytest.fixture
def bad_endpoint():
    """Start a misbehaving endpoint: `bad_endpoint(mode)` -> its URL; stopped after the test."""
    servers = []

    def start(mode: str) -> str:
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _BadEndpoint)
        server.daemon_threads = True
        server.mode = mode  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "mode, line",
    [
        ("close", "preflight: cannot reach AWS: the endpoint closed the connection without answering ({url}/)"),
        ("html", "preflight: the endpoint's answer is not an AWS response (no 'GetCallerIdentityResult' in it)"),
        (
            "json",
            "preflight: the endpoint's answer is not an AWS response (Unable to parse response (not well-formed "
            "(invalid token): line 1, column 0), invalid XML received. Further retries may…)",
        ),
        ("drip", "preflight: AWS did not answer within the 3 s deadline (endpoint {url}); nothing was verified"),
    ],
)
def test_a_misbehaving_endpoint_is_one_line_and_unverified(bad_endpoint, tmp_path, mode, line):
    url = bad_endpoint(mode)
    # only the drip needs the deadline to end it; the others answer at once, and a short deadline would
    # race the tool's own start-up on a loaded machine (the deadline counts from the tool's start)
    deadline = "3" if mode == "drip" else "120"
    proc = run_cli(_aws_env(tmp_path, url), "--stack", "dev", "--json", "--deadline", deadline)
    assert proc.stderr.strip().splitlines() == [line.format(url=url)]
    assert proc.returncode == 5  # Exit.UNVERIFIED: nothing was verified
    report = json.loads(proc.stdout)  # stdout is pure JSON
    assert report["verdict"] == "warning" and report["account"] is None
    assert {c["status"] for c in report["checks"]} == {"could-not-check"}


@pytest.mark.parametrize("value", ["not-a-url", "ftp://example.com", "http://"])
def test_an_endpoint_url_that_is_not_a_url_is_a_usage_error(tmp_path, value):
    env = {**_aws_env(tmp_path, None), "AWS_ENDPOINT_URL": value}
    proc = run_cli(env, "--stack", "dev")
    assert proc.stderr.strip() == (
        f"preflight: AWS_ENDPOINT_URL={value!r} is not a URL such as http://127.0.0.1:5000 or "
        "https://ec2.us-west-2.amazonaws.com; fix or unset it"
    )
    assert (proc.returncode, proc.stdout) == (2, "")


def test_some_items_unverified_is_a_warning_and_strict_makes_it_unverified():
    ok = preflight.Result("gpu-efa", "ok", "fine")
    unknown = preflight.Result("eip-quota", "could-not-check", "no quota")
    failed = preflight.Result("gpu-offering", "FAIL", "not offered")
    assert preflight.exit_code([ok, unknown], strict=False) == 0
    assert preflight.exit_code([ok, unknown], strict=True) == 5
    assert preflight.exit_code([unknown], strict=False) == 5  # verified nothing: never 0
    assert preflight.exit_code([ok, unknown, failed], strict=False) == 1
    assert preflight.exit_code([ok], strict=True) == 0


def test_a_bad_stack_file_is_one_line_with_the_usage_code(tmp_path):
    checkout = copy_checkout(tmp_path / "checkout")
    stack = checkout / "Pulumi.dev.yaml"
    text = stack.read_text()
    stack.write_text(text + "  llm-pd-eks:gpuNodes:\n    maxSize: 9\n")
    line = len(text.splitlines()) + 1
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.ops.preflight", "--stack", "dev"],
        cwd=checkout,
        env=_aws_env(tmp_path, None),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith(
        f"preflight: Pulumi.dev.yaml line {line}: key 'llm-pd-eks:gpuNodes' is defined twice"
    )


def test_clients_have_short_timeouts_and_one_retry():
    clients = preflight.make_clients("us-west-2")
    assert [c.meta.service_model.service_name for c in clients] == [
        "sts",
        "ec2",
        "service-quotas",
        "eks",
        "ssm",
        "autoscaling",
    ]
    for client in clients:
        config = client.meta.config
        assert (config.connect_timeout, config.read_timeout) == (5, 10)
        assert config.retries == {"mode": "standard", "total_max_attempts": 2}  # one try plus one retry
