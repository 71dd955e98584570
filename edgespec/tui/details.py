"""F2: details of the last reply: K histogram, where the time went, and how much drafting gained.

Built from `ReplyFigures`, as saved with each reply, so a resumed chat's last reply has the same
panel as a live one.

Speedup estimate, best source first: the K controller's own live figure (tokens/s over the measured
plain-decoding rate); else the reply's plain passes (K=0) as the reference cost of one token; else
only an upper bound, tokens per target pass (what drafting gives if verifying K+1 tokens cost as much
as one and drafting were free).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from edgespec.engine.stats_line import replaced_note
from edgespec.tui.stats import ReplyFigures
from edgespec.tui.transcript import STYLES

if TYPE_CHECKING:
    from edgespec.decoding.events import Summary

BAR = 30


def _bar(fraction: float, width: int = BAR) -> str:
    n = max(0, min(width, round(fraction * width)))
    return "█" * n


def speedup_line(f: ReplyFigures) -> Text:
    s = f.summary
    c = s.controller
    if c is not None and c.measured_speedup:
        t = Text()
        t.append(f"{c.measured_speedup:.2f}×", style="bold")
        t.append(" measured by the K controller")
        if c.predicted_speedup:
            t.append(f" · {c.predicted_speedup:.2f}× predicted by its cost model", style="dim")
        return t
    spent = s.draft_s + s.verify_s
    if s.plain_passes and spent > 0 and s.tokens:
        per_token = s.plain_s / s.plain_passes
        t = Text()
        t.append(f"{s.tokens * per_token / spent:.2f}×", style="bold")
        t.append(f" estimated against this reply's {s.plain_passes} plain passes ({per_token * 1000:.0f} ms/token)")
        return t
    if s.tokens_per_pass:
        return Text(f"≤ {s.tokens_per_pass:.2f}× (tokens per target pass; no plain-decoding reference in this reply)")
    return Text("n/a", style="dim")


def details_renderable(f: ReplyFigures | None) -> Group | Text:
    if f is None:
        return Text("No reply yet: send a message first.", style="dim")
    s = f.summary
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    head = Text(f"{s.tokens} tokens")
    if f.error:
        head.append(f" · failed: {f.error}", style="bold")
    elif s.stop_reason:
        head.append(f" · stopped: {s.stop_reason}")
    grid.add_row("reply", head)
    decode = Text()
    decode.append(f"{s.decode_tokens_per_s:.1f} tok/s", style="bold")
    decode.append(f" · TTFT {s.ttft_s:.2f} s")
    if s.target_read_tokens:  # the rest of the prompt was in the cache (a chat's earlier turns)
        decode.append(f" · read {s.target_read_tokens} of {s.prompt_tokens} prompt tokens in {s.target_read_s:.2f} s")
        if s.prompt_read_ahead:  # read while the message was written (tui/read_while_typing.py)
            decode.append(f" · {s.prompt_read_ahead} read ahead as the message was written")
    elif s.prompt_tokens:  # saved by a version that did not count them
        decode.append(f" · {s.prompt_tokens} prompt tokens")
    if s.draft_read_s:
        decode.append(f" · draft read {s.draft_read_s:.2f} s")
    decode.append(f" · whole reply {s.total_s:.2f} s")
    grid.add_row("decode", decode)
    if s.target_passes:
        acc = f" ({s.acceptance:.0%})" if s.drafted else ""
        grid.add_row(
            "drafting",
            f"{s.drafted} drafted · {s.accepted} accepted{acc} · {s.target_passes} target passes · "
            f"{s.tokens_per_pass:.2f} tokens/pass",
        )
    if note := replaced_note(s):  # a regenerate: how much of the reply it replaces was taken
        verified = "every draft is verified by the target: drafting leaves the output's distribution unchanged"
        grid.add_row("regenerated", f"{note}\n{verified}")
    if split := _time_split(s):
        grid.add_row("time", split)
    grid.add_row("speedup", speedup_line(f))
    if s.sources:
        src = Text()
        kinds = ("draft", "correction", "bonus", "target", *(("repeated",) if "repeated" in s.sources else ()))
        for i, kind in enumerate(kinds):
            if i:
                src.append(" · ")
            src.append(f"{kind} {s.sources.get(kind, 0)}", style=STYLES[kind] or "default")
        grid.add_row("tokens", src)

    parts: list = [grid]
    if s.k_histogram:
        parts += [Text("\nK histogram (target passes per draft length)", style="bold"), _k_table(s.k_histogram)]
    return Group(*parts)


def _time_split(s: Summary) -> Text | None:
    """Where the decoding time went, as a bar and a line: drafting, verifying, the rest; None when
    no time was measured."""
    total = max(s.decode_s, s.draft_s + s.verify_s)
    if total <= 0:
        return None
    other = max(0.0, total - s.draft_s - s.verify_s)
    split = Text()
    split.append(_bar(s.draft_s / total), style=STYLES["draft"])
    split.append(_bar(s.verify_s / total), style="#5fd7ff")
    split.append(_bar(other / total).replace("█", "░"), style="dim")
    split.append(
        f"\ndraft {s.draft_s:.2f} s ({s.draft_s / total:.0%}) · verify {s.verify_s:.2f} s "
        f"({s.verify_s / total:.0%}) · other {other:.2f} s ({other / total:.0%})"
    )
    return split


def _k_table(hist: dict[int, int]) -> Table:
    """Target passes per draft length K, a bar each, scaled to the most common K."""
    most = max(hist.values()) or 1
    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", style="bold")
    table.add_column()
    table.add_column(justify="right")
    for k in sorted(hist):
        table.add_row(f"K={k}", Text(_bar(hist[k] / most, 24) or "▏", style="#5fd7ff"), str(hist[k]))
    return table


class DetailsScreen(ModalScreen):
    """The details panel; esc or F2 closes it."""

    BINDINGS = [Binding("escape", "dismiss", "Close"), Binding("f2", "dismiss", "Close")]

    def __init__(self, figures: ReplyFigures | None):
        super().__init__()
        self.figures = figures

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="details"):
            yield Static(details_renderable(self.figures), id="details-body")

    def on_mount(self) -> None:
        self.query_one("#details").border_title = "last reply · details"
        self.query_one("#details").border_subtitle = "esc close"
