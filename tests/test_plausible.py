"""Measured pass timings judged against each other (`decoding/costs/plausible.py`), and a
calibration that is cut short or whose sizes contradict each other marked provisional."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgespec.decoding.costs.interpolation import piecewise
from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.costs.plausible import implausible
from tests.fakes import MarkovBackend, VirtualClock, simulated_time
from tests.policy_simulation import BF16, CPU, GPU, REPACKED

# Verify curves seen on real machines (ms per pass by tokens), each of which must pass.
SEEN = {
    "Q4_K_M, 2-core AVX2": {1: 26.9, 2: 43.7, 3: 57.5, 4: 69.8, 6: 101, 8: 121, 12: 149, 16: 145},
    "IQ4_NL (4 cheaper than 3)": {1: 25.4, 2: 44.6, 3: 59.2, 4: 48.8, 6: 82, 8: 87, 12: 110, 16: 113},
    "Q8_0 (dearer per token at 2)": {1: 43.7, 2: 113, 3: 139, 4: 150, 6: 235, 8: 163, 12: 202, 16: 244},
    "AVX-512 to 256 (issue 49)": {1: 37, 2: 63, 4: 99, 8: 197, 16: 302, 32: 446, 64: 845, 128: 1661, 256: 3661},
    "this 2-core host to 256": {1: 59, 2: 95, 4: 105, 8: 188, 16: 226, 17: 276, 32: 392, 64: 713, 128: 1350, 256: 3261},
}
# Issue 50: a first run on a busy moment, cut at its budget with one timing per size, while a
# one-token pass costs 0.05 s (live passes, which run every reply, taught that size).
BUSY = {1: 0.05, **{n: 1.53 + (2.38 - 1.53) * (n - 2) / 15 for n in range(2, 18)}}


@pytest.mark.parametrize("curve", SEEN.values(), ids=list(SEEN))
def test_curves_real_machines_have_pass(curve):
    assert implausible(curve) == set()


@pytest.mark.parametrize("hw", [CPU, GPU, BF16, REPACKED], ids=lambda h: h.name)
def test_the_simulated_machines_pass(hw):
    assert implausible({n: hw.verify(n) for n in (*range(1, 18), 32, 64, 128, 256)}) == set()


def test_the_busy_first_measurement_of_issue_50_is_implausible():
    assert implausible(BUSY) == set(range(2, 18))


@st.composite
def plausible_curves(draw) -> dict[int, float]:
    """Curves no busy moment touched: a longer pass costs no less in all, and no more per token.
    Each size at most doubles the one before, as a calibration's do."""
    sizes = [draw(st.integers(1, 4))]
    for _ in range(draw(st.integers(1, 23))):
        sizes.append(sizes[-1] + draw(st.integers(1, sizes[-1])))
    curve = {sizes[0]: draw(st.floats(1e-4, 1.0))}
    for n, m in zip(sizes, sizes[1:], strict=False):
        curve[m] = curve[n] * (1 + draw(st.floats(0, 1)) * (m / n - 1))
    return curve


@given(plausible_curves(), st.data())
def test_a_plausible_curve_passes_and_any_size_five_times_dearer_is_caught(curve, data):
    assert implausible(curve) == set()
    busy = data.draw(st.sampled_from(sorted(curve)))
    assert busy in implausible({**curve, busy: 5 * curve[busy]})


def calibrated(verify, budget_s=None) -> tuple[CostModel, object]:
    clock = VirtualClock()
    costs = CostModel()
    with simulated_time(clock):
        run = costs.calibrate(MarkovBackend(cost=verify, clock=clock), budget_s=budget_s)
    return costs, run


def test_a_clean_calibration_is_not_provisional_and_reaches_past_the_drafts_while_tokens_get_cheaper():
    costs, run = calibrated(CPU.verify)
    assert not run.provisional and not costs.provisional
    # CPU's last segment (8 to 16 tokens) extended: a token is 35% cheaper at 32, then 30%, 22%, 14%
    assert sorted(costs.quiet_curve()) == [*range(1, 18), 32, 64, 128, 256]
    assert costs.verify(100) == pytest.approx(CPU.verify(100))  # interpolated between 64 and 128


def test_the_long_passes_stop_where_a_token_stops_getting_cheaper():
    """The AVX-512 host of issue 49: 14 ms a token at 32, 13.2 at 64, 13.0 at 128 (2% less), 14.3
    at 256: 128 is the last length timed."""
    seen = SEEN["AVX-512 to 256 (issue 49)"]
    costs, _ = calibrated(lambda n: piecewise({m: ms / 1000 for m, ms in seen.items()}, n))
    assert sorted(costs.quiet_curve())[-4:] == [17, 32, 64, 128]


def test_a_flat_curve_is_timed_as_far_as_the_context_and_the_longest_calibrated_size_allow():
    costs, _ = calibrated(GPU.verify)
    assert max(costs.quiet_curve()) == 256


def test_a_calibration_cut_by_its_budget_is_provisional():
    costs, run = calibrated(lambda n: 25 * CPU.verify(n), budget_s=30.0)
    assert run.cut and run.provisional and costs.provisional


def test_a_calibration_whose_every_timing_of_one_size_was_slow_is_provisional():
    costs, run = calibrated(lambda n: CPU.verify(n) * (5 if n == 9 else 1))
    assert not run.cut and run.provisional and costs.provisional


def test_the_long_passes_are_left_out_rather_than_cut_when_their_rounds_would_not_fit():
    """A machine whose short rounds take 24 of the 30 s: the long phase times 32 tokens (three
    rounds fit) and does not start 64 (they would not), so the calibration is complete."""
    costs, run = calibrated(lambda n: 4.5 * CPU.verify(n), budget_s=30.0)
    assert not run.cut and not run.provisional
    assert sorted(costs.quiet_curve())[-2:] == [17, 32]
