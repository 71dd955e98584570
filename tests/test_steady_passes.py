"""Steady passes (issue 50, item 5): where a repeat would be decoded again, auto prices every pass of
a call from the curve the last calibration left (`decoding/costs/steady_curve.py`), so the same
request makes the same passes, and greedy the same reply, whatever this call's timings;
`live_timings` prices from them instead."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.costs.steady import SteadyCosts
from edgespec.decoding.costs.steady_curve import SteadyCurve
from edgespec.decoding.drafters import Draft
from edgespec.decoding.events import Step, Token
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.controller import AutoK
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import GenerateSettings
from tests.fakes import MarkovBackend, VirtualClock, fake_engine, simulated_time
from tests.policy_simulation import CPU, GPU, Hardware, Proposal, Sim, calibrated, constant

COPIES = constant(Proposal(12, 4, 0.7))  # copies that hold 70% a token: drafting pays on a quiet CPU


def ks(hw: Hardware, costs: CostModel) -> list[int]:
    """The pass shapes auto chooses over 300 rounds of the same copies on `hw`."""
    return Sim(hw, ngram=COPIES, seed=7).run(AutoK("ngram", costs), 300).ks()


def test_steady_pass_shapes_do_not_follow_the_timings():
    """Priced from a CPU's calibration, the passes run where a pass costs the same whatever its
    length (as a GPU's): the same shapes as on the CPU."""
    on_cpu, elsewhere = (ks(hw, SteadyCosts(calibrated(CPU, with_draft=False))) for hw in (CPU, GPU))
    assert on_cpu == elsewhere and max(on_cpu) > 1


def test_live_pass_shapes_follow_the_timings():
    on_cpu, elsewhere = (ks(hw, calibrated(CPU, with_draft=False)) for hw in (CPU, GPU))
    assert on_cpu != elsewhere


def test_steady_costs_record_every_pass_in_the_live_curve_and_move_nothing_themselves():
    live = calibrated(CPU, with_draft=False)
    steady = SteadyCosts(live)
    before = [steady.verify(n) for n in range(1, 18)]
    Sim(GPU, ngram=COPIES, seed=7).run(AutoK("ngram", steady), 100)
    assert [steady.verify(n) for n in range(1, 18)] == before
    assert [live.verify(n) for n in range(1, 18)] != before  # the live curve saw the passes


def fingerprint(costs: CostModel) -> tuple:
    """What a curve prices now: every pass length, a draft step, a read, an n-gram lookup."""
    return [costs.verify(n) for n in range(1, 18)], costs.draft_step, costs.read(64), costs.ngram_lookup


def test_every_timing_a_steady_curve_is_given_reaches_the_live_one_and_nothing_changes_it():
    """Each `observe_` method forwards to the live curve and moves nothing here; what would replace or
    refold the curve is refused. Every public method of CostModel is named below, so one added later
    must say which it is (else a steady curve would take it into its own copy unseen)."""
    live = calibrated(CPU, with_draft=False)
    steady = SteadyCosts(live)
    lookup_round = Step(drafted=3, accepted=1, drafted_ids=(1, 2, 3), rejected_ids=(3,), draft_s=0.5, verify_s=0.001)
    observes = {
        "observe_verify": (4, 0.001),
        "observe_draft": (2, 0.001),
        "observe_read": (64, 0.001),
        "observe_lookup": (0.5,),
        "observe_round": (lookup_round, Draft(ids=[1, 2, 3])),
    }
    refused = {"end_session": (), "restore": (live.to_dict(),), "calibrate": (MarkovBackend(),)}
    reads = {
        "verify",
        "verify_at_least",
        "shape",
        "read",
        "reach",
        "quiet_curve",
        "contradicted",
        "to_dict",
        "fixed_curve",
    }
    public = {name for name, v in vars(CostModel).items() if callable(v) and not name.startswith("_")}
    assert public == set(observes) | set(refused) | reads
    before = fingerprint(steady)
    for name, args in observes.items():
        seen = fingerprint(live)
        getattr(steady, name)(*args)
        assert fingerprint(live) != seen, name
        assert fingerprint(steady) == before, name
    for name, args in refused.items():
        with pytest.raises(TypeError):
            getattr(steady, name)(*args)
    assert fingerprint(steady) == before and steady.fixed_curve() == live.fixed_curve()


def test_forgotten_policies_are_made_afresh(own_calibration_file):
    """`forget_policies`: the next call starts with no policy learnt, as a new process does."""
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    settings = GenerateSettings(live_timings=True)
    with simulated_time(clock):
        kept = engine._policy(settings, steady=False)
        assert engine._policy(settings, steady=False) is kept
        engine.forget_policies()
        assert engine._policy(settings, steady=False) is not kept
    engine.close()


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
    steady = saved.pop("steady")
    old = CostModel()
    old.restore(saved)
    assert old.fixed_curve().verify == {n: round(s, 7) for n, s in old.quiet_curve().items()}
    assert SteadyCurve.from_dict(steady) == old.fixed_curve()
    for damaged in ({"verify": {"1": 0.01}}, {**steady, "verify": {"1": -1, "2": 0.02}}, {**steady, "draft_step": "x"}):
        with pytest.raises(ValueError):
            CostModel().restore({**saved, "steady": damaged})


# -- the engine -------------------------------------------------------------------------------------


def cpu_like(n: int) -> float:
    return 0.030 + 0.015 * (n - 1)


PROMPT = [*range(10, 30)] * 3 + [10, 11]


def two_calls(own_calibration_file, live: bool) -> list[tuple[list[int], list[int]]]:
    """The same greedy request in one home: once where a pass costs what the calibration measured,
    once in a new engine (the next process) after the first call's passes were kept, where every
    pass costs as much as a one-token pass; each call's pass shapes and tokens."""
    clock = VirtualClock()
    calls = []
    for verify in (cpu_like, lambda n: cpu_like(1)):
        engine = fake_engine(clock, verify=verify, draft_step=0.01)
        with simulated_time(clock):
            events = list(engine.generate_tokens(PROMPT, GenerateSettings(max_tokens=200, live_timings=live)))
        engine.close()
        shapes = [e.drafted for e in events if isinstance(e, Step)]
        calls.append((shapes, [e.id for e in events if isinstance(e, Token)]))
    return calls


def test_the_same_request_makes_the_same_passes_in_one_home_whatever_the_timings(own_calibration_file):
    (first_ks, first_ids), (then_ks, then_ids) = two_calls(own_calibration_file, live=False)
    assert first_ks == then_ks and first_ids == then_ids and max(first_ks) > 1


def test_with_live_timings_the_same_request_makes_other_passes_where_the_timings_differ(own_calibration_file):
    (first_ks, _), (then_ks, _) = two_calls(own_calibration_file, live=True)
    assert first_ks != then_ks


def test_steady_calls_in_one_engine_start_afresh(own_calibration_file):
    """What a policy learnt in an earlier call would change the next call's passes: each steady
    call has a policy of its own, priced from the same curve."""
    clock = VirtualClock()
    engine = fake_engine(clock, verify=cpu_like, draft_step=0.01)
    runs = []
    with simulated_time(clock):
        for prompt in (PROMPT, [*range(5, 40)] * 2, PROMPT):
            engine.empty_caches()
            events = engine.generate_tokens(prompt, GenerateSettings(max_tokens=150))
            runs.append([e.drafted for e in events if isinstance(e, Step)])
    engine.close()
    assert runs[0] == runs[2]


@pytest.mark.parametrize("as_new", [False, True])
def test_a_draft_model_that_read_the_prompt_before_is_priced_as_a_cold_one_in_steady_calls(as_new):
    """A second call finds the draft model holding the prompt (a server's next call, or a state the
    prompt cache loaded). Its catch-up, priced as routine, would let it draft where a cold call's
    would not, and the passes would part from a cold call's; `as_new` (set for steady calls) prices
    it as a cold call does until it reads, and then counts what it really reads."""
    drafter = ModelDrafter(MarkovBackend(seed=21, n_ctx=512))
    drafter.as_new = as_new
    drafter.begin(PROMPT)
    drafter.backend.eval(PROMPT, 1)  # read before: the prompt is cached
    drafter.begin(PROMPT)
    assert drafter.behind(PROMPT) == (len(PROMPT) if as_new else 1)  # it keeps all but the last token
    draft = drafter.propose(PROMPT + [10], 3, SamplingParams(), np.random.default_rng(0))
    assert draft.catch_up_tokens == 0 and drafter.behind(PROMPT + [10] + draft.ids) <= 1 + len(draft.ids)


@pytest.mark.parametrize(
    ("history", "settings", "steady"),
    [
        (False, GenerateSettings(max_tokens=50), True),
        (True, GenerateSettings(max_tokens=50), False),  # a repeat is served its earlier reply
        (True, GenerateSettings(max_tokens=50, decode_again=True), True),
        (True, GenerateSettings(max_tokens=50, sampling=SamplingParams(temperature=0.7, seed=3)), True),
        (False, GenerateSettings(max_tokens=50, live_timings=True), False),
    ],
    ids=["no-history", "history", "decode-again", "sampled", "live-timings"],
)
def test_passes_are_steady_wherever_the_history_will_not_serve_a_repeat(
    own_calibration_file, history, settings, steady
):
    """Steady passes cost some speed (more on a busy machine, where the thread count is held), so
    they apply only where asking again would decode again."""
    engine = fake_engine(VirtualClock(), verify=cpu_like, draft_step=0.01)
    try:
        assert engine._steady(settings, b"request digest" if history else None) is steady
    finally:
        engine.close()
