"""benchmarks/known_text.py: a bad `--parts` or `--rounds` is refused before any model loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--parts", "retry,bogus", "takes retry and file, comma-separated, not 'retry,bogus'"),
        ("--parts", "", "takes retry and file, comma-separated, not ''"),
        ("--rounds", "0", "a whole number of rounds, at least 1, not '0'"),
        ("--rounds", "two", "a whole number of rounds, at least 1, not 'two'"),
    ],
)
def test_a_bad_argument_is_refused_before_anything_loads(flag, value, says):
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "known_text.py"), flag, value],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == ""
    assert f"argument {flag}: {says}" in r.stderr
