"""One request's reply: the engine's events folded into what its client is sent, and how that is
worded for each endpoint.

`Reply` keeps the one `Tally` of what was sent (the tokens released past the stop strings, and
every target pass), so `usage`, the per-source counts and the speculative figures all come from
the same count; the engine's Summary adds only its timings (TTFT, decode tokens/s). `ChatFormat`
and `TextFormat` word a reply as chat.completion(.chunk) or text_completion bodies.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from edgespec.decoding.events import Step, Summary, Tally, Token
from edgespec.server.line_limits import LineLimits
from edgespec.server.schemas import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatMessage,
    Delta,
    FinishReason,
    Metrics,
    PromptTokensDetails,
    SpeculativeDecoding,
    TextChoice,
    TextCompletion,
    TokenOrigin,
    TokenOrigins,
    Usage,
)
from edgespec.server.stop_strings import StopCut
from edgespec.server.tool_call_parser import ToolCallParser


class Reply:
    """`limits`: an inline completion's line rules (`/infill`, `/completion`), after the stop strings."""

    def __init__(self, stops: tuple[str, ...], prompt_tokens: int, limits: LineLimits | None = None):
        self.cut = StopCut(stops)
        self.limits = limits
        self.sent = Tally()
        self.summary = Summary()
        self.prompt_tokens = prompt_tokens

    def add(self, event: Token | Step | Summary) -> list[Token]:
        """Fold one engine event; returns the tokens to send now."""
        if isinstance(event, Summary):
            self.summary = event
            out = self.cut.flush()
            if self.limits is not None:
                out = self.limits.feed(out) + self.limits.flush()
        elif isinstance(event, Step):
            self.sent.add(event)
            return []
        else:
            out = self.cut.feed(event)
            if self.limits is not None:
                out = self.limits.feed(out)
        for token in out:
            self.sent.add(token)
        return out

    @property
    def ended(self) -> bool:
        """A stop string or a line rule has ended the reply: the generation can stop."""
        return self.cut.met or (self.limits is not None and self.limits.met)

    @property
    def finish_reason(self) -> FinishReason:
        """ "stop" at the end of the text or a stop string; "length" at max_tokens or a full context."""
        return "stop" if self.cut.met or self.summary.stop_reason == "eos" else "length"

    def usage(self) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.sent.tokens,
            total_tokens=self.prompt_tokens + self.sent.tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=self.summary.prompt_cached),
        )

    def metrics(self) -> Metrics:
        t = self.sent
        spec_ks = [k for k in t.k_series if k]  # acceptance_series has one entry per pass with K > 0
        histogram = [0] * (max(spec_ks, default=0) + 1)
        for rate, k in zip(t.acceptance_series, spec_ks, strict=True):
            histogram[round(rate * k)] += 1
        steps = len(spec_ks)
        spec = SpeculativeDecoding(
            num_spec_steps=steps,
            num_draft_tokens=t.drafted,
            num_accepted_draft_tokens=t.accepted,
            draft_acceptance_rate=t.acceptance if t.drafted else None,
            mean_acceptance_length=1 + t.accepted / steps if steps else None,
            acceptance_histogram=histogram,
            target_passes=t.target_passes,
            tokens_per_target_pass=t.tokens_per_pass,
            k_histogram={str(k): n for k, n in sorted(t.k_histogram.items())},
        )
        return Metrics(
            speculative_decoding=spec,
            decode_tokens_per_s=self.summary.decode_tokens_per_s,
            ttft_s=self.summary.ttft_s,
            sources=dict(t.sources),
        )


def origins(tokens: list[Token]) -> TokenOrigins:
    return TokenOrigins(tokens=[TokenOrigin(id=t.id, text=t.text, source=t.source.value) for t in tokens])


@dataclass
class _Format:
    model: str
    created: int = field(default_factory=lambda: int(time.time()))


@dataclass
class ChatFormat(_Format):
    """POST /v1/chat/completions: a message, or deltas after one that names the assistant's role.
    With `calls` (a request whose tools the reply may call), the text is read for tool calls
    (edgespec.server.tool_call_parser): a delta per piece of content or of a call, and the finish reason
    "tool_calls" for a reply that called."""

    calls: ToolCallParser | None = None
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")

    def _chunk(self, choices: list[ChatChunkChoice], **extra) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=choices, **extra)

    def opening(self) -> ChatCompletionChunk | None:
        return self._chunk([ChatChunkChoice(delta=Delta(role="assistant", content=""))])

    def pieces(self, text: str, sent: TokenOrigins | None) -> list[ChatCompletionChunk]:
        """The chunks for the reply's next text; the tokens' origins go with the first (or alone)."""
        if self.calls is None:
            deltas = [Delta(content=text)] if text else []
        else:
            deltas = self.calls.feed(text)
        if sent is not None and not deltas:
            deltas = [Delta(content="")]
        return [
            self._chunk([ChatChunkChoice(delta=d)], edgespec=sent if i == 0 else None) for i, d in enumerate(deltas)
        ]

    def last_pieces(self) -> list[ChatCompletionChunk]:
        """What the reading of tool calls held back until the reply's end."""
        deltas = self.calls.end() if self.calls is not None else []
        return [self._chunk([ChatChunkChoice(delta=d)]) for d in deltas]

    def ending(self, finish: FinishReason, **extra) -> ChatCompletionChunk:
        finish = self.calls.finish_reason(finish) if self.calls is not None else finish
        return self._chunk([ChatChunkChoice(delta=Delta(), finish_reason=finish)], **extra)

    def usage_chunk(self, **extra) -> ChatCompletionChunk:
        return self._chunk([], **extra)

    def whole(self, text: str, finish: FinishReason, **extra) -> ChatCompletion:
        if self.calls is None:
            message = ChatMessage(content=text)
        else:
            self.calls.feed(text)
            self.calls.end()
            message, finish = self.calls.message(), self.calls.finish_reason(finish)
        choice = ChatChoice(message=message, finish_reason=finish)
        return ChatCompletion(id=self.id, created=self.created, model=self.model, choices=[choice], **extra)


@dataclass
class TextFormat(_Format):
    """POST /v1/completions: the same text_completion body whole or in pieces."""

    id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")

    def _body(self, choices: list[TextChoice], **extra) -> TextCompletion:
        return TextCompletion(id=self.id, created=self.created, model=self.model, choices=choices, **extra)

    def opening(self) -> None:
        return None

    def pieces(self, text: str, sent: TokenOrigins | None) -> list[TextCompletion]:
        return [self._body([TextChoice(text=text)], edgespec=sent)] if text or sent is not None else []

    def last_pieces(self) -> list[TextCompletion]:
        return []

    def ending(self, finish: FinishReason, **extra) -> TextCompletion:
        return self._body([TextChoice(text="", finish_reason=finish)], **extra)

    def usage_chunk(self, **extra) -> TextCompletion:
        return self._body([], **extra)

    def whole(self, text: str, finish: FinishReason, **extra) -> TextCompletion:
        return self._body([TextChoice(text=text, finish_reason=finish)], **extra)
