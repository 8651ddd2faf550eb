from llm_pd_eks_tools.core.cli import exit_with
from llm_pd_eks_tools.ops.verify.cli import main

exit_with("verify", main)
