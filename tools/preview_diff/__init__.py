"""`python -m tools.preview_diff`: the old entry point of preview-diff, kept working.

The tool lives in tools/preview/diff.py (`python -m tools.preview.diff`, what `make preview-diff`
runs). This is a package, not a tools/preview_diff.py module, so that git still sees the move of
tools/preview_diff.py to tools/preview/diff.py as a rename when branches that edited it are merged.
"""
