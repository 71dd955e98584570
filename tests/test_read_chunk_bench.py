"""benchmarks/read_chunk.py: a bad `--sizes` is one line before any model loads, and a run without
512 (the column's base) still prints and renders."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("render", ROOT / "benchmarks" / "render.py")
render = sys.modules["render"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render)


def test_sizes_that_are_not_numbers_are_one_line_and_exit_2():
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "read_chunk.py"), "--sizes", "128,x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == ""
    assert "Invalid value for --sizes: '128,x' is not a list of token counts" in r.stderr


def test_a_run_without_512_renders_a_dash_for_the_ratio(tmp_path):
    meta = {"command": "benchmarks/read_chunk.py --sizes 128,32", "commit": "0" * 40, "dirty": False}
    rows = {"128": {"best_tok_s": 100.0, "median_tok_s": 99.0, "seconds": [10.0], "median_vs_512": None}}
    doc = {"meta": meta, "prompt_tokens": 1024, "rounds": 1, "chunks": rows}
    (tmp_path / "read_chunk.json").write_text(json.dumps(doc))
    assert render.read_chunk(tmp_path)[2].endswith("| 128 | 99.0 (100.0) | - |")
