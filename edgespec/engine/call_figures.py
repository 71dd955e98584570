"""What one generation's engine does around the decoder, gathered where each happens, for the one
Summary the call hands out.

The decoder times what it does (the target's reading, every pass, the reply's stop); the engine
does more around it: it loads the prompt's saved state from the prompt cache before the target
reads, takes the span its read aheads read, drafts from copying sources whose lookups are counted
as they run, and adds the reply to the history. Each of those fills its field of a `CallFigures`
as it happens, and the Summary every front end reads (TUI, run, bench, serve) is built once from
the decoder's and these (`summary`), never patched on its way out. A reply served again from the
history (`same_reply.served_again`) runs none of them: its Summary is built where it is served.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from edgespec.decoding.copying.corpus import CorpusDrafter
from edgespec.decoding.events import Summary


@dataclass
class CallFigures:
    """One generation's figures from around the decoder (seconds).

    `warm_s`: loading the longest saved prefix of the prompt from the prompt cache, before the
    target reads the rest: part of the target's reading and of the time to the first token.
    `read_ahead`: the range [begin, end) of the target's cache that read aheads read before the
    call (`ReadAheadCredit.take`; None: none did). `copying`: the call's copying drafters, which
    count their own lookups and time. `history_append_s`: the reply's append to the history."""

    copying: Sequence[CorpusDrafter] = ()
    warm_s: float = 0.0
    read_ahead: tuple[int, int] | None = None
    history_append_s: float = 0.0

    def summary(self, decoded: Summary) -> Summary:
        """The call's Summary: the decoder's figures (`decoded`, which goes no further) with these."""
        kept_ahead = 0
        if self.read_ahead is not None:  # the prompt tokens kept from the cache that read aheads read
            begin, end = self.read_ahead
            kept_ahead = max(0, min(decoded.prompt_cached, end) - begin)
        return replace(
            decoded,
            target_read_s=decoded.target_read_s + self.warm_s,
            ttft_s=decoded.ttft_s + self.warm_s,
            prompt_read_ahead=kept_ahead,
            lookups={**decoded.lookups, **{d.kind.value: d.lookups for d in self.copying}},
            lookup_s={**decoded.lookup_s, **{d.kind.value: d.busy_s for d in self.copying}},
            history_append_s=self.history_append_s,
        )
