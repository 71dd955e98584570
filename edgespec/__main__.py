"""`python -m edgespec` runs the command line."""

from edgespec.cli import main

main()
