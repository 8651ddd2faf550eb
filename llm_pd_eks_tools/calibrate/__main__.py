"""`python -m llm_pd_eks_tools.calibrate`: see llm_pd_eks_tools/calibrate/cli.py."""

from llm_pd_eks_tools.calibrate.cli import PROG, main
from llm_pd_eks_tools.cli import exit_with

exit_with(PROG, main)
