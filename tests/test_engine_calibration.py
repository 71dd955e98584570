"""The engine's calibration cache: measured once per machine and pair, reused, never overwritten
by what one run saw online (a busy spell would otherwise set the costs of every later run)."""

from __future__ import annotations

import json

import pytest

from edgespec.decoding.costs import CostModel
from edgespec.decoding.plan import KSetting
from edgespec.engine import GenerateSettings
from tests.fakes import VirtualClock, fake_engine, simulated_time


def cpu_like(n: int) -> float:
    return 0.030 + 0.015 * (n - 1)


def generate(engine, clock) -> None:
    prompt = engine.target.tokenize("def add(a, b):\n    return a + b\n\ndef add(")
    with simulated_time(clock):
        list(engine.generate_tokens(prompt, GenerateSettings(max_tokens=24)))


def test_calibration_is_saved_once_reused_and_not_overwritten_by_online_updates(own_calibration_file, monkeypatch):
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    generate(engine, clock)
    saved = json.loads(own_calibration_file.read_text())
    ((key, curve),) = saved.items()
    assert key.startswith("v3|")
    assert sorted(map(int, curve["verify"])) == list(range(1, 18))  # every length auto may verify
    assert curve["verify"]["3"] == pytest.approx(cpu_like(3))
    assert curve["draft_step"] == pytest.approx(0.01)

    engine.costs.observe_verify(2, 10.0)  # a busy spell seen online, in this process only
    engine.close()
    assert json.loads(own_calibration_file.read_text()) == saved

    def no_calibration(*args, **kwargs):
        raise AssertionError("a saved curve for this pair should have been reused")

    monkeypatch.setattr(CostModel, "calibrate", no_calibration)
    again = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    generate(again, clock)
    assert again.costs.verify(2) == pytest.approx(cpu_like(2))


def test_a_curve_saved_by_an_older_calibration_is_measured_again(own_calibration_file):
    """Entries without the "v3" mark timed a few lengths only (v2), or once each and were refined
    online (unmarked); they are not trusted."""
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like)
    key = engine._calibration_key()
    old = {"verify": {"1": 0.03, "2": 0.5}, "draft_step": None}
    own_calibration_file.write_text(json.dumps({key.removeprefix("v3|"): old, "v2|" + key.removeprefix("v3|"): old}))
    generate(engine, clock)
    assert engine.costs.verify(2) == pytest.approx(cpu_like(2))
    assert list(json.loads(own_calibration_file.read_text())) == [engine._calibration_key()]  # the old one went


@pytest.mark.parametrize("k", ["auto", "auto-chain"])
def test_every_cost_aware_policy_starts_from_the_measured_curve(own_calibration_file, k):
    """auto-chain, the chain baseline auto's trees are benched against, once started from the
    uncalibrated placeholder curve (1 s a pass at every length) and so never drafted with the model."""
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    prompt = engine.target.tokenize("def add(a, b):\n    return a + b\n\ndef add(")
    with simulated_time(clock):
        list(engine.generate_tokens(prompt, GenerateSettings(max_tokens=8, k=KSetting.parse(k))))
    assert engine.costs.calibrated
    assert engine.costs.verify(3) == pytest.approx(cpu_like(3), rel=0.5)
