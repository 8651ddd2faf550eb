"""`python -m llm_pd_eks_sizing.cost_audit`."""

from llm_pd_eks_sizing.cost_audit.cli import PROG, main
from llm_pd_eks_tools.core.cli import exit_with

if __name__ == "__main__":
    exit_with(PROG, main)
