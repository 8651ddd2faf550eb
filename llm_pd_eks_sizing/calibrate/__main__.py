"""`python -m llm_pd_eks_sizing.calibrate`: see llm_pd_eks_sizing/calibrate/cli.py."""

from llm_pd_eks_sizing.calibrate.cli import PROG, main
from llm_pd_eks_tools.core.cli import exit_with

exit_with(PROG, main)
