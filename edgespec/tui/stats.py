"""Per-reply figures (live while generating, frozen afterwards) and the stats bar that shows them.

`ReplyStats` folds a streaming reply's events into a `Tally` (the one the decoder keeps too) and
stamps them with the app's clock, so tokens/s and TTFT can be shown before the decoder's `Summary`
arrives; `ReplyFigures` is what every view renders and what is saved with the reply.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from rich.text import Text
from textual.widgets import Static

from edgespec.decoding.events import Step, Summary, Tally, Token
from edgespec.engine.stats_line import figure_parts, replaced_note

SPARK_CHARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 12
K_STYLE = "#5fd7ff"
ACC_STYLE = "#7bd88f"


def sparkline(values: list[float], lo: float, hi: float, width: int = 16) -> str:
    """The whole series squeezed into at most `width` cells (bucket means), scaled to lo..hi."""
    if not values:
        return ""
    if len(values) > width:
        n = len(values)
        values = [
            sum(values[i * n // width : (i + 1) * n // width]) / max(1, (i + 1) * n // width - i * n // width)
            for i in range(width)
        ]
    span = (hi - lo) or 1.0
    top = len(SPARK_CHARS) - 1
    return "".join(SPARK_CHARS[max(0, min(top, round((v - lo) / span * top)))] for v in values)


@dataclass(frozen=True)
class ReplyFigures:
    """A reply's figures as shown and saved: its Summary (a live estimate while it streams) and the
    error that ended it, if any. Saved with the reply as `to_saved()`, so a resumed chat shows the
    same line and details panel."""

    summary: Summary
    error: str | None = None

    @property
    def current_k(self) -> int | None:
        """The draft length of the latest pass, as the controller chose it."""
        s = self.summary
        if s.controller is not None:
            return s.controller.draft_len
        return s.k_series[-1] if s.k_series else None

    def to_saved(self) -> dict:
        return {**self.summary.to_dict(), "error": self.error}

    @classmethod
    def from_saved(cls, d: object) -> ReplyFigures:
        """Read `to_saved()`'s layout, or the first version's (figures at the top, the decoder's
        summary nested under "summary"). Raises TypeError or ValueError on a malformed record."""
        if not isinstance(d, dict):
            raise TypeError("stats is not an object")
        error = d.get("error")
        if error is not None and not isinstance(error, str):
            raise TypeError("stats.error is not a string")
        if "summary" in d:  # version 1
            nested = d["summary"] or {}
            if not isinstance(nested, dict):
                raise TypeError("stats.summary is not an object")
            d = {
                **{k: v for k, v in d.items() if k in _V1_TALLY_KEYS},
                **nested,
                **({} if nested else {"ttft_s": d.get("ttft_s") or 0.0, "stop_reason": d.get("stop_reason") or ""}),
            }
        return cls(Summary.from_dict(d), error)


_V1_TALLY_KEYS = ("tokens", "k_series", "acceptance_series", "sources", "plain_passes", "plain_s", "controller")


@dataclass
class ReplyStats:
    """One streaming reply's figures: a Tally of its events plus the wall-clock stamps the worker
    put on them (taken with the app's clock, so tests can fix it). Once the decoder's `Summary`
    arrives it replaces the live estimate."""

    sent_at: float = 0.0
    first_token_at: float | None = None
    last_token_at: float | None = None
    tally: Tally = field(default_factory=Tally)
    summary: Summary | None = None
    error: str | None = None
    sampled: bool = False  # the settings' sampling, which the Summary states once it is in

    def add(self, at: float, event: Token | Step | Summary) -> None:
        if isinstance(event, Summary):
            self.summary = event
            return
        self.tally.add(event)
        if isinstance(event, Token):
            if self.first_token_at is None:
                self.first_token_at = at
            self.last_token_at = at

    @property
    def tokens(self) -> int:
        return self.tally.tokens

    def figures(self) -> ReplyFigures:
        """The Summary once it is in; until then one estimated from the stamps (decode time from
        the first token to the latest, as the decoder measures it)."""
        if self.summary is not None:
            return ReplyFigures(self.summary, self.error)
        s = Summary(**{f.name: getattr(self.tally, f.name) for f in fields(Tally)})
        if self.first_token_at is not None and self.last_token_at is not None:  # stamped together
            s.ttft_s = self.first_token_at - self.sent_at
            s.decode_s = self.last_token_at - self.first_token_at
        s.stop_reason = "error" if self.error else ""
        s.sampled = self.sampled
        return ReplyFigures(s, self.error)


def _sparks(s: Summary, t: Text, label_style: str) -> None:
    """The K and acceptance series of the reply as two small sparklines."""
    if s.k_series:
        t.append("  K ", style=label_style)
        t.append(
            sparkline([float(k) for k in s.k_series], 0.0, float(max(s.k_series) or 1), SPARK_WIDTH),
            style=f"not dim {K_STYLE}",
        )
    if s.acceptance_series:
        t.append(" acc ", style=label_style)
        t.append(sparkline(s.acceptance_series, 0.0, 1.0, SPARK_WIDTH), style=f"not dim {ACC_STYLE}")


def frozen_line(f: ReplyFigures) -> Text:
    """The one-line record under a finished reply."""
    s = f.summary
    t = Text(style="dim")
    p = figure_parts(s, compact=True)  # the whole reply's split is in the details panel
    t.append(" · ".join((p.speed, p.tokens, p.ttft, p.acceptance, p.per_pass)))
    if note := replaced_note(s):
        t.append(f" · {note}")
    _sparks(s, t, "dim")
    if f.error:
        t.append(f"  · failed: {f.error}", style="not dim bold")
    elif s.stop_reason and s.stop_reason != "eos":
        t.append(f"  · stopped: {s.stop_reason}", style="not dim italic")
    return t


class StatsBar(Static):
    """One line above the prompt: live figures while generating, the last reply's otherwise.

    Always one line (cut with an ellipsis when the terminal is narrow), so an update repaints this
    line alone instead of asking the whole screen for a new layout several times a second.
    """

    def show(self, f: ReplyFigures | None, generating: bool) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        if generating:
            t.append("● ", style="bold #7bd88f")
        else:
            t.append("○ ", style="dim")
        if f is None or (generating and not f.summary.tokens):
            t.append("reading the prompt…" if generating else "ready", style="dim")
            self.update(t, layout=False)
            return
        s = f.summary
        parts = figure_parts(s, compact=True)  # the token count is on the reply's own line
        t.append(parts.speed, style="bold")
        ttft = parts.ttft + (f" ({s.prompt_read_ahead} read ahead)" if s.prompt_read_ahead else "")
        t.append(" · " + " · ".join((ttft, parts.acceptance, parts.per_pass)))
        if note := replaced_note(s):  # before K and the sparklines: a narrow bar cuts those first
            t.append(f" · {note}")
        if f.current_k is not None:
            t.append(f" · K {f.current_k}")
            if s.controller is not None and s.controller.drafter:
                t.append(f" {s.controller.drafter}", style="dim")
        _sparks(s, t, "dim")
        if not generating and s.stop_reason not in ("", "eos"):
            t.append(f" · {s.stop_reason}", style="dim")
        self.update(t, layout=False)


def context_gauge(used: int | None, n_ctx: int | None) -> Text:
    """'ctx 812/4096 (20%)', yellow past 75 %, red past 90 % (shown on the prompt box)."""
    if used is None or not n_ctx:
        return Text("")
    fill = used / n_ctx
    style = "bold red" if fill > 0.9 else "yellow" if fill > 0.75 else ""
    return Text(f"ctx {used}/{n_ctx} ({fill:.0%})", style=style)
