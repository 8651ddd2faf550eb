"""What every tool stands on: exit codes and errors, bounded I/O and subprocesses, the stack-file reader."""
