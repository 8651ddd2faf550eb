"""End-to-end tests of the offline preview: every stack, its verdicts, artifacts and exit codes.

The happy paths run in-process (reusing the session's program run per stack); the exit-code checks
run `python -m llm_pd_eks_tools.plan.preview` in a subprocess on a temporary copy of the checkout.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from google.protobuf import json_format, struct_pb2
from helpers import RAY_SERVICE, ROOT, STACKS, copy_checkout

from llm_pd_eks.models import MODELS
from llm_pd_eks_tools.core.cli import ToolError
from llm_pd_eks_tools.core.stack import load_stack_config
from llm_pd_eks_tools.core.stackfile import SECRET_PLACEHOLDER
from llm_pd_eks_tools.plan.preview.graph import component_graphs, component_mermaid
from llm_pd_eks_tools.plan.preview.harness import SECRET, UNKNOWN, PreviewResult, plain, preview, resource_records
from llm_pd_eks_tools.plan.preview.mockrun import run_program
from llm_pd_eks_tools.plan.preview.render import render_text
from llm_pd_eks_tools.plan.preview.report import Report


@pytest.fixture(scope="module")
def previews(tmp_path_factory, programs) -> dict[str, PreviewResult]:
    """One in-process preview per stack (the policy pack is started once per stack)."""
    out = tmp_path_factory.mktemp("preview")
    return {stack: preview(stack, out=out / stack, run=programs(stack), progress=lambda _m: None) for stack in STACKS}


def containers(run) -> set[str]:
    return {r.parent for r in run.resources if r.parent}


def leaf_descendants(run, component) -> list:
    """Registrations below `component` that are not themselves components (worked out independently)."""
    by_urn = {r.urn: r for r in run.resources}
    found = []
    for r in run.resources:
        if r.urn in containers(run):
            continue
        cur = r
        while cur.parent in by_urn:
            cur = by_urn[cur.parent]
            if cur.urn == component.urn:
                found.append(r)
                break
    return found


@pytest.mark.parametrize("stack", STACKS)
def test_preview_passes_and_prints_the_tree(previews, stack):
    result = previews[stack]
    run = result.run
    assert result.exit_code == 0 and not result.mandatory, [v.message for v in result.mandatory]
    assert result.report.pack.ran and result.report.pack.policies > 0
    text = render_text(result)
    assert "RESULT: OK" in text
    top = [r for r in run.resources if r.parent not in {x.urn for x in run.resources}]
    assert top, "the program registered no components"
    for comp in top:
        if comp.urn in containers(run):
            count = len(leaf_descendants(run, comp))
            assert re.search(rf"[├└]─ {re.escape(comp.name)} \[\w+\] {count}: ", text), (comp.name, count, text)
    cost = result.figures.cost
    assert f"${cost.monthly:,.2f}/month" in text
    gpu = result.figures.gpu
    assert gpu is not None and gpu.instance_type in text


@pytest.mark.parametrize("stack", STACKS)
def test_resources_json_holds_every_registration(previews, stack):
    result = previews[stack]
    records = json.loads((result.out / "resources.json").read_text())
    by_urn = {r["urn"]: r for r in records}
    assert set(by_urn) == {r.urn for r in result.run.resources}
    for reg in result.run.resources:
        rec = by_urn[reg.urn]
        assert (rec["type"], rec["name"], rec["parent"], rec["protect"]) == (
            reg.type,
            reg.name,
            reg.parent,
            reg.protect,
        )
        assert rec["dependencies"] == sorted(reg.dependencies)
        assert rec["property_dependencies"] == {k: sorted(v) for k, v in reg.property_dependencies.items()}
    lt = next(r for r in result.run.of_type("aws:ec2/launchTemplate:LaunchTemplate") if "instanceType" in r.inputs)
    assert by_urn[lt.urn]["inputs"]["instanceType"] == lt.inputs["instanceType"]
    assert SECRET_PLACEHOLDER not in json.dumps(records)
    if any(r.protect for r in result.run.resources):
        assert any(r["protect"] for r in records)


@pytest.mark.parametrize("stack", STACKS)
def test_kubernetes_manifests_and_serve_config(previews, stack):
    result = previews[stack]
    manifests = result.out / "manifests"
    k8s = [r for r in result.run.resources if r.type.startswith("kubernetes:")]
    assert k8s, "no Kubernetes resources registered"
    texts = {p.name: p.read_text() for p in manifests.glob("*.yaml")}
    for reg in k8s:
        assert any(t.startswith(f"# {reg.urn}\n") for t in texts.values()), f"no manifest for {reg.urn}"
    services = result.run.of_type(RAY_SERVICE)
    assert len(services) == 1
    inputs = services[0].inputs
    doc = yaml.safe_load(texts[f"rayservice-{services[0].name}.yaml"])
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayService")
    serve = yaml.safe_load(texts[f"rayservice-{services[0].name}.serve-config.yaml"])
    assert serve == yaml.safe_load(inputs["spec"]["serveConfigV2"])
    assert serve["applications"]
    # all.yaml is every manifest as one multi-document stream.
    docs = [d for d in yaml.safe_load_all((manifests / "all.yaml").read_text()) if d]
    assert len(docs) == len(k8s)


@pytest.mark.parametrize("stack", STACKS)
def test_kv_figure_matches_the_deployed_serve_config(previews, stack):
    """The KV figure is worked out from what the RayService actually serves, not from the config."""
    result = previews[stack]
    serve = yaml.safe_load(result.run.of_type(RAY_SERVICE)[0].inputs["spec"]["serveConfigV2"])
    prefill = serve["applications"][0]["args"]["prefill_config"]
    engine = prefill["engine_kwargs"]
    model = MODELS[prefill["model_loading_config"]["model_id"]]
    # vLLM's kv_cache_dtype: "auto" keeps the model's bf16 (2 bytes), "fp8" is 1 byte per element.
    dtype_bytes = {"auto": 2, "fp8": 1}[engine.get("kv_cache_dtype", "auto")]
    per_token = 2 * model.layers * model.kv_heads * model.head_dim * dtype_bytes  # K and V, worked out here
    kv = result.figures.kv_transfer
    assert kv.ok and kv.bytes == per_token * engine["max_model_len"]
    assert kv.efa_seconds < kv.tcp_seconds


@pytest.mark.parametrize("stack", STACKS)
def test_graph_artifacts(previews, stack):
    result = previews[stack]
    run = result.run
    nodes = [r for r in run.resources if r.urn not in containers(run)]
    node_urns = {r.urn for r in nodes}
    edges = set()
    for r in nodes:
        provider = [r.provider.rsplit("::", 1)[0]] if r.provider else []
        for d in set(r.dependencies).union(*r.property_dependencies.values(), provider):
            if d in node_urns and d != r.urn:
                edges.add((d, r.urn))
    dot = (result.out / "graph.dot").read_text()
    assert dot.startswith("digraph") and dot.count(" -> ") == len(edges)
    for r in nodes:
        assert f'label="{r.name}\\n{r.type}' in dot
    assert not (result.out / "graph.svg").exists()  # the hand-laid SVG is gone: summary.md carries Mermaid
    # One Mermaid chart per top-level component: every leaf resource in exactly one of them, and
    # every dependency inside a component drawn in its chart.
    charts = component_graphs(run)
    top = {r.name for r in run.resources if r.parent not in {x.urn for x in run.resources}}
    assert sorted(c.name for c, _ in charts) == sorted(top)
    drawn = []
    for _comp, chart in charts:
        assert chart.startswith("```mermaid\nflowchart TB\n") and chart.endswith("```\n")
        drawn += re.findall(r'^\s+n\d+\["([^<]+)<br/>', chart, re.M)
    assert sorted(drawn) == sorted(r.name for r in nodes)
    summary = (result.out / "summary.md").read_text()
    assert summary.count("```mermaid") == len(charts) + 1  # plus the component overview
    for _comp, chart in charts:
        assert chart.rstrip("\n") in summary


@pytest.mark.parametrize("stack", STACKS)
def test_summary_and_report(previews, stack):
    result = previews[stack]
    summary = (result.out / "summary.md").read_text()
    assert summary.startswith(f"### Offline preview: stack `{stack}`")
    assert "✅ **no mandatory policy violations**" in summary
    assert f"${result.figures.cost.monthly:,.2f}/month" in summary
    assert "approximate public on-demand list prices" in summary
    # report.json is the Report model and reads back equal to what the preview held.
    assert Report.read(result.out / "report.json") == result.report
    report = json.loads((result.out / "report.json").read_text())
    assert report["verdicts"] == [] and report["stack"] == stack


def test_a_report_json_of_another_shape_is_refused(tmp_path, previews):
    good = json.loads((previews["dev"].out / "report.json").read_text())
    bad = tmp_path / "report.json"
    bad.write_text(json.dumps({**good, "figures": {**good["figures"], "nat_gateways": "two"}}))
    with pytest.raises(ToolError) as error:
        Report.read(bad)
    assert error.value.exit_code == 2 and "figures.nat_gateways" in str(error.value)
    bad.write_text(json.dumps(good))
    assert Report.read(bad) == previews["dev"].report


def test_policy_config_violation_fails_the_preview(tmp_path, programs):
    """A policy config that no longer allows dev's endpoint CIDR turns into a mandatory verdict."""
    result = preview(
        "dev",
        out=tmp_path,
        run=programs("dev"),
        progress=lambda _m: None,
        policy_config={"eks-public-endpoint-restricted": {"allowedPublicAccessCidrs": ["10.0.0.0/8"]}},
    )
    assert result.exit_code == 1
    # the component and, put back from pulumi-eks's recorded children, the inner aws.eks.Cluster
    eks = programs("dev").one("eks:index:Cluster")
    inner = result.run.one("aws:eks/cluster:Cluster")
    assert inner.parent == eks.urn and inner.recorded_by
    assert sorted((v.policy, v.urn) for v in result.mandatory) == sorted(
        [("eks-public-endpoint-restricted", eks.urn), ("eks-public-endpoint-restricted", inner.urn)]
    )
    text = render_text(result)
    assert "MANDATORY  eks-public-endpoint-restricted" in text and "RESULT: FAILED" in text
    assert "❌ **2 mandatory policy violation(s)**" in (tmp_path / "summary.md").read_text()


