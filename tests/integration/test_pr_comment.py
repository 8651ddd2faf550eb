"""The pull-request comment the workflow assembles: each stack's preview-diff first, then its whole
preview folded; a file over its share is pointed to rather than cut; the comment fits GitHub's limit.

The step's own shell script is run (up to the `gh api` calls) on artifacts laid out as
actions/download-artifact leaves them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from helpers import ROOT

GITHUB_COMMENT_LIMIT = 65536  # characters in an issue comment body


def comment_script() -> str:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "pull-request.yml").read_text())
    steps = workflow["jobs"]["comment"]["steps"]
    script = next(s["run"] for s in steps if s.get("name") == "Post or update one comment")
    return script.split("ids=$(gh api")[0]  # everything before talking to GitHub


def build(tmp_path: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        path = tmp_path / "previews" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    subprocess.run(
        ["bash", "-c", comment_script()], cwd=tmp_path, env={"SHA": "abc123", "PATH": "/usr/bin:/bin"}, check=True
    )
    return (tmp_path / "comment.md").read_text()


def test_diff_first_then_the_folded_preview(tmp_path):
    text = build(
        tmp_path,
        {
            "preview-dev/diff.md": "### Preview diff: stack `dev`\n",
            "preview-dev/summary.md": "### Offline preview: stack `dev`\n",
            "preview-prod/diff.md": "### Preview diff: stack `prod`\n",
        },
    )
    assert text.startswith("<!-- llm-pd-eks:offline-preview -->\n## Offline preview (`make preview`) at abc123")
    order = [text.index(part) for part in ("Preview diff: stack `dev`", "<b>dev</b>", "Offline preview: stack `dev`")]
    assert order == sorted(order)
    assert "_no preview diff of staging: see the job log_" in text
    assert "_no preview of prod: see the job log_" in text


def test_a_file_over_its_share_is_pointed_to_not_cut_and_the_comment_fits(tmp_path):
    mermaid = "```mermaid\nflowchart TB\n" + "  a --> b\n" * 2000 + "```\n"  # far over any share
    files = {}
    for stack in ("dev", "staging", "prod"):
        files[f"preview-{stack}/diff.md"] = "d" * 6999 + "\n"  # exactly at the diff's share
        files[f"preview-{stack}/summary.md"] = "s" * 13999 + "\n"  # exactly at the summary's share
    files["preview-prod/summary.md"] = mermaid
    text = build(tmp_path, files)
    assert "_the preview of prod is too long for a comment: see the job summary or the preview artifact_" in text
    assert "flowchart" not in text  # not half a chart
    assert text.count("d" * 6999) == 3 and text.count("s" * 13999) == 2
    # Every stack at its full share still fits.
    files["preview-prod/summary.md"] = "s" * 13999 + "\n"
    assert len(build(tmp_path, files)) <= GITHUB_COMMENT_LIMIT
