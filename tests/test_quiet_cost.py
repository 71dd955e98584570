"""QuietCost: the fastest of recent sessions' figures, each the low quantile of its timings."""

from __future__ import annotations

import pytest

from edgespec.decoding.costs.quiet import MIN_TIMINGS, SESSIONS, QuietCost, low_quantile


def test_low_quantile_is_an_observed_value_near_the_fast_end():
    assert low_quantile([0.5, 0.1, 0.3]) == 0.1
    assert low_quantile([float(i) for i in range(1, 11)]) == 2.0  # the second smallest of ten


def test_a_session_gives_a_figure_once_it_has_enough_timings_and_fewer_wait_for_the_next():
    cost = QuietCost()
    for _ in range(MIN_TIMINGS - 1):
        cost.add(0.05)
    assert not cost.end_session() and cost.seconds is None
    cost.add(0.04)
    assert cost.end_session()
    assert cost.seconds == pytest.approx(0.04)


def test_a_busy_spell_inside_a_session_is_passed_over():
    cost = QuietCost()
    for seconds in [0.05] * 4 + [0.20] * 12:
        cost.add(seconds)
    cost.end_session()
    assert cost.seconds == pytest.approx(0.05)


def test_a_faster_session_lowers_the_cost_at_once_and_a_slower_one_needs_all_recent_sessions():
    cost = QuietCost([0.10])
    cost.add_session([0.05, 0.06, 0.09])
    assert cost.seconds == pytest.approx(0.05)
    for _ in range(SESSIONS - 1):
        cost.add_session([0.08] * 3)
    assert cost.seconds == pytest.approx(0.05)  # one fast session among the last eight holds it
    cost.add_session([0.08] * 3)  # the fast one's turn to go
    assert cost.seconds == pytest.approx(0.08)


@pytest.mark.parametrize("saved", [[], [0.0], [-0.1], [float("nan")], ["fast"], [{}], 0.03, None, [10**400]])
def test_a_damaged_saved_form_is_refused(saved):
    with pytest.raises(ValueError):
        QuietCost.from_list(saved)


def test_the_saved_form_round_trips_and_keeps_the_latest_sessions():
    cost = QuietCost.from_list([0.2] + [0.1] * SESSIONS)
    assert cost.to_list() == [0.1] * SESSIONS
