"""Whether measured pass timings could be what the machine does, judged against each other.

A busy moment only ever adds time, and it adds it to the passes that ran during it, not to the
sizes next to them. So a size whose figure its neighbours cannot explain was measured while other
work ran:

- a pass over more tokens costs less per token than a shorter one, or a little more (a Q8_0 layout
  spent 1.3x a one-token pass per token at two tokens; passes of 256 tokens 1.1-1.2x what 128
  cost per token, where attention starts to tell). RISE times more per token is a busy moment;
- a pass over fewer tokens costs less, or a little more where the curve dips (verifying 4 tokens
  for less than 3: at most 1.3x seen). DROP times more than a longer pass is a busy moment.

A repeat far above the other timings of its size needs no judging here: a size's figure is the low
quantile of its timings (`quiet.py`), which passes over it. A figure is wrong only when every
timing of its size was slow, and only the other sizes can show that.
"""

from __future__ import annotations

from collections.abc import Mapping

RISE = 2.0
DROP = 2.0


def implausible(curve: Mapping[int, float]) -> set[int]:
    """The sizes of `curve` (seconds per pass over n tokens) that another size contradicts: the
    dearer side of every pair that breaks RISE or DROP."""
    flagged: set[int] = set()
    sizes = sorted(curve)
    for i, n in enumerate(sizes):
        for m in sizes[i + 1 :]:
            if curve[m] / m > RISE * curve[n] / n:
                flagged.add(m)
            if curve[n] > DROP * curve[m]:
                flagged.add(n)
    return flagged
