"""Seconds per target pass between and beyond the sizes a curve has timed: how every curve of the
room prices a size it has no figure for (the live one in `model.py`, the steady one in
`steady_curve.py`, and so the whole-call prediction of `call_prediction.py`)."""

from __future__ import annotations

from collections.abc import Mapping


def piecewise(pts: Mapping[int, float], n: int) -> float:
    """Seconds for a pass over n tokens from timed sizes `pts`: linear between them, beyond them
    along the nearest segment's slope, proportional to the one size there is."""
    if n in pts:
        return pts[n]
    ns = sorted(pts)
    if not ns:
        return 1.0
    if len(ns) == 1:
        return pts[ns[0]] * n / ns[0]
    lo = max((m for m in ns if m < n), default=None)
    hi = min((m for m in ns if m > n), default=None)
    if lo is None:
        lo, hi = ns[0], ns[1]
    elif hi is None:
        lo, hi = ns[-2], ns[-1]
    slope = (pts[hi] - pts[lo]) / (hi - lo)
    return max(pts[lo] + slope * (n - lo), 1e-6)
