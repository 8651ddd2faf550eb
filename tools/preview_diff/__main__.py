"""`python -m tools.preview_diff` = `python -m tools.preview.diff`."""

import sys

from tools.cli import run
from tools.preview.diff import main

sys.exit(run("preview-diff", main))
