"""benchmarks/auto_rounds.py: the shipped `auto` rounds (edgespec/data/auto_rounds.json) come from a
committed bench run of `auto` on the published file, counted the way `typical_call_s` replays them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from edgespec.models.config import load_registry

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("auto_rounds", ROOT / "benchmarks" / "auto_rounds.py")
auto_rounds = sys.modules["auto_rounds"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(auto_rounds)


@pytest.fixture(autouse=True)
def built_in_registry(tmp_path, monkeypatch):
    """The built-in pairs alone, whatever the user's models.toml says."""
    (tmp_path / "models.toml").write_text("")
    monkeypatch.setenv("EDGESPEC_CONFIG", str(tmp_path / "models.toml"))


def run_of(target: str, rows: list[dict]) -> dict:
    meta = {"command": "edgespec bench --modes ar,auto", "commit": "c0ffee", "targets": {"p": target}}
    return {"meta": meta, "rows": rows}


def test_passes_are_counted_by_drafted_tokens_and_the_first_token_is_the_prompt_s():
    rows = [
        {"mode": "auto", "pair": "p", "tokens": 7, "k_trace": [0, 3, 0, 16]},
        {"mode": "auto", "pair": "p", "tokens": 3, "k_trace": [0, 0]},
        {"mode": "ar", "pair": "p", "tokens": 9, "k_trace": [0] * 8},
        {"mode": "auto", "pair": "other", "tokens": 5, "k_trace": [4]},
    ]
    assert auto_rounds.rounds(run_of("t", rows), "p") == {"tokens": 8, "passes_by_k": {"0": 4, "3": 1, "16": 1}}


def test_a_run_on_the_published_file_is_written_with_the_run_it_came_from(tmp_path):
    pair = load_registry().pair(None)
    run = run_of(pair.target.name, [{"mode": "auto", "pair": pair.name, "tokens": 3, "k_trace": [1, 0]}])
    run["meta"]["targets"] = {pair.name: pair.target.name}
    source, out = tmp_path / "bench.json", tmp_path / "rounds.json"
    source.write_text(json.dumps(run))
    assert auto_rounds.main([str(source), "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert (written["source"], written["commit"], written["command"]) == (str(source), "c0ffee", run["meta"]["command"])
    assert (written["tokens"], written["passes_by_k"]) == (2, {"0": 1, "1": 1})


def test_the_committed_dev_run_is_refused_because_it_ran_on_a_derived_layout(tmp_path, capsys):
    """The committed bench_dev.json ran `auto` on the layout chosen for its machine: its rounds would
    price the published file on drafts chosen for a flatter curve, so they are not shipped."""
    out = tmp_path / "rounds.json"
    code = auto_rounds.main([str(ROOT / "benchmarks/results/bench_dev.json"), "--json", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert err.count("\n") == 1 and "not the published file" in err and "output-as-q4k" in err
