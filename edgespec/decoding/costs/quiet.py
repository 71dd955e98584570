"""What one operation (a target pass over n tokens, a draft-model step) costs on a quiet machine,
learnt from the timings of recent sessions and kept between runs.

Another program waking up only ever adds time to a pass; nothing makes a pass faster than the
machine can run it. So a low figure is evidence and a high one may be noise, at two levels. A
session (one calibration, or the live passes of one reply) gives the low quantile of its own
timings, so a busy spell inside a reply is passed over; the cost is the fastest of the last
`SESSIONS` sessions' figures, so wholly busy replies are passed over too. It falls as soon as one
session is faster (a curve measured while other jobs ran is corrected by the next quiet reply), and
rises only when every recent session was slower: a machine that really became slower, not a busy
moment. A session is one reply rather than a span of time because replies are what a user repeats:
a machine that stays slower for SESSIONS replies is slower for this user.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence

SESSIONS = 8  # session figures kept per operation
QUANTILE = 0.2  # of a session's timings: of 3 to 5, the fastest; of 16 to 20, the fourth fastest
MIN_TIMINGS = 3  # a session's figure needs this many timings (a calibration times each size 3 times)
PENDING = 64  # timings kept for the session in progress (the latest)


def low_quantile(values: Sequence[float]) -> float:
    """The QUANTILE-th of `values`, taken as an observed value (no interpolation toward a slower one)."""
    ordered = sorted(values)
    return ordered[int(QUANTILE * (len(ordered) - 1))]


class QuietCost:
    """Seconds one operation costs on a quiet machine (see the module docstring).

    `add` records a timing in the session in progress; `end_session` turns that session into one
    figure once it holds MIN_TIMINGS timings (fewer wait for the next session: a draft length
    used once a reply still counts after a few replies). `to_list` / `from_list` are the saved
    form: the session figures, oldest first."""

    def __init__(self, sessions: Iterable[float] = ()):
        self._sessions: deque[float] = deque(sessions, maxlen=SESSIONS)
        self._pending: deque[float] = deque(maxlen=PENDING)

    def add(self, seconds: float) -> None:
        self._pending.append(seconds)

    def add_session(self, timings: Sequence[float]) -> None:
        """A whole session at once (a calibration's timings of this operation)."""
        self._sessions.append(low_quantile(timings))

    def end_session(self) -> bool:
        """Close the session in progress; whether it gave a figure."""
        if len(self._pending) < MIN_TIMINGS:
            return False
        self.add_session(self._pending)
        self._pending.clear()
        return True

    @property
    def seconds(self) -> float | None:
        """The quiet cost, or None before any session."""
        return min(self._sessions, default=None)

    def to_list(self) -> list[float]:
        return [round(s, 7) for s in self._sessions]

    @classmethod
    def from_list(cls, saved) -> QuietCost:
        """Raises ValueError unless `saved` is a non-empty list of positive finite seconds."""
        if not isinstance(saved, list) or not saved:
            raise ValueError("not a list of session figures")
        try:
            figures = [float(s) for s in saved]
        except (TypeError, OverflowError) as e:  # OverflowError: an integer past any float
            raise ValueError("a session figure is not a number") from e
        if not all(math.isfinite(s) and s > 0 for s in figures):
            raise ValueError("a session figure is not a positive time")
        return cls(figures[-SESSIONS:])
