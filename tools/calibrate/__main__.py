"""`python -m tools.calibrate`: see tools/calibrate/cli.py."""

from tools.calibrate.cli import PROG, main
from tools.cli import exit_with

exit_with(PROG, main)
