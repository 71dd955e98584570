"""How often the chat app repaints while a reply streams: as often as a CPU budget allows.

On a CPU that decodes with every core, each millisecond the UI thread runs is taken from llama.cpp's
thread team, and since the team meets at a barrier after every operation, a preempted thread holds
up the others: the loss in tokens/s is about the UI's CPU time, not half of it. Measured here on
2 cores (default pair): a fixed 4 updates a second used 6.5% of a core and cost 9-16% of the decode
rate. So the app does not fix a rate: after each update it reads the CPU time its own thread used
since the previous one (repaint included) and waits long enough for that to stay within `budget`
of one core, between `min_hz` and `max_hz` updates a second. A fast machine, or a small terminal,
gets more updates; a slow one keeps its tokens/s.
"""

from __future__ import annotations

import time
from typing import Callable


class UpdatePacer:
    """Tells the UI thread how long to wait before its next update.

    `next_interval()` is called once per update, from the UI thread (its CPU clock is per thread)."""

    FIRST_INTERVAL = 0.25  # seconds, until one update has been measured

    def __init__(self, budget: float = 0.03, min_hz: float = 2.0, max_hz: float = 30.0, *,
                 cpu_clock: Callable[[], float] = time.thread_time, smoothing: float = 0.5):
        self.budget = budget
        self.shortest = 1.0 / max_hz
        self.longest = 1.0 / min_hz
        self.cpu_clock = cpu_clock
        self.smoothing = smoothing
        self._cost: float | None = None  # smoothed UI CPU seconds per update
        self._last: float | None = None

    def restart(self) -> float:
        """A new reply: forget the previous reply's last reading (the idle time in between is not a
        cost) but keep the learned cost per update. Returns the first wait."""
        self._last = self.cpu_clock()
        return self.interval

    def next_interval(self) -> float:
        now = self.cpu_clock()
        if self._last is not None:
            spent = now - self._last
            self._cost = spent if self._cost is None else self._cost + self.smoothing * (spent - self._cost)
        self._last = now
        return self.interval

    @property
    def interval(self) -> float:
        if self._cost is None:
            return self.FIRST_INTERVAL
        return min(self.longest, max(self.shortest, self._cost / self.budget))
