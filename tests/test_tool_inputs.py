"""Bad input to the tools: refused with one line and the documented exit code, before anything is written.

Every case here is a usage error (exit 2) that used to delete or write files outside `build/`, or
end as an "internal error" (exit 70); each asserts what was (not) written as well as the code.
"""

from __future__ import annotations

import math
import shlex
import subprocess
import sys

import pytest
from helpers import ROOT

from tools import cli
from tools.cli import Exit
from tools.preview import diff as preview_diff
from tools.preview.__main__ import main as preview_main


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
    code = cli.run("preview", preview_main, ["--stack", "dev", "--policy-config", str(config), "--out", str(out),
                                             "--quiet"])
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
    """`python -m tools.placeholders ... | head -0`: the reader leaves; no BrokenPipeError traceback."""
    script = ("import sys\nfrom tools.cli import exit_with\n"
              "def main(argv):\n    for i in range(100000):\n        print('line', i)\n    return 0\n"
              "exit_with('demo', main)\n")
    proc = subprocess.run(f"{shlex.quote(sys.executable)} -c {shlex.quote(script)} | head -1",
                          shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout == "line 0\n"
    assert "BrokenPipeError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
