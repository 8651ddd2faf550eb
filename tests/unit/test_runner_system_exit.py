"""`raise SystemExit("why")` is how a script says it failed: Python prints the message and exits 1.
The runner keeps that meaning (the GPU run's `ray start failed: ...` once vanished into a bare exit 2);
argparse's codes stay as they are."""

from __future__ import annotations

import argparse

import pytest

from llm_pd_eks_tools.core.cli import Exit, run


def raising(value):
    def main(argv):
        raise SystemExit(value)

    return main


def test_a_message_is_one_line_on_stderr_and_a_failure(capsys):
    assert run("tool", raising("ray start failed: No module named 'ray'\nmore"), []) == Exit.FAILED
    err = capsys.readouterr().err
    assert "ray start failed: No module named 'ray'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value, code", [(0, Exit.OK), (None, Exit.OK), (2, Exit.USAGE), (5, Exit.UNVERIFIED)])
def test_a_code_is_kept(value, code, capsys):
    assert run("tool", raising(value), []) == code
    assert capsys.readouterr().err == ""


def test_argparse_help_is_still_0(capsys):
    def main(argv):
        argparse.ArgumentParser(prog="tool").parse_args(["--help"])
        return 1

    assert run("tool", main, []) == Exit.OK
    assert "usage: tool" in capsys.readouterr().out
