"""What this machine has: its physical cores (the thread count llama.cpp and the chat's UI pacing
start from), its RAM (where a pair that runs on the CPU keeps its weights), and how busy its cores
are with other programs (`OtherLoad`, which the thread policy starts from)."""

from __future__ import annotations

import os
import time

import psutil


def physical_cores() -> int:
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def ram_bytes() -> int:
    return psutil.virtual_memory().total


class OtherLoad:
    """Cores kept busy by other processes: the kernel's busy CPU time (all processes, and time a
    hypervisor gave to other machines) less this process's own, over wall time. Each reading costs
    two small reads of /proc (tens of microseconds), so a decoder can take one every few passes.
    The kernel counts in clock ticks (10 ms), so a figure needs a few ticks per core to mean
    anything: `sample` makes sure its reading spans SAMPLE_S."""

    SAMPLE_S = 0.04
    FRESH_S = 1.0  # a reading since a previous one this recent says how the machine is now

    def __init__(self) -> None:
        self._self = psutil.Process()
        self._last = self._now()

    def _now(self) -> tuple[float, float, float]:
        t = psutil.cpu_times()
        # user includes guest time on Linux; idle and iowait are free time
        busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
        busy += getattr(t, "steal", 0.0)
        own = self._self.cpu_times()
        return time.monotonic(), busy, own.user + own.system

    def since_last(self) -> float:
        """Cores other processes kept busy on average since the previous reading (or creation)."""
        (w0, b0, o0), (w1, b1, o1) = self._last, self._now()
        self._last = (w1, b1, o1)
        if w1 <= w0:
            return 0.0
        return max(0.0, ((b1 - b0) - (o1 - o0)) / (w1 - w0))

    def sample(self) -> float:
        """Cores other processes keep busy now: since the previous reading if that was under
        FRESH_S ago (replies back to back wait for nothing), else over the next SAMPLE_S seconds;
        either way over SAMPLE_S at least."""
        elapsed = time.monotonic() - self._last[0]
        if elapsed > self.FRESH_S:
            self.since_last()
            elapsed = 0.0
        if elapsed < self.SAMPLE_S:
            time.sleep(self.SAMPLE_S - elapsed)
        return self.since_last()
