"""The transcript: user messages, replies coloured by token source, notices; and the legend.

A reply is kept as a list of spans `[source, text]` inside its saved message (see `chat_store.py`), so
the very list the UI renders is the one written to disk. Styles must read without colour too:
corrections are underlined, bonus tokens bold, thrown-away draft text struck through; accepted
draft tokens are green and plain target tokens (K=0) are left as they are.
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Markdown, Static

from edgespec.decoding.events import Source
from edgespec.tui.chat_store import COPIED, REJECTED
from edgespec.tui.stats import ReplyFigures, frozen_line

STYLES: dict[str, str] = {
    Source.DRAFT.value: "#7bd88f",
    COPIED: "#c3a6ff",
    Source.CORRECTION.value: "underline #ff8f7a",
    Source.BONUS.value: "bold #5fd7ff",
    Source.TARGET.value: "",
    Source.REPEATED.value: "#c3a6ff",  # copied whole: the same request's reply, served again
    REJECTED: "strike #8a8a8a",
}

LEGEND_LABELS: list[tuple[str, str]] = [
    (Source.DRAFT.value, "draft accepted"),
    (COPIED, "copied"),
    (Source.CORRECTION.value, "correction"),
    (Source.BONUS.value, "bonus"),
    (Source.TARGET.value, "target"),  # repeated: copied's colour; its reply's line says "served again"
    (REJECTED, "rejected"),
]

# Consecutive tokens of these sources merge into one span. Corrections and bonus tokens stay one
# span each: a correction's rejected draft text is inserted right before it.
_MERGING = {Source.DRAFT, Source.TARGET, Source.REPEATED}


class ReplySpans:
    """Builds a reply's spans and content from Token events and the rejected text of Steps.

    The thrown-away draft tokens sat where the correction now stands, so their text goes right
    before the correction token. Whether the decoder yields a round's Step before or after its
    tokens, the text lands there: after -> inserted before the last correction; before -> held
    until the next correction arrives.
    """

    def __init__(self, message: dict):
        self.message = message
        self._pending: str | None = None  # rejected text waiting for its correction
        self._awaiting: int | None = None  # index of a correction span with no rejected text yet

    def token(self, source: Source, text: str, copied: bool = False) -> None:
        """A token of `source`; `copied`: an accepted draft copied from earlier calls or the
        repository (shown apart from the draft model's and the prompt's)."""
        spans = self.message["spans"]
        self.message["content"] += text
        kind = COPIED if copied and source is Source.DRAFT else source.value
        if source in _MERGING and spans and spans[-1][0] == kind:
            spans[-1][1] += text
            return
        if source is Source.CORRECTION and self._pending is not None:
            spans.append([REJECTED, self._pending])
            self._pending = None
            self._awaiting = None
            spans.append([source.value, text])
            return
        spans.append([kind, text])
        self._awaiting = len(spans) - 1 if source is Source.CORRECTION else None

    def rejected(self, text: str) -> None:
        spans = self.message["spans"]
        if self._awaiting is not None and self._awaiting == len(spans) - 1:
            spans.insert(self._awaiting, [REJECTED, text])
            self._awaiting = None
        else:
            self._pending = text

    def finish(self) -> None:
        """A round cut short (cancel, stop) may leave rejected text with no correction: keep it last."""
        if self._pending is not None:
            self.message["spans"].append([REJECTED, self._pending])
            self._pending = None


# Model output is untrusted: a stray ESC or other C0 control byte must not reach the terminal as
# such. They are shown as their Unicode "control picture" (U+2400 + code); newline and tab stay.
_VISIBLE_CONTROLS = {c: 0x2400 + c for c in range(0x20) if chr(c) not in "\n\t"} | {0x7F: 0x2421}


def printable(text: str) -> str:
    return text.translate(_VISIBLE_CONTROLS)


def render_spans(spans: list, show_rejected: bool) -> Text:
    text = Text()
    for kind, chunk in spans:
        if kind == REJECTED and not show_rejected:
            continue
        text.append(printable(chunk), style=STYLES.get(kind, ""))
    return text


def legend() -> Text:
    t = Text("tokens: ", style="dim")
    for i, (kind, label) in enumerate(LEGEND_LABELS):
        if i:
            t.append(" · ", style="dim")
        t.append(label, style=STYLES[kind] or "default")
    t.append("   F3 markdown · F4 rejected", style="dim")
    return t


class UserMessage(Static):
    def __init__(self, content: str):
        super().__init__(Text(printable(content)), classes="user")
        self.border_title = "you"


class SystemMessage(Static):
    def __init__(self, content: str):
        super().__init__(Text(content), classes="system")
        self.border_title = "system"


class Notice(Static):
    """A visible note in the transcript (trimmed turns, context full)."""

    def __init__(self, content: str):
        super().__init__(Text(content), classes="notice")


class ReplyView(Vertical):
    """One assistant reply: coloured tokens (or Markdown once finished) and its frozen stats.

    While a reply streams, its finished lines move into blocks that are never repainted: a repaint
    re-wraps the whole text, several times a second, on a CPU the decoder needs, so each repaint
    must cost the last lines only (a long reply repainted whole several times a second slows
    decoding visibly on a small CPU)."""

    FREEZE_SPANS = 48  # spans kept live at the end; older finished lines are frozen

    def __init__(self, message: dict, show_rejected: bool = False, generating: bool = False):
        super().__init__(classes="reply")
        self._frozen = 0  # spans already in frozen blocks
        self._blocks: list[Static] = []
        self.border_title = "assistant"
        self.message = message
        self.show_rejected = show_rejected
        self.generating = generating
        self.tokens = Static(self._token_text(), classes="tokens")
        self.footer = Static(classes="reply-stats")
        self._markdown: Markdown | None = None
        if message.get("stats") is not None:
            self.footer.update(frozen_line(ReplyFigures.from_saved(message["stats"])))
        elif not generating and not message.get("complete", True):
            self.footer.update(Text("interrupted: the app stopped before this reply finished", style="dim italic"))

    def compose(self):
        yield self.tokens
        yield self.footer

    def on_mount(self) -> None:
        # Updates that came before the mount could not freeze lines (there was nowhere to put the
        # blocks); a paused or slow stream may bring no next update, so freeze them now.
        if self.generating:
            self.call_later(self.update_tokens)

    def _spans(self) -> list:
        return self.message.get("spans") or [["target", self.message.get("content", "")]]

    def _token_text(self) -> Text:
        text = render_spans(self._spans()[self._frozen :], self.show_rejected)
        if self.generating:
            text.append("▍", style="dim")
        return text

    def update_tokens(self) -> None:
        if self.generating:
            self._freeze_finished_lines()
        tokens = self.tokens
        tokens.update(self._token_text(), layout=False)
        # A layout re-arranges the whole screen; most updates add words to the last line, so ask
        # for one only when the text now wraps to another height (measured, not guessed).
        width, height = tokens.content_size
        if not width or tokens.get_content_height(tokens.content_size, tokens.content_size, width) != height:
            tokens.refresh(layout=True)

    def _freeze_finished_lines(self) -> None:
        tail = self._spans()[self._frozen :]
        if len(tail) < 2 * self.FREEZE_SPANS or not self.is_mounted:
            return
        cut = max((i for i in range(len(tail) - self.FREEZE_SPANS) if tail[i][1].endswith("\n")), default=None)
        if cut is None:
            return
        block = Static(render_spans(tail[: cut + 1], self.show_rejected), classes="tokens")
        self.mount(block, before=self.tokens)
        self._blocks.append(block)
        self._frozen += cut + 1

    def _unfreeze(self) -> None:
        """Back to one text (a toggle, or the reply is done)."""
        for block in self._blocks:
            block.remove()
        self._blocks.clear()
        self._frozen = 0

    def set_show_rejected(self, on: bool) -> None:
        if on != self.show_rejected:
            self.show_rejected = on
            self._unfreeze()
            self.update_tokens()

    def finish(self, figures: ReplyFigures) -> None:
        self.generating = False
        self._unfreeze()
        self.update_tokens()
        self.footer.update(frozen_line(figures))

    def set_markdown(self, on: bool) -> None:
        """Markdown (with highlighted code blocks) replaces the token colours of a finished reply."""
        if on and not self.generating:
            self._unfreeze()
            if self._markdown is None:
                self._markdown = Markdown(printable(self.message.get("content", "")), classes="markdown")
                self.mount(self._markdown, before=self.footer)
            self.add_class("-markdown")
        else:
            self.remove_class("-markdown")


class Transcript(VerticalScroll):
    """Scrolls with the reply (anchored to the bottom) until the user scrolls up."""

    def on_mount(self) -> None:
        self.anchor()

    def replies(self) -> list[ReplyView]:
        return list(self.query(ReplyView))
