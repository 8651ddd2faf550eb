from llm_pd_eks_tools.cli import exit_with
from llm_pd_eks_tools.verify.cli import main

exit_with("verify", main)
