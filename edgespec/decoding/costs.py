"""What a round costs: seconds per target pass as a function of the tokens it verifies, and per
draft-model step; and the K that maximises expected tokens per second under such costs."""

from __future__ import annotations

import time
from typing import Callable, Sequence


class CostModel:
    """Seconds per target pass verifying n tokens, and per draft-model step.

    Measured points are smoothed per n (exponential moving average); between them the cost is
    interpolated linearly and beyond the largest extrapolated with the last slope. The curve is
    flat on a GPU and near-linear on a small CPU: nothing here assumes either.
    """

    SMOOTH = 0.15

    def __init__(self):
        self._verify: dict[int, float] = {}
        self._curve: dict[int, float] = {}  # verify(n) as interpolated, until the next observation
        self.draft_step: float | None = None  # seconds per draft-model token
        self.read_per_token: float | None = None  # seconds per token the draft model reads in one batch
        self.ngram_lookup = 0.0  # seconds per n-gram lookup

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.SMOOTH * (new - old)

    def observe_verify(self, n: int, seconds: float) -> None:
        self._verify[n] = self._ema(self._verify.get(n), seconds)
        self._curve.clear()

    def observe_draft(self, tokens: int, seconds: float) -> None:
        if tokens:
            self.draft_step = self._ema(self.draft_step, seconds / tokens)

    def observe_read(self, tokens: int, seconds: float) -> None:
        if tokens:
            self.read_per_token = self._ema(self.read_per_token, seconds / tokens)

    def read(self, n: int) -> float:
        """Seconds for the draft model to read n tokens of text it has not seen (its catch-up).
        Unmeasured, a token read in a batch is taken to cost a third of a draft step (on a small
        CPU it costs about a quarter; on a GPU far less)."""
        per = self.read_per_token
        if per is None:
            per = (self.draft_step if self.draft_step is not None else self.verify(1)) / 3
        return n * per

    def observe_lookup(self, seconds: float) -> None:
        self.ngram_lookup = self._ema(self.ngram_lookup, seconds)

    @property
    def calibrated(self) -> bool:
        return len(self._verify) >= 2

    def to_dict(self) -> dict:
        return {"verify": {str(n): s for n, s in sorted(self._verify.items())}, "draft_step": self.draft_step,
                "read_per_token": self.read_per_token}

    def restore(self, d: dict) -> None:
        """Take measurements saved by `to_dict` (an earlier run on the same machine and models)."""
        self._verify = {int(n): float(s) for n, s in d["verify"].items()}
        self._curve.clear()
        self.draft_step = None if d.get("draft_step") is None else float(d["draft_step"])
        self.read_per_token = None if d.get("read_per_token") is None else float(d["read_per_token"])

    def verify(self, n: int) -> float:
        """Seconds for a target pass over n tokens (the controller asks this dozens of times a round)."""
        t = self._curve.get(n)
        if t is None:
            t = self._curve[n] = self._interpolate(n)
        return t

    def verify_at_least(self, n: int) -> float:
        """Seconds for the cheapest pass over n tokens or more, up to the longest measured: where
        the curve dips, n tokens cost no more than the cheaper longer pass they can grow into."""
        longest = max(self._verify, default=n)
        return min(self.verify(m) for m in range(n, max(n, longest) + 1))

    def _interpolate(self, n: int) -> float:
        pts = self._verify
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

    def calibrate(self, target, draft=None, max_n: int = 17, rounds: int = 3) -> None:
        """Time every verification size from 1 to `max_n` on the target (and one draft step) on
        dummy tokens, then roll the caches back.

        Every size, not a few to interpolate between: the curve is not monotone where llama.cpp
        repacks weights for GEMM kernels that take 4 or 8 rows at once (measured here with a Q4_0
        target: verifying 4 tokens cost 45.8 ms, 3 tokens 58.3 ms), and the controller should
        draft the length that is cheap to verify, not the one a straight line suggests.

        Each size keeps the fastest of `rounds` interleaved timings: another process waking up only
        ever adds time, and a curve skewed by one busy moment would be kept for every later run
        (measured here: a saved curve had verify(2) at 116 ms against 66-75 ms when quiet, and so
        ruled out short drafts for good)."""
        for backend, ns in ((target, range(1, max_n + 1)), (draft, (1,))):
            if backend is None:
                continue
            start = len(backend.cached)
            room = backend.n_ctx - start
            backend.eval([0], 1)  # warm-up: first calls pay for allocation
            backend.truncate(start)
            fastest: dict[int, float] = {}
            for _ in range(rounds):
                for n in ns:
                    if n > room:
                        break
                    t0 = time.perf_counter()
                    backend.eval([0] * n, n)
                    elapsed = time.perf_counter() - t0
                    backend.truncate(start)
                    fastest[n] = min(elapsed, fastest.get(n, elapsed))
            for n, elapsed in fastest.items():
                if backend is target:
                    self.observe_verify(n, elapsed)
                else:
                    self.observe_draft(n, elapsed)
        if draft is not None and draft.n_ctx - len(draft.cached) >= self.READ_PROBE:
            self.observe_read(self.READ_PROBE, self._fastest_read(draft, rounds))

    READ_PROBE = 64  # tokens the draft model reads to time its catch-up

    def _fastest_read(self, draft, rounds: int) -> float:
        """The fastest of `rounds` timings of the draft model reading READ_PROBE tokens in one batch."""
        start, fastest = len(draft.cached), float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            draft.eval([0] * self.READ_PROBE, 1)
            fastest = min(fastest, time.perf_counter() - t0)
            draft.truncate(start)
        return fastest


def best_k(acceptance: Sequence[float], cost: Callable[[int], float]) -> tuple[int, float]:
    """The K in 0..len(acceptance) maximising E(K)/cost(K) for a chain with per-position acceptance
    `acceptance` (each given the ones before survived); returns (K, tokens per second)."""
    survive, values = 1.0, []
    for a in acceptance:
        survive *= a
        values.append(survive)
    return best_tree(values, cost)


def best_tree(values: Sequence[float], cost: Callable[[int], float]) -> tuple[int, float]:
    """How many of a draft's candidate nodes to verify: `values` are the nodes' chances of being
    accepted (the path down to them survives), best first; the m best, verified in one pass, emit
    1 + sum(values[:m]) tokens on average (each accepted node, then the target's own). Returns the m
    in 0..len(values) maximising that over cost(m), and its tokens per second.

    Taking the best m nodes is taking a tree: a node is never likelier than its parent, so the
    parent of every node taken was taken before it (EAGLE-2's reranking). A chain's values are
    the running products of its acceptances, already in order."""
    best, rate = 0, 1.0 / cost(0)
    expected = 1.0
    for m, v in enumerate(values, start=1):
        expected += v
        r = expected / cost(m)
        if r > rate:
            best, rate = m, r
    return best, rate
