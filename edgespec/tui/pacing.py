"""How often the chat app repaints while a reply streams: as often as a CPU budget allows.

On a CPU that decodes with every core, each millisecond the UI thread runs is taken from llama.cpp's
thread team, and since the team meets at a barrier after every operation, a preempted thread holds
up the others: the loss in tokens/s is about the UI's CPU time, not half of it, and a fixed rate
that looks cheap costs a visible share of the decode rate on a small CPU. So the app does not fix a
rate: after each update it reads the CPU time its own thread used
since the previous one (repaint included) and waits long enough for that to stay within its budget
of one core, between a least and a most updates a second (the wait is the period less the update).
A fast machine, or a small terminal, gets more updates; a slow one keeps its tokens/s.

The budget follows whether decoding competes with the UI for the CPU (`update_budget`): when the
engine leaves a core free (its models on a GPU, or llama.cpp running on fewer threads than there
are cores), the UI's time comes from that core, not from tokens/s, and it streams smoothly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    """What the UI may spend on updating a streaming reply."""

    cpu_share: float  # of one core, over the reply
    min_hz: float  # updates a second however much they cost
    max_hz: float  # updates a second however little they cost


# Decoding on every core: each UI millisecond is taken from tokens/s, so the UI keeps to a small share.
SHARED_CPU = Budget(cpu_share=0.03, min_hz=2.0, max_hz=30.0)
# A core left to the UI: it may use a quarter of it. What it still takes from decoding is the GIL,
# which the engine's thread needs for a moment between passes.
SPARE_CORE = Budget(cpu_share=0.25, min_hz=15.0, max_hz=30.0)


def update_budget(decoding_threads: int, cores: int) -> Budget:
    """SPARE_CORE when decoding keeps fewer threads busy than there are cores, else SHARED_CPU."""
    return SPARE_CORE if decoding_threads < cores else SHARED_CPU


class UpdatePacer:
    """Tells the UI thread how long to wait before its next update.

    `next_interval()` is called once per update, from the UI thread (its CPU clock is per thread)."""

    FIRST_INTERVAL = 0.25  # seconds, until one update has been measured
    SHORTEST_WAIT = 0.005  # seconds between two updates however late the last one ended (a timer needs a delay)
    WAITING_POLL = 0.02  # seconds between looks at the queue until a reply's first token (`after_empty_poll`)

    def __init__(
        self, budget: Budget = SHARED_CPU, *, cpu_clock: Callable[[], float] = time.thread_time, smoothing: float = 0.5
    ):
        self.budget = budget
        self.cpu_clock = cpu_clock
        self.smoothing = smoothing
        self._cost: float | None = None  # smoothed UI CPU seconds per update
        self._last: float | None = None

    def restart(self) -> float:
        """A new reply: forget the previous reply's last reading (the idle time in between is not a
        cost) but keep the learned cost per update. Returns the first wait: the reply has no token yet."""
        self._last = self.cpu_clock()
        return self.WAITING_POLL

    def after_empty_poll(self, tokens: int) -> float:
        """The wait after a look at the queue that found nothing new, with `tokens` of the reply out:
        `WAITING_POLL` while there are none (the prompt is being read; a look that finds nothing
        costs microseconds, and the first token shows within 20 ms of its coming rather than a
        repaint period later, up to half a second on a busy CPU), else the current interval. An
        empty poll is not an update: it does not teach the pacer."""
        return self.WAITING_POLL if not tokens else self.interval

    def next_interval(self) -> float:
        now = self.cpu_clock()
        if self._last is not None:
            spent = now - self._last
            self._cost = spent if self._cost is None else self._cost + self.smoothing * (spent - self._cost)
        self._last = now
        return self.interval

    @property
    def interval(self) -> float:
        """Seconds to wait from the end of this update to the start of the next: the period that keeps
        the updates within the budget, bounded by the rates, less the update itself."""
        if self._cost is None:
            return min(self.FIRST_INTERVAL, 1.0 / self.budget.min_hz)
        period = min(1.0 / self.budget.min_hz, max(1.0 / self.budget.max_hz, self._cost / self.budget.cpu_share))
        return max(self.SHORTEST_WAIT, period - self._cost)
