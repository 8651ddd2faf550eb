from tools.cli import exit_with
from tools.verify.cli import main

exit_with("verify", main)