def test_plain_marks_secrets_unknowns_and_numbers():
    struct = struct_pb2.Struct()
    struct.update(
        {
            "token": {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "value": "hunter2"},
            "later": "04da6b54-80e4-46f7-96ec-b56ff0331ba9",
            "size": 3,
            "ratio": 0.5,
            "nested": {"b": [1, 2], "a": True},
        }
    )
    value = plain(json_format.MessageToDict(struct))
    assert value == {"later": UNKNOWN, "nested": {"a": True, "b": [1, 2]}, "ratio": 0.5, "size": 3, "token": SECRET}
    assert list(value) == sorted(value)


def test_secret_config_reaches_resources_json_only_as_marked():
    config, secret_keys = load_stack_config("dev")
    config["llm-pd-eks:hfToken"] = SECRET_PLACEHOLDER
    run = run_program("dev", config, [*secret_keys, "llm-pd-eks:hfToken"])
    text = json.dumps(resource_records(run))
    assert SECRET_PLACEHOLDER not in text
    assert SECRET in text


def test_readme_component_diagram_is_the_real_graph(programs):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("<!-- section:what-it-deploys -->")[1].split("<!-- /section:what-it-deploys -->")[0]
    block = re.search(r"```mermaid\n.*?```\n", section, re.S)
    assert block, "README what-it-deploys has no mermaid diagram"
    assert block.group(0) == component_mermaid(programs("dev")), (
        "README diagram is stale: regenerate with "
        "`.venv/bin/python -m llm_pd_eks_tools.plan.preview --stack dev --mermaid`"
    )


