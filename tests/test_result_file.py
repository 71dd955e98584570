"""benchmarks/result_file.py: every runner's `--json FILE` is written one way, indented one level
and ending in a newline, into a folder made first (a machine's own sub-folder of results/)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("result_file", ROOT / "benchmarks" / "result_file.py")
result_file = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(result_file)


def test_a_result_goes_into_a_new_folder_indented_and_ending_in_a_newline(tmp_path):
    doc = {"meta": {"command": "benchmarks/x.py --json x.json"}, "rows": [{"mode": "auto", "s": 1.5}], "summary": None}
    path = tmp_path / "intel-xeon" / "x.json"
    result_file.write_result(path, doc)
    assert path.read_text() == json.dumps(doc, indent=1) + "\n"
    assert json.loads(path.read_text()) == doc
