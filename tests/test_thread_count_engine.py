"""The thread count on real llama.cpp (a tiny GGUF): the backend changes it between passes, the engine
chooses it for a CPU pair unless the pair pins it, and a reply reports the counts its passes ran on."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import edgespec.engine.engine
from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.decoding.backend import Placement
from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.costs.thread_count import ThreadPolicy
from edgespec.decoding.events import Step, Summary
from edgespec.engine.engine import Engine, GenerateSettings, thread_policy
from edgespec.engine.stats_line import stats_line
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.util.hardware import OtherLoad, physical_cores
from tests.fakes import MarkovBackend

PAIR = PairConfig("p", "llamacpp", ModelSpec("t", "gguf"), ModelSpec("d", "gguf"), "model", 256)


@pytest.fixture()
def target(tiny_gguf):
    b = LlamaCppBackend(tiny_gguf, 256)
    yield b
    b.close()


@pytest.fixture()
def draft(tiny_draft_gguf):
    b = LlamaCppBackend(tiny_draft_gguf, 256)
    yield b
    b.close()


@pytest.fixture()
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine sees two cores to choose from, whatever this machine has."""
    monkeypatch.setattr(edgespec.engine.engine, "physical_cores", lambda: 2)


def test_the_backend_changes_llamacpps_thread_count_between_passes(target):
    ids = target.tokenize("def add(a, b):\n    return a + b\n")
    before = np.array(target.eval(ids, 1))
    target.set_threads(1)
    assert target.threads == 1
    assert target.placement == Placement("cpu", "1 thread", 1)
    target.truncate(0)
    np.testing.assert_allclose(target.eval(ids, 1), before, atol=1e-4)  # the same model, fewer threads
    target.set_threads(3)
    assert target.threads == 3 and target.placement.cpu_threads == 3
    with pytest.raises(ValueError):
        target.set_threads(0)


def test_a_cpu_pair_gets_a_policy_and_the_draft_model_follows_its_count(two_cores, target, draft):
    policy = thread_policy(PAIR, target, draft, Engine(PAIR, target, draft).costs)
    assert policy is not None and policy.most == 2
    policy._apply(1)
    assert target.threads == draft.threads == 1


def test_a_pinned_count_a_gpu_an_unknown_placement_or_a_runtime_without_the_call_is_not_tuned(two_cores, target, draft):
    costs = Engine(PAIR, target).costs
    assert thread_policy(replace(PAIR, threads=2), target, draft, costs) is None
    target.placement = Placement("gpu", "29/29 layers on CUDA0", 0)
    assert thread_policy(PAIR, target, None, costs) is None
    target.placement = Placement("unknown", "llama.cpp did not report its layers' devices", 2)
    assert thread_policy(PAIR, target, None, costs) is None
    assert thread_policy(PAIR, MarkovBackend(seed=1), None, costs) is None  # as the transformers backend
    target.placement = Placement("cpu", "2 threads", 2)
    draft.placement = Placement("gpu", "25/25 layers on CUDA0", 0)
    assert thread_policy(PAIR, target, draft, costs) is None


def test_one_core_leaves_nothing_to_choose(monkeypatch, target):
    monkeypatch.setattr(edgespec.engine.engine, "physical_cores", lambda: 1)
    assert Engine(PAIR, target).threads is None


def test_a_tuned_reply_reports_the_threads_its_passes_ran_on(two_cores, target, draft):
    engine = Engine(PAIR, target, draft)
    assert engine.threads is not None
    settings = GenerateSettings(max_tokens=24, live_timings=True)
    events = list(engine.generate_tokens(target.tokenize("def add(a, b):"), settings))
    steps, summary = [e for e in events if isinstance(e, Step)], events[-1]
    assert isinstance(summary, Summary)
    assert all(s.threads in (1, 2) for s in steps)
    assert sum(summary.threads.values()) == len(steps) == summary.target_passes
    assert "threads " in stats_line(summary)
    assert Summary.from_dict(summary.to_dict()).threads == summary.threads
    assert target.threads == draft.threads == engine.threads.count


def test_a_steady_reply_runs_at_the_models_count_whatever_the_load(two_cores, target, draft):
    """Only replies with live timings follow the load: the count can move a logit, so a reply that
    must repeat itself runs every pass at the count the models were loaded with."""
    engine = Engine(PAIR, target, draft)
    assert engine.threads is not None
    engine.threads._load = SimpleNamespace(sample=lambda: 2.0, since_last=lambda: 2.0)  # both cores taken
    prompt = target.tokenize("def add(a, b):")

    def counts(live: bool) -> list[int]:
        engine.empty_caches()
        events = engine.generate_tokens(prompt, GenerateSettings(max_tokens=24, live_timings=live))
        return [e.threads for e in events if isinstance(e, Step)]

    assert counts(live=True)[0] == 1  # started on the core left free (then probed as timings say)
    assert set(counts(live=False)) == {2} and target.threads == draft.threads == 2


def test_a_pinned_reply_reports_no_choice(target):
    engine = Engine(replace(PAIR, threads=2), target)
    summary = list(engine.generate_tokens(target.tokenize("def add(a, b):"), GenerateSettings(max_tokens=8)))[-1]
    assert isinstance(summary, Summary) and summary.threads == {}
    assert "threads" not in stats_line(summary)


def test_the_calibration_key_stays_while_the_count_moves(two_cores, target):
    engine = Engine(PAIR, target)
    key = engine._calibration_key()
    target.set_threads(1)
    assert engine._calibration_key() == key


@pytest.mark.subprocess
def test_cores_kept_busy_by_other_processes_start_a_reply_on_fewer_threads():
    """Busy processes of its own (one per core, each ending by itself within 20 s, and stopped at the
    end): the reading sees them, and the policy starts below the core count."""
    cores = physical_cores()
    if cores < 2:
        pytest.skip("one core: nothing to choose")
    spin = "import time\nend = time.monotonic() + 20\nwhile time.monotonic() < end: pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin, "edgespec-test-busy"]) for _ in range(cores)]
    try:
        load = OtherLoad()
        load.sample()  # the processes are running by now
        seen = max(load.sample() for _ in range(3))
        assert seen >= cores / 2
        policy = ThreadPolicy(cores, lambda n: None, CostModel(), load)
        assert policy.begin() < cores
    finally:
        for process in busy:
            process.kill()
            process.wait()
