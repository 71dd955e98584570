"""How far a target's logits move when it is asked for a batch instead of one token at a time.

A verify pass evaluates n tokens in one batch; plain decoding evaluates them one by one. Runtimes
compute the two differently (llama.cpp's repacked Q4_K GEMM kernels take 4 or 8 rows at once and
accumulate in another order than its one-row kernel), so the logits differ in their last bits or
more, and where two tokens are nearly tied a greedy speculative output may part from plain decoding
without any bug. The noise floor is the largest such difference, measured on the model, the weight
layout and the runtime at hand, so a parting can be told from a bug (`divergence.py`) by a measured
figure instead of a constant guessed on one machine.

The window is read after a prefix as long as a real prompt: the cache's length moves the logits
too, and a floor measured on a nearly empty cache can be 0 where real passes differ, which makes
near-ties look like bugs (`models check PAIR --noise-floor` reports a pair's floor).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files

import numpy as np

from edgespec.decoding.backend import Backend
from edgespec.util.errors import SettingError

CALIBRATION_TEXT = files("edgespec") / "data" / "calibration.txt"  # code, prose and a chat turn, ~1,300 tokens
SIZES = range(2, 17)  # the batch sizes a verify pass uses (K = 1..15 drafted tokens plus the pending one)
PREFIX = 400  # tokens read in one batch first: the comparison runs at a real prompt's cache length
SHORTEST_PREFIX = 32  # in a context too short for PREFIX: at least this, so no comparison starts on an empty cache
WINDOW = 48  # tokens compared at every batch size: enough to show the noise, few enough to take seconds


@dataclass(frozen=True)
class NoiseFloor:
    """Per batch size n: the largest and the mean |batched - single| logit difference."""

    largest: dict[int, float]
    mean: dict[int, float]

    @property
    def max(self) -> float:
        """The floor itself: the largest difference at any batch size."""
        return max(self.largest.values())

    def to_dict(self) -> dict:
        return {str(n): {"max": self.largest[n], "mean": self.mean[n]} for n in sorted(self.largest)}

    @classmethod
    def from_dict(cls, d: dict) -> NoiseFloor:
        """The inverse of `to_dict`; ValueError when `d` is not one (a damaged saved file)."""
        try:
            largest = {int(n): float(v["max"]) for n, v in d.items()}
            mean = {int(n): float(v["mean"]) for n, v in d.items()}
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a noise floor: {e}") from None
        if not largest or not all(np.isfinite(v) and v >= 0 for v in (*largest.values(), *mean.values())):
            raise ValueError("not a noise floor: empty, negative or not finite")
        return cls(largest, mean)


def calibration_tokens(backend: Backend) -> list[int]:
    return backend.tokenize(CALIBRATION_TEXT.read_text(encoding="utf-8"), special=False)


def measure_noise_floor(backend: Backend, tokens: Sequence[int], sizes: Sequence[int] = SIZES) -> NoiseFloor:
    """Read `tokens[:PREFIX]` (less in a shorter context, down to SHORTEST_PREFIX), then evaluate
    the next WINDOW tokens one by one, and again in consecutive batches of n for every n in
    `sizes`, from the same cache; compare every logit of every row.

    This is what a parting is measured against (`divergence.py`): verify passes of n tokens, each
    on a cache that earlier batches filled, against plain decoding's single steps. The backend's
    cache is emptied first (the text is read from position 0, so the figure does not depend on what
    was cached) and left empty.
    """
    prefix = min(PREFIX, backend.n_ctx - WINDOW, len(tokens) - WINDOW)
    if prefix < SHORTEST_PREFIX:
        raise SettingError(
            f"a {backend.n_ctx}-token context is too small to measure the target's noise floor "
            f"({SHORTEST_PREFIX + WINDOW} tokens), which tells a near-tie from a bug; use a longer "
            "context or a temperature above 0"
        )
    window = tokens[prefix : prefix + WINDOW]
    backend.truncate(0)
    backend.eval(tokens[:prefix], 1)
    single = np.stack([np.array(backend.eval([t], 1)[0]) for t in window])
    largest, mean = {}, {}
    for n in sizes:
        backend.truncate(prefix)
        peak, total = 0.0, 0.0
        for at in range(0, WINDOW, n):
            batch = window[at : at + n]
            diff = np.abs(backend.eval(batch, len(batch)) - single[at : at + len(batch)])
            peak, total = max(peak, float(diff.max())), total + float(diff.sum(dtype=np.float64))
        largest[n], mean[n] = peak, total / single.size
    backend.truncate(0)
    return NoiseFloor(largest, mean)
