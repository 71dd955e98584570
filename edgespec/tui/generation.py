"""One reply in flight, apart from the widgets: what is sent, the worker that runs the engine, and
the queue between them.

The worker (`Generation.run`, on the engine's thread) only iterates the engine and puts
`(clock(), event, extra)` on a queue, so decoding never waits for the UI; the app's timer calls
`Generation.fold` to move whatever is queued into the reply's spans and stats.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from edgespec.decoding.drafters import FROM_ELSEWHERE
from edgespec.decoding.events import Step, Summary, Token
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.tui.chat_store import Conversation
from edgespec.tui.stats import ReplyStats
from edgespec.tui.transcript import ReplySpans, ReplyView
from edgespec.util.errors import EdgespecError


class ContextFullError(EdgespecError):
    """The newest message alone does not fit the context window."""


def fit_context(engine: Engine, messages: list[dict], max_tokens: int) -> tuple[list[dict], int, int]:
    """Drop the oldest turns until the prompt leaves room for a reply (at least half the window, or
    `max_tokens`). -> (messages, turns dropped, prompt tokens)."""
    n_ctx = engine.n_ctx
    budget = n_ctx - min(max_tokens, n_ctx // 2)
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    turns = messages[len(head) :]
    used = engine.count_tokens(head + turns)
    dropped = 0
    while used > budget and len(turns) > 1:
        cut = 1  # a turn: one user message and whatever follows it up to the next one
        while cut < len(turns) - 1 and turns[cut]["role"] != "user":
            cut += 1
        turns = turns[cut:]
        dropped += 1
        used = engine.count_tokens(head + turns)
    if used > budget:
        raise ContextFullError(
            f"the message takes {used} tokens; the context window ({n_ctx}) leaves {budget} for the prompt"
        )
    return head + turns, dropped, used


@dataclass(frozen=True)
class _Failed:
    message: str


_DONE = object()  # the worker's last item: the generator has returned (or raised)


class Generation:
    """One reply in flight: the worker's queue and cancel flag, and where its output goes.

    `detached` is set when the user leaves the chat mid-reply (ctrl+n, or opening another chat): the
    worker is cancelled, and until it returns its remaining events still go into its own
    conversation (saved), but no longer onto the screen.
    """

    def __init__(
        self,
        conversation: Conversation,
        message: dict,
        view: ReplyView,
        sent_at: float,
        prompt_tokens: int,
        settings: GenerateSettings,
        earlier_reply: str | None = None,
    ):
        """`earlier_reply`: the reply this one replaces (a regenerate), for the engine to draft from."""
        self.settings = replace(settings, earlier_reply=earlier_reply or None)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.cancel = threading.Event()
        self.conversation = conversation
        self.message = message
        self.view = view
        self.spans = ReplySpans(message)
        self.stats = ReplyStats(sent_at=sent_at, sampled=not settings.sampling.greedy)
        self.prompt_tokens = prompt_tokens
        self.detached = False
        self._copying = False  # the latest Step's drafter copied from beyond the reply (FROM_ELSEWHERE)

    def run(self, engine: Engine, messages: list[dict], clock: Callable[[], float]) -> None:
        """Worker thread: iterate the engine and queue its events; never touches widgets."""
        put = self.queue.put
        token_text = getattr(engine, "token_text", None)
        try:
            for event in engine.chat(messages, self.settings, self.cancel):
                extra = None
                if type(event) is Step and event.rejected_ids:
                    # Resolved here, not in the UI thread: the engine is only used from this thread.
                    # A tree's rejected branches are shown side by side, parted by " | ".
                    extra = " | ".join(
                        "".join(token_text(i) if token_text else f"⟨{i}⟩" for i in branch)
                        for branch in event.rejected_branches()
                    )
                put((clock(), event, extra))
        except EdgespecError as e:
            put((clock(), _Failed(str(e)), None))
        except Exception as e:  # a backend failure must leave the app usable
            put((clock(), _Failed(f"{type(e).__name__}: {e}"), None))
        finally:
            put((clock(), _DONE, None))

    def fold(self, on_failure: Callable[[str], None]) -> tuple[bool, bool]:
        """Move queued events into the reply's spans and stats. -> (anything new, worker done)."""
        changed = False
        while True:
            try:
                at, event, extra = self.queue.get_nowait()
            except queue.Empty:
                return changed, False
            changed = True
            if type(event) is Token:
                self.spans.token(event.source, event.text, self._copying)
                self.stats.add(at, event)
            elif type(event) is Step:  # before the tokens it gave
                self._copying = event.drafter in FROM_ELSEWHERE
                self.stats.add(at, event)
                if extra:
                    self.spans.rejected(extra)
            elif type(event) is Summary:
                self.stats.add(at, event)
            elif type(event) is _Failed:
                self.stats.error = event.message
                on_failure(event.message)
            elif event is _DONE:
                return True, True