# -- exit codes, in a subprocess on a temporary copy ----------------------------------------------
def run_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.plan.preview", "--stack", "dev", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bad_config_exits_2_naming_every_problem(tmp_path):
    root = copy_checkout(tmp_path / "repo")
    stack = yaml.safe_load((root / "Pulumi.dev.yaml").read_text())
    stack["config"]["llm-pd-eks:gpuNode"] = {"instanceType": "g6e.12xlarge"}  # typo of gpuNodes
    stack["config"]["llm-pd-eks:systemNodes"]["desiredSize"] = 99  # above maxSize
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(stack))
    done = run_cli(root)
    assert done.returncode == 2, done.stderr
    assert "llm-pd-eks:gpuNode: unknown key" in done.stderr
    assert "systemNodes" in done.stderr and "desiredSize (99)" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    out = root / "build" / "preview" / "dev"
    assert [p.name for p in out.iterdir()] == ["summary.md"]  # nothing half-written; the summary says so
    assert "❌ **the preview failed** (exit 2)" in (out / "summary.md").read_text()


def test_injected_imdsv1_launch_template_exits_1(tmp_path):
    root = copy_checkout(tmp_path / "repo")
    common = root / "llm_pd_eks" / "node_common.py"
    text = common.read_text()
    assert 'http_tokens="required"' in text
    common.write_text(text.replace('http_tokens="required"', 'http_tokens="optional"'))
    done = run_cli(root)
    assert done.returncode == 1, done.stderr
    assert "MANDATORY  launch-template-imdsv2" in done.stdout
    assert "RESULT: FAILED" in done.stdout and "Traceback" not in done.stderr
    summary = (root / "build" / "preview" / "dev" / "summary.md").read_text()
    assert "launch-template-imdsv2" in summary


