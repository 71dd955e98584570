"""Reading a prompt before it is asked: the part of a future prompt that can no longer change.

On a small CPU, reading the prompt is most of a cold call on a file, and the machine is idle while
the user pastes the file and types the question, or moves between lines in an editor. A front end
that knows the start of the next prompt (the chat app as the message is written, `serve` on a
read-only request, `run --max-tokens 0` from an editor's on-save hook) has the target read it now.

Only whole read chunks are read (`ChunkedBackend`: chunks of `read_chunk` tokens at fixed positions
from 0), in the chunks a cold read forms, so the generation that follows keeps all of them and a
reply is bit for bit what a cold read of the same prompt gives. What the target already holds of
the prompt (its own cache, else the prompt cache's longest saved prefix) is kept; a cache that
parts from the prompt is rolled back to their common prefix, cut to a chunk's start.

A read stops between two chunks when `cancel` is set (a generating request needs the engine, the
user edited behind the read point): the chunks read so far stay in the cache and count. A chunk of
128 tokens is the longest a stop waits for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from edgespec.decoding.backend import Backend, ContextOverflow, chunk_start, common_prefix, exact_prefix


@dataclass(frozen=True)
class Reading:
    """What one read ahead did. `prompt_tokens`: the tokens asked for; `cached`: those the target
    held already (its cache or the prompt cache's); `read`: those it read now; `ready`: the leading
    tokens now in its cache that a generation keeps (`cached` + `read`, whole chunks); `stopped`:
    `cancel` ended it before every whole chunk was read."""

    prompt_tokens: int
    cached: int
    read: int
    seconds: float
    stopped: bool = False

    @property
    def ready(self) -> int:
        return self.cached + self.read


def read_whole_chunks(
    target: Backend, tokens: Sequence[int], cancel: threading.Event | None = None, since: float | None = None
) -> Reading:
    """Have `target` hold the whole read chunks of `tokens`, reading the ones it lacks one chunk a
    call, stopping between two when `cancel` is set. `since`: when the read began (`perf_counter`;
    default now), so that loading from the prompt cache before it counts in its seconds.
    ContextOverflow when `tokens` cannot fit the context."""
    if len(tokens) > target.n_ctx:
        raise ContextOverflow(f"{len(tokens)} tokens do not fit the {target.n_ctx}-token context")
    start = time.perf_counter() if since is None else since
    end = chunk_start(target, len(tokens))
    keep = exact_prefix(target, min(common_prefix(target.cached, tokens), end))
    if keep < end:  # else all it would read is held: the generation decides what else to keep
        target.truncate(keep)
    step = getattr(target, "read_chunk", max(1, end - keep))
    position, stopped = keep, False
    while position < end:
        if cancel is not None and cancel.is_set():
            stopped = True
            break
        chunk = tokens[position : min(end, position + step)]
        target.eval(chunk, 1)  # the rows' logits are not needed; the cache is what is kept
        position += len(chunk)
    return Reading(len(tokens), keep, position - keep, time.perf_counter() - start, stopped)


class ReadAheadCredit:
    """Which of the target's cached tokens read aheads read, until a generation keeps them: the
    Summary's `prompt_read_ahead` (what the front end that read ahead saved the user at the ask).

    `span` is the range [begin, end) of the target's cache that read aheads read since the last
    generation: each read extends it to its `ready`, and keeps its start while the target still
    holds what the earlier reads read (a roll back to before it moves the start back to the point
    the new read starts from)."""

    def __init__(self) -> None:
        self.span: tuple[int, int] | None = None

    def add(self, reading: Reading, loaded: bool) -> None:
        """After a read ahead; `loaded`: a state from the prompt cache replaced the target's cache
        before it read (nothing earlier reads read is left)."""
        begin = reading.cached if self.span is None or loaded else min(self.span[0], reading.cached)
        self.span = (begin, reading.ready)

    def forget(self) -> None:
        """What the target read ahead is gone (its cache emptied or replaced)."""
        self.span = None

    def take(self) -> tuple[int, int] | None:
        """The span, cleared: a generation takes it when it starts, after the prompt cache's warming,
        and its Summary's `prompt_read_ahead` counts the prompt tokens it kept from that span
        (`call_figures.CallFigures`)."""
        span, self.span = self.span, None
        return span
