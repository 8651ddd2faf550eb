"""`python -m llm_pd_eks_tools.cost_audit`."""

from llm_pd_eks_tools.cli import exit_with
from llm_pd_eks_tools.cost_audit.cli import PROG, main

if __name__ == "__main__":
    exit_with(PROG, main)
