"""The acceptance estimates the auto policy weighs (`decoding/policy/acceptance.py`)."""

from __future__ import annotations

import pytest

from edgespec.decoding.policy.acceptance import Rate


def test_rate_is_a_discounted_mean_that_follows_a_change():
    r = Rate(0.7)
    assert r.mean == pytest.approx(0.7)
    for _ in range(200):
        r.update(True)
    assert r.mean > 0.99
    for _ in range(40):
        r.update(False)
    assert r.mean < 0.35  # the old hits are forgotten at 3% a step
