"""What a round costs (`decoding/costs/model.py`): the K that maximises expected tokens per
second, and the cost model, calibrated on fake backends in simulated time (`tests/fakes.py`)."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.decoding.costs.measuring import READ_PROBE
from edgespec.decoding.costs.model import CostModel, best_k
from edgespec.decoding.drafters import Draft, DrafterKind
from edgespec.decoding.events import Step
from tests.fakes import MarkovBackend, VirtualClock, simulated_time
from tests.policy_simulation import BF16, CPU, GPU


def expected_tokens(acceptance) -> list[float]:
    """E(K) for K = 0..len: 1 + sum_j prod_{i<=j} a_i."""
    out, survive = [1.0], 1.0
    for a in acceptance:
        survive *= a
        out.append(out[-1] + survive)
    return out


@pytest.mark.parametrize("hw", [CPU, GPU, BF16], ids=lambda h: h.name)
def test_best_k_is_the_brute_force_argmax_of_expected_tokens_over_cost(hw):
    rng = np.random.default_rng(0)
    for _ in range(200):
        acceptance = list(rng.uniform(0.0, 1.0, size=rng.integers(0, 13)))
        draft = hw.draft * rng.uniform(0, 2)
        cost = lambda k, draft=draft: k * draft + hw.verify(k + 1)  # noqa: E731
        k, rate = best_k(acceptance, cost)
        rates = [e / cost(j) for j, e in enumerate(expected_tokens(acceptance))]
        assert rate == pytest.approx(max(rates))
        assert rates[k] == pytest.approx(max(rates))
        assert k == rates.index(max(rates))  # ties go to the shorter draft


@pytest.mark.parametrize("a", [0.0, 0.3, 0.7, 0.95])
def test_best_k_for_equal_acceptance_follows_the_closed_form(a):
    cost = lambda k: k * GPU.draft + GPU.verify(k + 1)  # noqa: E731
    k, rate = best_k([a] * 16, cost)
    closed = [(1 - a ** (j + 1)) / (1 - a) / cost(j) for j in range(17)]
    assert rate == pytest.approx(max(closed))
    assert k == int(np.argmax(closed))


def test_best_k_prefers_plain_decoding_when_no_draft_pays():
    assert best_k([0.7] * 8, lambda k: k * CPU.draft + CPU.verify(k + 1)) == (0, pytest.approx(CPU.plain_rate))
    assert best_k([], lambda k: 0.5) == (0, 2.0)
    # a perfect drafter on a flat curve with free drafts: the longest draft
    assert best_k([1.0] * 5, lambda k: 0.01)[0] == 5


def test_cost_model_interpolates_between_and_extrapolates_beyond_measured_sizes():
    c = CostModel()
    assert not c.calibrated
    c.observe_verify(2, 0.040)
    assert c.verify(4) == pytest.approx(0.080)  # one point: proportional
    c.observe_verify(4, 0.060)
    assert c.calibrated
    assert c.verify(3) == pytest.approx(0.050)
    assert c.verify(8) == pytest.approx(0.100)  # the last slope
    assert c.verify(1) == pytest.approx(0.030)  # below the first point: the first slope
    c.observe_verify(4, 0.160)  # one slow pass moves the estimate by SMOOTH only
    assert c.verify(4) == pytest.approx(0.060 + CostModel.SMOOTH * 0.100)
    c.observe_draft(0, 1.0)  # nothing drafted: nothing learnt
    assert c.draft_step is None
    c.observe_draft(4, 0.040)
    assert c.draft_step == pytest.approx(0.010)


def test_what_a_reply_has_not_timed_lately_follows_the_load_the_rest_meets():
    """Under load (here every pass twice as dear, as on one thread of two) a reply that decodes
    plainly times only one-token passes. The sizes it has not timed, the draft step and the draft
    model's reading must rise with them: left at their quiet figures, drafting looked half price
    and `auto` drafted its way below plain decoding on a busy machine. When the load leaves, they
    come back down the same way."""
    clock = VirtualClock()
    target = MarkovBackend(cost=CPU.verify, clock=clock)
    draft = MarkovBackend(cost=lambda n: n * CPU.draft, clock=clock)
    costs = CostModel()
    with simulated_time(clock):
        costs.calibrate(target, draft)
    quiet, step, read = costs.quiet_curve(), costs.draft_step, costs.read_per_token
    assert step is not None and read is not None
    for load in (2.0, 1.0):
        for _ in range(40):
            costs.observe_verify(1, load * quiet[1], own_threads=load == 1.0)
        for n in (1, 2, 4, 8, 17):
            assert costs.verify(n) == pytest.approx(load * quiet[n], rel=0.02)
        assert costs.draft_step == pytest.approx(load * step, rel=0.02)
        assert costs.read_per_token == pytest.approx(load * read, rel=0.02)
    assert costs.quiet_curve() == pytest.approx(quiet)


@pytest.mark.parametrize("hw", [CPU, GPU, BF16], ids=lambda h: h.name)
def test_calibrate_measures_the_verify_curve_and_the_draft_step_and_rolls_back(hw):
    clock = VirtualClock()
    target = MarkovBackend(cost=hw.verify, clock=clock)
    draft = MarkovBackend(cost=lambda n: n * hw.draft, clock=clock)
    target.eval([1, 2, 3], 1)
    draft.eval([1, 2], 1)
    costs = CostModel()
    with simulated_time(clock):
        costs.calibrate(target, draft)
    for n in range(1, 18):  # every length the controller may verify (K up to 16, plus one)
        assert costs.verify(n) == pytest.approx(hw.verify(n))
    assert costs.draft_step == pytest.approx(hw.draft)
    assert target.cached == [1, 2, 3] and draft.cached == [1, 2]  # dummy tokens rolled back


def test_calibrate_keeps_the_fastest_timing_so_a_busy_moment_does_not_skew_the_curve():
    clock = VirtualClock()
    timed: dict[int, int] = {}

    def busy_at_first(n: int) -> float:  # another process holds the CPU during the first round
        timed[n] = timed.get(n, 0) + 1
        return CPU.verify(n) * (3.0 if timed[n] == 1 else 1.0)

    target = MarkovBackend(cost=busy_at_first, clock=clock)
    costs = CostModel()
    with simulated_time(clock):
        costs.calibrate(target)
    for n in range(1, 18):
        assert costs.verify(n) == pytest.approx(CPU.verify(n))


def test_calibrate_skips_sizes_that_do_not_fit_the_context():
    clock = VirtualClock()
    target = MarkovBackend(n_ctx=6, cost=CPU.verify, clock=clock)
    costs = CostModel()
    with simulated_time(clock):
        costs.calibrate(target)
    assert sorted(costs._verify) == [1, 2, 3, 4, 5, 6]
    assert costs.draft_step is None and target.cached == []


def test_the_draft_models_reading_is_timed_at_calibration_and_learnt_from_catch_ups():
    costs = CostModel()
    target, draft = MarkovBackend(per_token_s=0.0), MarkovBackend(n_ctx=512)
    costs.calibrate(target, draft, max_n=3, rounds=1)
    assert costs.read_per_token is not None and draft.cached == []
    assert READ_PROBE in draft.evals  # one batch of READ_PROBE tokens
    draft_ = Draft([1, 2], [None, None], [0.9, 0.9], catch_up_s=0.4, catch_up_tokens=200)
    before = costs.read_per_token
    costs.observe_round(Step(2, 2, (1, 2), (), 0.41, 0.01, drafter=DrafterKind.MODEL), draft_)
    assert costs.read_per_token > before  # 2 ms a token, against an instant fake's
