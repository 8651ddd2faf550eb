"""The sizing product: the P/D sizing model, `make size`, calibration, the cost audit, the GPU real run, its evidence.

It stands on `llm_pd_eks` (the config and facts) and `llm_pd_eks_tools.core` (stack files, exit codes, bounded I/O).
"""
