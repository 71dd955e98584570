"""benchmarks/busy_machine.py's parts on a tiny GGUF: its setups measure what they name (adaptive
threads chosen per pass, fixed threads not), llama.cpp alone is timed on the same file, the summary's
ratios compare what they say, and the busy processes it starts are gone when it is done."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import psutil
import pytest

import edgespec.engine.engine
from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.engine.engine import Engine
from edgespec.models.registry import ModelSpec, PairConfig

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("busy_machine", ROOT / "benchmarks" / "busy_machine.py")
busy_machine = sys.modules["busy_machine"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(busy_machine)


@pytest.fixture()
def engine(tiny_gguf, tiny_draft_gguf, monkeypatch):
    monkeypatch.setattr(edgespec.engine.engine, "physical_cores", lambda: 2)
    monkeypatch.setattr(busy_machine, "physical_cores", lambda: 2)
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), ModelSpec("d", "gguf"), "model", 512)
    engine = Engine(pair, LlamaCppBackend(tiny_gguf, 512), LlamaCppBackend(tiny_draft_gguf, 512))
    yield engine
    engine.close()


def test_adaptive_setups_choose_the_count_and_fixed_ones_keep_one_per_core(engine):
    prompt = engine.chat_tokens([{"role": "user", "content": busy_machine.PROMPT}])
    policy = engine.threads
    engine.target.set_threads(1)
    fixed = busy_machine.measure_engine(engine, "ar-fixed", prompt, 16)
    assert fixed["threads"] == {} and engine.target.threads == engine.draft.threads == 2
    assert engine.threads is policy  # restored for the adaptive setups
    for setup in ("ar-adaptive", "auto-adaptive"):
        row = busy_machine.measure_engine(engine, setup, prompt, 16)
        assert row["ms_per_token"] > 0 and row["tokens"] > 1
        assert set(row["threads"]) <= {"1", "2"} and sum(row["threads"].values()) > 0


def test_llama_cpp_alone_runs_greedy_on_the_same_file(engine):
    once = busy_machine.llama_alone(engine.target.path, 2, n_ctx=512)[0]
    text = engine.target.chat_prompt([{"role": "user", "content": busy_machine.PROMPT}])
    row = once(text, 12)
    assert row["tokens"] >= 1 and row["ms_per_token"] >= 0 and row["threads"] == {"2": row["tokens"]}


def test_the_summary_compares_each_setup_with_itself_quiet_and_with_llama_cpp_under_the_same_load():
    rows = [
        {"setup": s, "load": load, "ms_per_token": ms}
        for s, load, ms in [
            ("ar-adaptive", "quiet", 70.0),
            ("ar-adaptive", "quiet", 80.0),
            ("ar-adaptive", "busy", 100.0),
            ("llama.cpp", "quiet", 60.0),
            ("llama.cpp", "busy", 250.0),
        ]
    ]
    s = busy_machine.summarise(rows)
    assert s["ar-adaptive"]["quiet_ms_per_token"] == 75.0
    assert s["ar-adaptive"]["busy_speed_over_quiet"] == pytest.approx(0.75)
    assert s["ar-adaptive"]["busy_speed_over_llama_cpp"] == pytest.approx(2.5)
    assert s["ar-adaptive"]["quiet_speed_over_llama_cpp"] == pytest.approx(0.8)
    assert "busy_speed_over_llama_cpp" not in s["llama.cpp"]


@pytest.mark.subprocess
def test_the_busy_processes_run_while_measured_and_are_gone_after():
    with busy_machine.busy_cores(2, limit_s=20) as procs:
        pids = [p.pid for p in procs]
        assert all(busy_machine.BUSY_NAME in psutil.Process(pid).cmdline() for pid in pids)
        assert all(p.poll() is None for p in procs)
    assert all(p.poll() is not None for p in procs)
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
