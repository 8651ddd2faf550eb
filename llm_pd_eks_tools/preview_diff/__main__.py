"""`python -m llm_pd_eks_tools.preview_diff` = `python -m llm_pd_eks_tools.preview.diff`."""

import sys

from llm_pd_eks_tools.cli import run
from llm_pd_eks_tools.preview.diff import main

sys.exit(run("preview-diff", main))
