"""Bad input to the tools: refused with one line and the documented exit code, before anything is written.

Every case here is a usage error (exit 2) that used to delete or write files outside `build/`, or
end as an "internal error" (exit 70); each asserts what was (not) written as well as the code.
"""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import sys

import pytest
from helpers import ROOT

from llm_pd_eks_tools.core import cli
from llm_pd_eks_tools.core.cli import Exit
from llm_pd_eks_tools.plan.preview import diff as preview_diff
from llm_pd_eks_tools.plan.preview.__main__ import main as preview_main


def snapshot(path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# -- class 1: a stack name or a root that is a path damages nothing ----------------------------------


def test_a_stack_name_that_is_a_path_touches_nothing_there(tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "summary.md").write_text("someone's notes\n")  # names a preview would clear and rewrite
    (victim / "resources.json").write_text("[1, 2, 3]\n")
    before = snapshot(victim)
    for stack in (str(victim), f"../../../{victim.name}", "dev/../../x"):
        code = cli.run("preview", preview_main, ["--stack", stack, "--quiet"])
        line = one_error_line(capsys.readouterr().err)
        assert code == Exit.USAGE and "is not a Pulumi stack name" in line, line
    assert snapshot(victim) == before
    assert not (ROOT / "build" / "preview" / "dev" / ".." / ".." / "x").exists()


def test_a_root_that_does_not_exist_is_not_created(tmp_path, capsys):
    missing = tmp_path / "nonexistent"
    code = cli.run("preview", preview_main, ["--stack", "dev", "--root", str(missing), "--quiet"])
    line = one_error_line(capsys.readouterr().err)
    assert code == Exit.USAGE and "no such directory" in line
    assert not missing.exists()


def test_a_root_without_a_pulumi_project_is_refused(tmp_path, capsys):
    code = cli.run("preview", preview_main, ["--stack", "dev", "--root", str(tmp_path), "--quiet"])
    line = one_error_line(capsys.readouterr().err)
    assert code == Exit.USAGE and "no Pulumi.yaml there" in line
    assert list(tmp_path.iterdir()) == []


# -- class 2: --out at a file or an unwritable place is a usage error -------------------------------


def test_out_at_a_file_is_a_usage_error_and_the_file_survives(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("keep me\n")
    code = cli.run("preview", preview_main, ["--stack", "dev", "--out", str(target), "--quiet"])
    line = one_error_line(capsys.readouterr().err)
    assert code == Exit.USAGE and "is not a directory" in line
    assert target.read_text() == "keep me\n"


def test_out_under_a_file_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code = cli.run("preview", preview_main, ["--stack", "dev", "--out", str(tmp_path / "file" / "sub"), "--quiet"])
    line = one_error_line(capsys.readouterr().err)
    assert code == Exit.USAGE and "cannot be created" in line


def test_out_where_nobody_may_create_a_directory_is_a_usage_error(capsys):
    # sysfs refuses mkdir to every user, root included (the tests may run as root, where chmod binds nobody)
    code = cli.run("preview", preview_main, ["--stack", "dev", "--out", "/sys/llm-pd-eks-preview", "--quiet"])
    line = one_error_line(capsys.readouterr().err)
    assert code == Exit.USAGE and "cannot be created (Operation not permitted)" in line


def test_out_holding_foreign_files_is_left_alone(tmp_path, capsys):
    (tmp_path / "thesis.tex").write_text("years of work")
    (tmp_path / "summary.md").write_text("old")
    before = snapshot(tmp_path)
    code = cli.run("preview", preview_main, ["--stack", "dev", "--out", str(tmp_path), "--quiet"])
    line = one_error_line(capsys.readouterr().err)
    assert code == Exit.USAGE and "holds files this tool did not write (thesis.tex)" in line
    assert snapshot(tmp_path) == before  # not even a failure summary.md


# -- class 9: a policy config that is not a JSON object is bad input (2), not a pack failure (4) -----


@pytest.mark.parametrize("text, kind", [("[1, 2]", "list"), ('"all"', "str"), ("3", "int"), ("null", "NoneType")])
def test_a_policy_config_that_is_not_an_object_exits_2(tmp_path, capsys, text, kind):
    config = tmp_path / "policy-config.json"
    config.write_text(text)
    out = tmp_path / "out"
    code = cli.run(
        "preview", preview_main, ["--stack", "dev", "--policy-config", str(config), "--out", str(out), "--quiet"]
    )
    line = one_error_line(capsys.readouterr().err)
    assert code == Exit.USAGE and f"a JSON {kind} where an object" in line, line


def test_a_policy_config_that_is_not_json_exits_2(tmp_path, capsys):
    config = tmp_path / "policy-config.json"
    config.write_bytes(b"\xff\xfe{")
    code = cli.run("preview", preview_main, ["--stack", "dev", "--policy-config", str(config), "--quiet"])
    assert code == Exit.USAGE and "cannot be read" in one_error_line(capsys.readouterr().err)


# -- the preview diff: the same checks before its directory is cleared -------------------------------


def test_preview_diff_refuses_a_path_as_stack_and_foreign_out(tmp_path, capsys):
    code = cli.run("preview-diff", preview_diff.main, ["--base", "HEAD", "--stack", str(tmp_path)])
    assert code == Exit.USAGE and "is not a Pulumi stack name" in one_error_line(capsys.readouterr().err)
    (tmp_path / "mine.txt").write_text("mine")
    code = cli.run("preview-diff", preview_diff.main, ["--base", "HEAD", "--stack", "dev", "--out", str(tmp_path)])
    assert code == Exit.USAGE and "did not write (mine.txt)" in one_error_line(capsys.readouterr().err)
    assert (tmp_path / "mine.txt").read_text() == "mine"
    code = cli.run("preview-diff", preview_diff.main, ["--base", "HEAD", "--root", str(tmp_path / "no")])
    assert code == Exit.USAGE and "no such directory" in one_error_line(capsys.readouterr().err)


# -- shared argument types --------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "0", "-3", "ten", ""])
def test_seconds_refuses_what_is_not_a_finite_positive_duration(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        cli.seconds(text)


def test_seconds_accepts_durations():
    assert cli.seconds("0.5") == 0.5 and cli.seconds("600") == 600.0
    assert cli.non_negative_seconds("0") == 0.0
    assert math.isnan(float("nan"))  # the value the parser used to let through


def test_a_closed_pipe_is_not_a_traceback():
    """`python -m llm_pd_eks_tools.gates.placeholders ... | head -0`: the reader leaves; no BrokenPipeError trace."""
    script = (
        "import sys\nfrom llm_pd_eks_tools.core.cli import exit_with\n"
        "def main(argv):\n    for i in range(100000):\n        print('line', i)\n    return 0\n"
        "exit_with('demo', main)\n"
    )
    proc = subprocess.run(
        f"{shlex.quote(sys.executable)} -c {shlex.quote(script)} | head -1",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout == "line 0\n"
    assert "BrokenPipeError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# -- class 5: stack files read as the Pulumi CLI reads them (gopkg.in/yaml.v3) ----------------------

# (plain scalar, what yaml.v3's resolve gives it): the oracle is go-yaml/yaml branch v3 resolve.go,
# read case by case (the map of special values, the 'D'/'S' hint branch: timestamps aside,
# `_` dropped, strconv.ParseInt(s, 0, 64), ParseUint, the float pattern, 0b/-0b, 0o/-0o).
V3_TABLE = [
    ("1:0", "1:0"),
    ("1:30:00", "1:30:00"),
    ("190:20:30", "190:20:30"),  # no base 60 in YAML 1.2
    ("yes", "yes"),
    ("Yes", "Yes"),
    ("no", "no"),
    ("on", "on"),
    ("off", "off"),
    ("y", "y"),
    ("n", "n"),
    ("true", True),
    ("True", True),
    ("TRUE", True),
    ("tRUE", "tRUE"),
    ("false", False),
    ("FALSE", False),
    ("", None),
    ("~", None),
    ("null", None),
    ("Null", None),
    ("NULL", None),
    ("nULL", "nULL"),
    ("0o17", 15),
    ("-0o17", -15),
    ("017", 15),
    ("0x1F", 31),
    ("-0x10", -16),
    ("0b101", 5),
    ("-0b101", -5),
    ("1_000", 1000),
    ("1__0", 10),
    ("+5", 5),
    ("-0", 0),
    ("08", 8.0),
    ("09.5", 9.5),
    ("1.5", 1.5),
    ("1e3", 1000.0),
    ("-1.5E-2", -0.015),
    (".5", 0.5),
    ("1.", 1.0),
    ("9223372036854775807", 2**63 - 1),
    ("9223372036854775808", 2**63),
    ("18446744073709551616", 2.0**64),
    ("0x", "0x"),
    ("0b2", "0b2"),
    ("1.2.3", "1.2.3"),
    ("+", "+"),
    ("-x", "-x"),
    ("1e", "1e"),
    ("12abc", "12abc"),
]


@pytest.mark.parametrize("text, expected", V3_TABLE, ids=[repr(t) for t, _ in V3_TABLE])
def test_plain_scalars_resolve_as_yaml_v3_resolves_them(text, expected):
    from llm_pd_eks_tools.core.stackfile import parse

    value = parse(f"v: {text}\n" if text else "v:\n", "x.yaml")["v"]
    assert value == expected and type(value) is type(expected), (text, value)


@pytest.mark.parametrize("text, expected", [(".inf", math.inf), ("-.Inf", -math.inf), ("+.INF", math.inf)])
def test_infinities(text, expected):
    from llm_pd_eks_tools.core.stackfile import parse

    assert parse(f"v: {text}\n", "x.yaml")["v"] == expected
    assert math.isnan(parse("v: .NaN\n", "x.yaml")["v"])


def test_a_top_level_value_reaches_the_program_as_its_source_text(tmp_path):
    """The CLI unmarshals a top-level config value into a string first: `0x10` stays "0x10"."""
    from llm_pd_eks_tools.core.stack import load_stack_config as load

    (tmp_path / "Pulumi.dev.yaml").write_text(
        "config:\n  aws:region: us-west-2\n  llm-pd-eks:a: 0x10\n  llm-pd-eks:b: TRUE\n  llm-pd-eks:c: 1:0\n"
        "  llm-pd-eks:d: ~\n  llm-pd-eks:e: '017'\n  llm-pd-eks:f:\n    n: 0o17\n    m: 1:0\n    o: on\n"
    )
    values, _ = load("dev", tmp_path)
    assert values["llm-pd-eks:a"] == "0x10" and values["llm-pd-eks:b"] == "TRUE" and values["llm-pd-eks:c"] == "1:0"
    assert values["llm-pd-eks:d"] == "" and values["llm-pd-eks:e"] == "017"
    assert values["llm-pd-eks:f"] == '{"n": 15, "m": "1:0", "o": "on"}'  # objects: resolved, then JSON


def test_a_sexagesimal_count_is_refused_as_pulumi_would_hand_it_over(tmp_path):
    """`maxSize: 1:0` was 60 to PyYAML; to Pulumi it is the string "1:0", which the config model refuses."""
    from llm_pd_eks.config import ConfigError, validate_stack_config
    from llm_pd_eks_tools.core.stack import load_stack_config
    from llm_pd_eks_tools.core.stackfile import engine_config

    text = (ROOT / "Pulumi.dev.yaml").read_text().replace("    maxSize:", "    maxSize: 1:0\n    x-old-maxSize:", 1)
    assert "maxSize: 1:0" in text
    (tmp_path / "Pulumi.dev.yaml").write_text(text.replace("    x-old-maxSize:", "    # was:", 1))
    values, secrets = load_stack_config("dev", tmp_path)
    project = {k.split(":", 1)[1]: v for k, v in values.items() if k.startswith("llm-pd-eks:")}
    with pytest.raises(ConfigError) as info:
        validate_stack_config(project, "us-west-2", [k.split(":", 1)[1] for k in secrets])
    assert "maxSize" in str(info.value)
    assert engine_config  # the one conversion both paths use


# -- class 5: configs AWS or vLLM would refuse ---------------------------------------------------------


def test_gp3_iops_above_500_per_gib_is_refused():
    from helpers import config_problems, validate_values

    base = {
        "network": {"availabilityZones": ["us-west-2a", "us-west-2b"]},
        "gpuNodes": {"instanceType": "p5.48xlarge", "availabilityZone": "us-west-2a"},
    }
    ok = {**base, "systemNodes": {"diskSizeGib": 20, "rootVolumeIops": 10000}}
    assert validate_values(ok).system_nodes.root_volume_iops == 10000  # exactly 500 per GiB
    (problem,) = config_problems({**base, "systemNodes": {"diskSizeGib": 20, "rootVolumeIops": 10001}})
    assert "rootVolumeIops 10001 exceeds gp3's 500 IOPS per GiB on a 20 GiB volume (at most 10000" in problem
    (problem,) = config_problems(
        {
            **base,
            "gpuNodes": {
                **base["gpuNodes"],
                "diskSizeGib": 100,
                "rootVolumeIops": 60000,
                "rootVolumeThroughputMibps": 500,
            },
        }
    )
    assert "on a 100 GiB volume (at most 50000" in problem


@pytest.mark.parametrize(
    "model, native", [("Qwen/Qwen2.5-7B-Instruct", 32768), ("meta-llama/Llama-3.1-8B-Instruct", 131072)]
)
def test_max_model_len_above_the_native_context_is_refused(model, native):
    from helpers import config_problems, validate_values

    def values(length):
        return {
            "network": {"availabilityZones": ["us-west-2a", "us-west-2b"]},
            "gpuNodes": {"instanceType": "p5.48xlarge", "availabilityZone": "us-west-2a"},
            "serving": {
                "modelId": model,
                "maxModelLen": length,
                "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-llm:2.60.0-py311-cu128",
            },
        }

    secret = ["llm-pd-eks:hfToken"] if "llama" in model else []
    extra = {"hfToken": "[secret-placeholder]"} if secret else {}
    assert validate_values({**values(native), **extra}, secret_keys=secret).serving.max_model_len == native
    problems = config_problems({**values(native + 1), **extra}, secret_keys=secret)
    # Llama's native context is also the model-wide bound MAX_MODEL_LEN: the field's own limit says it first
    words = f"above {model}'s native context of {native} tokens" if native < 131072 else "less than or equal to 131072"
    assert any(words in p for p in problems), problems


# -- class 6: no tool prints a secret's value --------------------------------------------------------------

SECRET_VALUE = "hf_PlainTextTokenThatMustNeverBePrinted"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzSECRETKEY"


def stack_with_plain_secrets(tmp_path, name: str) -> str:
    text = (ROOT / f"Pulumi.{name}.yaml").read_text()
    lines = [line for line in text.splitlines() if "hfToken" not in line and "secure:" not in line]
    lines += [f"  llm-pd-eks:hfToken: {SECRET_VALUE}", f"  aws:secretKey: {AWS_SECRET}"]
    return "\n".join(lines) + "\n"


def test_no_tool_prints_a_secret_value_it_was_given(tmp_path):
    import shutil

    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    for name in ("staging", "prod"):
        (root / f"Pulumi.{name}.yaml").write_text(stack_with_plain_secrets(tmp_path, name))
    (root / "Pulumi.prod.yaml").write_text(
        (root / "Pulumi.prod.yaml").read_text().replace(SECRET_VALUE, SECRET_VALUE + "Prod")
    )
    outputs = []
    for argv in (
        ["-m", "llm_pd_eks_tools.gates.promote_check", "--from", "staging", "--to", "prod", "--root", str(root)],
        [
            "-m",
            "llm_pd_eks_tools.plan.preview",
            "--stack",
            "prod",
            "--root",
            str(root),
            "--out",
            str(tmp_path / "p"),
            "--quiet",
        ],
    ):
        proc = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)
        outputs.append((argv[1], proc.returncode, proc.stdout + proc.stderr))
    for tool, _code, text in outputs:
        assert SECRET_VALUE not in text and AWS_SECRET not in text, (tool, text)
        assert "Traceback" not in text, (tool, text)
    promote = outputs[0][2]
    assert "llm-pd-eks:hfToken: staging=(plain-text secret" in promote
    assert outputs[1][1] == Exit.USAGE and "set in plain text" in outputs[1][2]
    summary = (tmp_path / "p" / "summary.md").read_text()
    assert SECRET_VALUE not in summary


# -- class 9: promote-check names an unknown key as one, not as per-environment ---------------------------


def test_promote_check_calls_a_typo_a_typo(tmp_path):
    from llm_pd_eks_tools.gates.promote_check import compare_configs

    report = compare_configs(
        "staging",
        {"llm-pd-eks:servng.modelId": "a", "llm-pd-eks:serving.modelId": "m"},
        "prod",
        {"llm-pd-eks:serving.modelId": "n"},
    )
    text = report.render()
    assert "llm-pd-eks:servng.modelId: not a config key of this project (a typo?)" in text
    last = text.splitlines()[-1]
    assert last.count("PER_ENVIRONMENT") == 1 and last.index("serving.modelId") < last.index("PER_ENVIRONMENT")
    assert "servng" not in last[: last.index("PER_ENVIRONMENT")]


# -- class 2 and 9: AWS environment handed to preflight ---------------------------------------------------


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("AWS_ENDPOINT_URL", "http://[::1", "is not a URL"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:99999", "is not a URL"),
        ("AWS_ENDPOINT_URL_EC2", "http://127.0.0.1:port", "is not a URL"),
        ("AWS_ENDPOINT_URL", "127.0.0.1:5000", "is not a URL"),
        ("AWS_CA_BUNDLE", "/nonexistent/ca-bundle.pem", "AWS_CA_BUNDLE='/nonexistent/ca-bundle.pem' is not a file"),
    ],
)
def test_preflight_refuses_a_malformed_aws_environment(name, value, words):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        {
            name: value,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.ops.preflight", "--stack", "dev"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == Exit.USAGE, proc.stderr
    assert words in one_error_line(proc.stderr)


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5"])
def test_preflight_refuses_a_deadline_that_is_not_a_duration(value):
    proc = subprocess.run(
        [sys.executable, "-m", "llm_pd_eks_tools.ops.preflight", "--stack", "dev", "--deadline", value],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == Exit.USAGE and "--deadline" in one_error_line(proc.stderr)


# -- class 9: a stack name starting with `-` passes through make as a value; nothing reaches the shell ------


def _make(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run(
        ["make", "--no-print-directory", f"PY={sys.executable}", "STAMP=", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("target", ["placeholders", "verify", "resolve-image"])  # none writes for an unknown stack
def test_a_stack_name_starting_with_a_dash_reaches_the_tool(target):
    proc = _make(target, "STACK=-canary")
    first = next(line for line in proc.stderr.splitlines() if not line.startswith("[preview]"))  # progress
    assert first.endswith(
        "no stack file Pulumi.-canary.yaml; stacks here: dev, prod, staging (or create it: `pulumi stack init -canary`)"
    ), proc.stderr
    assert "expected one argument" not in proc.stderr


def test_promote_check_from_with_a_dash_and_quotes_is_one_word(tmp_path):
    marker = tmp_path / "injected"
    proc = _make("promote-check", f"FROM=-x';touch {marker};'", "TO=prod")
    assert not marker.exists()
    assert "is not a Pulumi stack name" in proc.stderr.splitlines()[0]
