"""`python -m llm_pd_eks_tools.preview_diff`: the old entry point of preview-diff, kept working.

The tool lives in llm_pd_eks_tools/preview/diff.py (`python -m llm_pd_eks_tools.preview.diff`, what `make preview-diff`
runs). This is a package, not a llm_pd_eks_tools/preview_diff.py module, so that git still sees the move of
llm_pd_eks_tools/preview_diff.py to llm_pd_eks_tools/preview/diff.py as a rename when branches that
edited it are merged.
"""
