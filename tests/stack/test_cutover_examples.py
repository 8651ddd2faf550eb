"""docs/day-two.md's previewed cut-over and minor upgrade are what the program's plans say today."""

from __future__ import annotations

from llm_pd_eks_tools.plan.cutover_examples import DOC, EXAMPLES, rewrite


def test_the_documented_examples_are_current():
    text = DOC.read_text()
    assert rewrite(text) == text, "run `python -m llm_pd_eks_tools.plan.cutover_examples --write`"
    for name in EXAMPLES:
        assert f"<!-- cutover-example:{name} -->\n```text\nPreview of " in text
