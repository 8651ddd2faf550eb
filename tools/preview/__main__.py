"""`python -m tools.preview`: what `make preview` runs."""

from tools.preview.render import run_and_exit

run_and_exit()
