"""How a benchmark writes its result file (`--json FILE`): indented one level, one key per line,
ending in a newline, so that a re-run's diff shows the figures that moved and render.py reads
every runner's files the same way. The folder is made first: a result may go into a machine's own
sub-folder of results/ (benchmarks/README.md)."""

from __future__ import annotations

import json
from pathlib import Path


def write_result(path: Path, doc: dict) -> None:
    """Write `doc` (a result with its provenance) as JSON to `path`, making its folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
