"""Steady passes (issue 50, item 5): by default auto prices every pass of a call from the curve the
last calibration left (`decoding/policy/steady_curve.py`), so the same request makes the same passes,
and greedy the same reply, whatever this call's timings; `live_timings` prices from them instead."""

from __future__ import annotations

import json

import pytest

from edgespec.decoding.events import Step, Token
from edgespec.decoding.policy.controller import AutoK
from edgespec.decoding.policy.costs import CostModel
from edgespec.decoding.policy.steady_costs import SteadyCosts
from edgespec.decoding.policy.steady_curve import SteadyCurve
from edgespec.engine.engine import GenerateSettings
from tests.fakes import VirtualClock, fake_engine, simulated_time
from tests.policy_simulation import CPU, Hardware, Proposal, Sim, calibrated, constant

# The same machine, busy: every pass over more than one token takes three times as long.
BUSY = Hardware("busy cpu", lambda n: CPU.verify(n) * (3.0 if n > 1 else 1.0), CPU.draft)
COPIES = constant(Proposal(12, 4, 0.7))  # copies that hold 70% a token: drafting pays on a quiet CPU


def ks(hw: Hardware, costs: CostModel) -> list[int]:
    """The pass shapes auto chooses over 300 rounds of the same copies on `hw`."""
    return Sim(hw, ngram=COPIES, seed=7).run(AutoK("ngram", costs), 300).ks()


def test_steady_pass_shapes_do_not_follow_the_timings():
    quiet, busy = (ks(hw, SteadyCosts(calibrated(CPU, with_draft=False))) for hw in (CPU, BUSY))
    assert quiet == busy and max(quiet) > 1


def test_live_pass_shapes_follow_the_timings():
    quiet, busy = (ks(hw, calibrated(CPU, with_draft=False)) for hw in (CPU, BUSY))
    assert quiet != busy


def test_steady_costs_record_every_pass_in_the_live_curve_and_move_nothing_themselves():
    live = calibrated(CPU, with_draft=False)
    steady = SteadyCosts(live)
    before = [steady.verify(n) for n in range(1, 18)]
    Sim(BUSY, ngram=COPIES, seed=7).run(AutoK("ngram", steady), 100)
    assert [steady.verify(n) for n in range(1, 18)] == before
    assert live.verify(9) > 2 * CPU.verify(9)  # the live curve saw the busy passes


def test_the_steady_curve_is_saved_and_restored_as_it_was_while_live_passes_refine_the_quiet_one():
    costs = calibrated(CPU)
    fixed = costs.fixed_curve()
    for _ in range(5):
        costs.observe_verify(4, CPU.verify(4) / 3)
    costs.end_session()
    assert costs.quiet_curve()[4] < fixed.verify[4]
    restored = CostModel()
    restored.restore(json.loads(json.dumps(costs.to_dict())))
    assert restored.fixed_curve() == fixed and restored.quiet_curve()[4] < fixed.verify[4]


def test_a_curve_saved_without_a_steady_curve_takes_its_quiet_curve_and_a_damaged_one_is_refused():
    saved = calibrated(CPU).to_dict()
    del saved["steady"]
    old = CostModel()
    old.restore(saved)
    assert old.fixed_curve() == SteadyCurve.of(old.quiet_curve(), CPU.draft, None, False)
    for damaged in ({"verify": {"1": 0.01}}, {**saved, "verify": {"1": -1, "2": 0.02}}, "x"):
        with pytest.raises(ValueError):
            CostModel().restore({**saved, "steady": damaged})


# -- the engine -------------------------------------------------------------------------------------


def cpu_like(n: int) -> float:
    return 0.030 + 0.015 * (n - 1)


PROMPT = [*range(10, 30)] * 3 + [10, 11]


def two_calls(own_calibration_file, live: bool) -> list[tuple[list[int], list[int]]]:
    """The same greedy request in one home: once on a quiet machine, once in a new engine (the next
    process) on a busy one, after the first call's passes were kept; each call's pass shapes and
    tokens."""
    clock, slow = VirtualClock(), [1.0]
    calls = []
    for slow[0] in (1.0, 3.0):
        engine = fake_engine(clock, verify=lambda n: cpu_like(n) * (slow[0] if n > 1 else 1.0), draft_step=0.01)
        with simulated_time(clock):
            events = list(engine.generate_tokens(PROMPT, GenerateSettings(max_tokens=150, live_timings=live)))
        engine.close()
        calls.append(([e.k for e in events if isinstance(e, Step)], [e.id for e in events if isinstance(e, Token)]))
    return calls


def test_the_same_request_makes_the_same_passes_in_one_home_whatever_the_timings(own_calibration_file):
    (quiet_ks, quiet_ids), (busy_ks, busy_ids) = two_calls(own_calibration_file, live=False)
    assert quiet_ks == busy_ks and quiet_ids == busy_ids and max(quiet_ks) > 1


def test_with_live_timings_the_same_request_makes_other_passes_on_a_busy_machine(own_calibration_file):
    (quiet_ks, _), (busy_ks, _) = two_calls(own_calibration_file, live=True)
    assert quiet_ks != busy_ks


def test_steady_calls_in_one_engine_start_afresh(own_calibration_file):
    """What a policy learnt in an earlier call would change the next call's passes: each steady
    call has a policy of its own, priced from the same curve."""
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    runs = []
    with simulated_time(clock):
        for prompt in (PROMPT, [*range(5, 40)] * 2, PROMPT):
            engine.empty_caches()
            runs.append(
                [e.k for e in engine.generate_tokens(prompt, GenerateSettings(max_tokens=150)) if isinstance(e, Step)]
            )
    engine.close()
    assert runs[0] == runs[2]
