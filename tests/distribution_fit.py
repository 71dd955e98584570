"""Whether sampled replies follow an exact distribution: what the tests of speculative sampling
(under a constraint, from a replaced reply) check, since any draft source must leave the target's
distribution as it is."""

from __future__ import annotations

import numpy as np
from scipy import stats


def fit_p_value(replies: list[str], exact: dict[str, float]) -> float:
    """Chi-square p-value of the replies against the exact distribution; 0 when a reply lies outside
    its support (which a chi-square test cannot see)."""
    if not set(replies) <= set(exact):
        return 0.0
    keys = sorted(exact)
    observed = np.array([replies.count(k) for k in keys], dtype=float)
    expected = np.array([exact[k] for k in keys]) * len(replies)
    return float(stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue)
