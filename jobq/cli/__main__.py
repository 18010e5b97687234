"""`python -m jobq.cli`."""

from jobq.cli import main

main(prog_name="jobq")
