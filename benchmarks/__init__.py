"""Measurements and the pages they feed: each script here runs as `python benchmarks/x.py`
(benchmarks/README.md). This file makes the folder a package only so that the import contract
(pyproject.toml, [tool.importlinter]) reads it: edgespec never imports a benchmark."""
