"""How many CPU threads the models' passes run on, chosen the way the controller chooses K: by
measuring.

llama.cpp's threads wait for each other at every step of a pass, so on a machine where another
program keeps a core busy, one descheduled thread stalls them all (benchmarks/busy_machine.py
measures it: benchmarks/results/busy_machine.json, `summary`, fixed threads against this policy's
count, rendered in docs/design.md under "Threads").
Which count is fastest depends on the load, and the load comes and goes, so nothing here assumes
it; the policy measures:

- at the start of a reply it starts from the machine as it is: the cores other programs keep busy
  (`Load.sample`, a few tens of milliseconds, confirmed by up to CONFIRM readings before it takes
  a core away) leave the rest to decoding;
- every target pass is timed anyway; a pass over n tokens is divided by the verify curve's shape
  (`CostModel.shape`: verify(n) / verify(1)), so passes of every length compare as one-token passes;
- now and then it runs PROBE_PASSES passes at a neighbouring count and keeps whichever count's
  latest passes were faster. Probes back off (BASE to MAX passes apart) while they lose, since on a
  quiet machine each costs a slower pass or two; they come at once when the current count's
  timings rise by RISE (load arrived) or when the other programs' load moves (`Load.since_last`,
  read every CHECK passes: load that left shows no rise, the fewer threads in use do not notice).
  After a load move the current count first runs PROBE_PASSES passes of its own, so the probe is
  weighed against passes under the new load, not the quiet ones before it.

The draft model follows the same count (the engine's `apply`), and the prompt is read at the count
chosen at the start of the reply. A reply that must repeat itself (`holding`) runs at `most` instead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from edgespec.decoding.costs.model import CostModel


class Load(Protocol):
    """Cores other programs keep busy (`edgespec.util.hardware.OtherLoad` is the machine's)."""

    def sample(self) -> float:
        """Now: a short reading (blocking, tens of milliseconds)."""
        ...

    def since_last(self) -> float:
        """On average since the previous reading (not blocking)."""
        ...


class ThreadPolicy:
    """Chooses the thread count, 1..`most`, for each pass of one engine's models; `apply(n)` sets it
    on them. `begin` at the start of each reply, `observe` after each target pass. `count` is the
    count the next pass runs at; `seconds` the latest one-token-equivalent pass time measured at
    each count."""

    PROBE_PASSES = 2  # passes at another count per probe; the current count is judged on as many
    BASE, MAX = 32, 512  # passes between probes: after a probe that won, and at most
    MARGIN = 0.05  # a probed count must be this much faster to replace the current one
    # the current count's timings rising this much above their low since settling: probe now. A core
    # taken by another program makes a 2-thread pass several times slower (busy_machine.json under
    # benchmarks/results/, `summary`: "ar-fixed" busy against quiet); a virtual machine's own noise
    # moves passes by a third, and probing on that cost quiet replies several percent.
    RISE = 0.6
    BUSY = 0.75  # a core counts as taken when other programs keep it this busy on average
    # readings that must all find a core taken before a reply starts on fewer threads: one short
    # reading caught a process's exit and read a 2k-token prompt at half speed
    CONFIRM = 3
    CHECK = 16  # passes between readings of the other programs' load

    def __init__(self, most: int, apply: Callable[[int], None], costs: CostModel, load: Load):
        if most < 1:
            raise ValueError(f"most={most}")
        self.most, self._apply, self._costs, self._load = most, apply, costs, load
        self.count = self.best = most
        self.seconds: dict[int, float] = {}
        self._recent: deque[float] = deque(maxlen=self.PROBE_PASSES)  # latest passes at `best`
        self._low: float | None = None  # the lowest mean of `_recent` since `best` was settled
        self._probing: list[float] | None = None  # a probe's timings, while `count` != `best`
        self._interval = self.BASE
        self._until_probe = self.BASE
        self._toward: int | None = None  # the count the load reading suggests probing next
        self._suggested = most
        self._passes = 0
        self._upward = False  # which neighbour the next probe tries
        # Replies run at `most`, whatever the load and the timings, while this is set: for replies
        # that must repeat themselves (`engine.GenerateSettings.live_timings` off). The count can
        # move a logit (a reply parted where the probes came at other passes), and they follow timings.
        self.holding = False

    def from_load(self, busy: float) -> int:
        """The count the cores left free by `busy` other cores suggest (a core counts when BUSY of it is)."""
        return max(1, min(self.most, int(self.most - busy + 1 - self.BUSY)))

    def begin(self) -> int:
        """At the start of a reply: the count the load now suggests (what the last reply learnt
        is kept while the load suggests the count it settled on). Applied; returned. `most` while
        `holding`."""
        if self.holding:
            self._apply(self.most)
            self.count = self.best = self.most
            return self.most
        start = self.from_load(self._load.sample())
        for _ in range(self.CONFIRM - 1):  # a blip (a process exiting) must not halve the prompt's reading
            if start == self.most:
                break
            start = max(start, self.from_load(self._load.sample()))
        self._suggested = start
        if start != self.best:
            self.best = start
            self._interval = self._until_probe = self.BASE
            self._recent.clear()
        self._low, self._probing, self._toward = None, None, None
        self._apply(start)  # whatever the models were left at
        self.count = start
        return start

    def observe(self, n_tokens: int, seconds: float) -> None:
        """A target pass over `n_tokens` took `seconds` at `count` threads."""
        if self.holding:
            return
        t = seconds / self._costs.shape(n_tokens)
        self._passes += 1
        if self._probing is not None:
            self._probing.append(t)
            if len(self._probing) >= self.PROBE_PASSES:
                self._settle_probe()
            return
        self._recent.append(t)
        now = sum(self._recent) / len(self._recent)
        self.seconds[self.best] = now
        if len(self._recent) == self.PROBE_PASSES:
            if self._low is not None and now > self._low * (1 + self.RISE):
                self._until_probe, self._low = 0, None
            else:
                self._low = now if self._low is None else min(self._low, now)
        if self._passes % self.CHECK == 0:
            suggested = self.from_load(self._load.since_last())
            if suggested != self._suggested:
                self._suggested = suggested
                if suggested != self.best:
                    # the current count is judged on passes run since the load moved, not before it
                    self._toward, self._until_probe = suggested, self.PROBE_PASSES
                    self._recent.clear()
                    self._low = None
        self._until_probe -= 1
        if self._until_probe <= 0:
            self._start_probe()

    def _start_probe(self) -> None:
        down, up = self.best - 1, self.best + 1
        if self._toward is not None:
            other = self._toward
        elif self._upward and up <= self.most or down < 1:
            other = up
        else:
            other = down
        self._upward = not self._upward
        if not 1 <= other <= self.most:  # one core: nothing to try
            self._until_probe = self.MAX
            return
        self._probing = []
        self._set(other)

    def _settle_probe(self) -> None:
        """Keep the probed count if its passes beat the current count's latest by MARGIN."""
        assert self._probing is not None
        probed, fresh = self.count, sum(self._probing) / len(self._probing)
        self.seconds[probed] = fresh
        current = sum(self._recent) / len(self._recent) if self._recent else None
        if current is None or fresh < current * (1 - self.MARGIN):
            self.best, self._interval = probed, self.BASE
            self._recent = deque(self._probing, maxlen=self.PROBE_PASSES)
            self._low = None
        else:
            self._interval = min(self._interval * 2, self.MAX)
        self._probing, self._toward = None, None
        self._until_probe = self._interval
        self._set(self.best)

    def _set(self, n: int) -> None:
        if n != self.count:
            self._apply(n)
        self.count = n
