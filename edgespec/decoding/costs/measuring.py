"""How a calibration times the loaded models (`CostModel.calibrate` keeps what it finds): which
passes, in which order, how often, and when it stops.

Two phases:

- every size from 1 to `max_n` (the lengths the controller drafts, plus one), in `rounds`
  interleaved rounds, ends first, with a draft-model step and a read of the draft model: the short
  curve is not monotone where llama.cpp repacks weights for GEMM kernels that take 4 or 8 rows at
  once, so no size there is left to interpolation;
- then sparse longer passes, doubling from the first power of two past `max_n` (32, 64, 128,
  ...), until the cost per token stops falling (FALLING), the context has no room, `longest`, or
  the budget would not hold a size's rounds. Between them the curve is interpolated; live passes
  of every length refine it as they do the short one.

The long phase comes after the short rounds so that a budget cut on a busy machine costs the
long passes first, and the short rounds time exactly what they timed before it existed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from edgespec.decoding.backend import Backend

READ_PROBE = 64  # tokens the draft model reads, to time its catch-up
# Calibration times every pass length up to one token more than this (the first phase's `max_n`),
# and longer passes sparsely. A copy drafts longer only as far as the curve has been timed
# (`CostModel.reach`): beyond the timed sizes the curve is extrapolated, and a guessed slope must
# not buy a long pass.
LONGEST_DENSE_DRAFT = 16
# The longest pass a calibration times. A pass asks for every row's logits, as a verify pass
# does, and llama.cpp keeps an output buffer that large for the context's life: 256 rows of
# Qwen2.5's 151,936 logits are 156 MB. Past 128 tokens a CPU gains nothing more per token.
LONGEST_CALIBRATED = 256
# A longer pass whose cost per token is not at least this much below the previous one's: the
# curve has stopped falling, and longer passes are not timed.
FALLING = 0.05

Key = tuple[str, int]  # ("verify", tokens), ("draft", 1) or ("read", 0)


class Timer:
    """Times passes on dummy tokens, rolling each back, within a budget (see `time_passes`)."""

    def __init__(self, budget_s: float | None, progress: Callable[[float], None] | None):
        self.start = time.perf_counter()
        self.budget_s, self.progress = budget_s, progress
        self.timings: dict[Key, list[float]] = {}
        self.cut = False

    @property
    def spent(self) -> float:
        return time.perf_counter() - self.start

    def out_of_time(self) -> bool:
        """The budget is spent (and the least a curve needs, two sizes, is timed): the calibration is cut."""
        if self.budget_s is not None and self.spent > self.budget_s and len(self.verified()) >= 2:
            self.cut = True
        return self.cut

    def verified(self) -> dict[int, list[float]]:
        return {n: t for (what, n), t in self.timings.items() if what == "verify"}

    def time(self, backend: Backend, key: Key, tokens: int, logits: int) -> float:
        """One pass over `tokens` dummy tokens asking `logits` rows; its seconds (per token for a
        draft step or a read) are kept under `key` and returned."""
        at = len(backend.cached)
        t0 = time.perf_counter()
        backend.eval([0] * tokens, logits)
        elapsed = time.perf_counter() - t0
        backend.truncate(at)
        seconds = elapsed if key[0] == "verify" else elapsed / tokens
        self.timings.setdefault(key, []).append(seconds)
        if self.progress is not None:
            self.progress(self.spent)
        return seconds


def time_passes(
    target: Backend,
    draft: Backend | None,
    max_n: int,
    rounds: int,
    longest: int,
    budget_s: float | None = None,
    progress: Callable[[float], None] | None = None,
) -> tuple[Timer, int]:
    """Both phases (module docstring); the timer holding every timing, and the verification sizes
    wanted. `progress` is called after every timing with the seconds spent so far; an exception
    it raises stops the calibration with the caches rolled back."""
    timer = Timer(budget_s, progress)
    probes = _probes(target, draft, max_n)
    for backend in (target, draft):
        if backend is not None and backend.n_ctx > len(backend.cached):
            at = len(backend.cached)
            backend.eval([0], 1)  # warm-up: first calls pay for allocation
            backend.truncate(at)
    for _ in range(rounds):
        for probe in probes:
            if timer.out_of_time():
                break
            timer.time(*probe)
        if timer.cut:
            break
    wanted = sum(key[0] == "verify" for _, key, _, _ in probes)
    if not timer.cut and longest > max_n:
        wanted += _time_long(timer, target, max_n, rounds, longest)
    return timer, wanted


def _time_long(timer: Timer, target: Backend, max_n: int, rounds: int, longest: int) -> int:
    """The long phase: each size `rounds` times back to back, since its fastest timing decides
    whether the next one is timed (one timing alone, on a shared machine, often stopped the phase
    a size early). Returns how many sizes it timed or began."""
    verified = timer.verified()
    if not verified:
        return 0
    top = max(verified)
    per_token = min(verified[top]) / top
    room = target.n_ctx - len(target.cached)
    n, sizes = 1 << top.bit_length(), 0
    while n <= min(longest, room):
        if timer.budget_s is not None and timer.spent + rounds * per_token * n > timer.budget_s:
            break  # its rounds would not fit: not timed at all, rather than cut
        sizes += 1
        for _ in range(rounds):
            if timer.out_of_time():
                return sizes
            timer.time(target, ("verify", n), n, n)
        fastest = min(timer.timings["verify", n]) / n
        if fastest > (1 - FALLING) * per_token:
            break
        per_token, n = fastest, 2 * n
    return sizes


def _probes(target: Backend, draft: Backend | None, max_n: int) -> list[tuple[Backend, Key, int, int]]:
    """One round of the first phase, in order: (backend, what it times, tokens, logits asked). The
    draft step first, so a cut calibration seldom leaves it to its prior (a one-token pass), and
    the ends of the range next, so a cut round still spans it."""
    room = target.n_ctx - len(target.cached)
    probes: list[tuple[Backend, Key, int, int]] = []
    if draft is not None and draft.n_ctx > len(draft.cached):
        probes.append((draft, ("draft", 1), 1, 1))
    probes += [(target, ("verify", n), n, n) for n in ends_first(max_n) if n <= room]
    if draft is not None and draft.n_ctx - len(draft.cached) >= READ_PROBE:
        probes.append((draft, ("read", 0), READ_PROBE, 1))
    return probes


def ends_first(max_n: int) -> list[int]:
    """1..max_n, the ends first and then each gap halved: any prefix spans the range evenly."""
    order, gaps = [1, max_n][:max_n], [(1, max_n)]
    while gaps:
        halved = []
        for lo, hi in gaps:
            if hi - lo > 1:
                mid = (lo + hi) // 2
                order.append(mid)
                halved += [(lo, mid), (mid, hi)]
        gaps = halved
    return order