def test_policy_config_file_violation_exits_1(tmp_path):
    config = tmp_path / "policy.json"
    config.write_text(json.dumps({"eks-public-endpoint-restricted": {"allowedPublicAccessCidrs": ["10.0.0.0/8"]}}))
    done = run_cli(ROOT, "--out", str(tmp_path / "out"), "--policy-config", str(config))
    assert done.returncode == 1, done.stderr
    assert "MANDATORY  eks-public-endpoint-restricted" in done.stdout and "Traceback" not in done.stderr
    # Progress is shown while it works.
    assert "[preview] running the program under the mock runtime" in done.stderr


def test_program_error_exits_3_with_the_failing_line(tmp_path):
    root = copy_checkout(tmp_path / "repo")
    main = root / "__main__.py"
    main.write_text(main.read_text() + '\nraise RuntimeError("injected failure")\n')
    done = run_cli(root)
    assert done.returncode == 3, done.stderr
    assert "RuntimeError: injected failure" in done.stderr
    assert "__main__.py:" in done.stderr  # where it failed, without a full traceback


def test_a_previous_preview_is_cleared_first_but_foreign_files_are_not(tmp_path):
    """A failed preview must not leave the last run's summary.md claiming success; a mistyped
    --out must not delete someone's files."""
    from llm_pd_eks_tools.plan.preview.harness import clear_out_dir

    old = tmp_path / "old"
    (old / "manifests").mkdir(parents=True)
    (old / "summary.md").write_text("✅ **no mandatory policy violations**")
    (old / "graph.svg").write_text("<svg/>")  # written by earlier versions
    clear_out_dir(old)
    assert not old.exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.md").write_text("x")
    (mine / "thesis.tex").write_text("precious")
    with pytest.raises(ToolError) as error:
        clear_out_dir(mine)
    assert error.value.exit_code == 2 and "thesis.tex" in str(error.value)
    assert (mine / "thesis.tex").read_text() == "precious" and (mine / "summary.md").exists()


# --- honest artifacts -------------------------------------------------------------------------


def test_a_failed_preview_replaces_the_previous_success_summary(tmp_path):
    root = copy_checkout(tmp_path / "repo")
    assert run_cli(root).returncode == 0
    out = root / "build" / "preview" / "dev"
    assert "✅ **no mandatory policy violations**" in (out / "summary.md").read_text()
    stack = root / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text() + "  llm-pd-eks:gpuNodes:\n    maxSize: 9\n")  # a duplicate key
    failed = run_cli(root)
    assert failed.returncode == 2
    summary = (out / "summary.md").read_text()
    assert "✅" not in summary and "❌ **the preview failed** (exit 2)" in summary
    assert "key 'llm-pd-eks:gpuNodes' is defined twice" in summary
    assert sorted(p.name for p in out.iterdir()) == ["summary.md"]  # no stale report.json or resources.json


def test_pack_version_is_pulumipolicy_yamls(tmp_path):
    from llm_pd_eks_tools.plan.preview.harness import pack_version

    declared = yaml.safe_load((ROOT / "policies" / "PulumiPolicy.yaml").read_text())["version"]
    assert pack_version(ROOT / "policies") == str(declared) != "0.0.1"  # 0.0.1: pulumi_policy's placeholder
    (tmp_path / "PulumiPolicy.yaml").write_text("runtime: python\n")
    assert pack_version(tmp_path) is None


def test_summary_names_the_kubernetes_service_as_kubernetes_does(programs):
    from llm_pd_eks.serving_names import RAY_SERVICE_NAME
    from llm_pd_eks_tools.plan.preview.render import named

    run = programs("dev")
    (ray_service,) = [r for r in resource_records(run) if r["type"] == RAY_SERVICE]
    assert ray_service["name"] != RAY_SERVICE_NAME  # Pulumi's name and Kubernetes' differ: both are shown
    assert named(ray_service) == f"{ray_service['name']} (Kubernetes name `{RAY_SERVICE_NAME}`)"
    plain_ns = {"name": "llm-ns", "type": "kubernetes:core/v1:Namespace", "inputs": {"metadata": {"name": "llm-ns"}}}
    assert named(plain_ns) == "llm-ns"


def test_resources_json_marks_the_mocks_ids(programs):
    run = programs("dev")
    records = resource_records(run)
    (vpc,) = [r for r in run.resources if r.type == "aws:ec2/vpc:Vpc"]
    subnets = [r for r in records if r["type"] == "aws:ec2/subnet:Subnet"]
    assert subnets and {s["inputs"]["vpcId"] for s in subnets} == {f"[mock: {vpc.id}]"}
    text = json.dumps(records)
    assert f'"{vpc.id}"' not in text  # never bare, as if AWS had assigned it
    assert '"us-west-2a"' in text  # a configured value stays as it is
