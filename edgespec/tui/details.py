"""F2: details of the last reply: K histogram, where the time went, and how much drafting gained.

Built from the saved stats dict (`ReplyStats.to_dict()`), so a resumed chat's last reply has the same
panel as a live one.

Speedup estimate, best source first: the K controller's own live figure (tokens/s over the measured
plain-decoding rate); else the reply's plain passes (K=0) as the reference cost of one token; else
only an upper bound, tokens per target pass (what drafting gives if verifying K+1 tokens cost as much
as one and drafting were free).
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from edgespec.tui.transcript import STYLES

BAR = 30


def _bar(fraction: float, width: int = BAR) -> str:
    n = max(0, min(width, round(fraction * width)))
    return "█" * n


def speedup_line(d: dict) -> Text:
    c = d.get("controller")
    if c and c.get("measured_speedup"):
        t = Text()
        t.append(f"{c['measured_speedup']:.2f}×", style="bold")
        t.append(" measured by the K controller")
        if c.get("predicted_speedup"):
            t.append(f" · {c['predicted_speedup']:.2f}× predicted by its cost model", style="dim")
        return t
    plain_passes, plain_s = d.get("plain_passes", 0), d.get("plain_s", 0.0)
    s = d.get("summary") or {}
    spent = (s.get("draft_s") or 0.0) + (s.get("verify_s") or 0.0)
    tokens = s.get("tokens") or d.get("tokens") or 0
    if plain_passes and spent > 0 and tokens:
        est = tokens * (plain_s / plain_passes) / spent
        t = Text()
        t.append(f"{est:.2f}×", style="bold")
        t.append(f" estimated against this reply's {plain_passes} plain passes ({plain_s / plain_passes * 1000:.0f} ms/token)")
        return t
    tpp = d.get("tokens_per_pass") or 0.0
    if tpp:
        return Text(f"≤ {tpp:.2f}× (tokens per target pass; no plain-decoding reference in this reply)")
    return Text("n/a", style="dim")


def details_renderable(d: dict | None) -> Group | Text:
    if not d:
        return Text("No reply yet: send a message first.", style="dim")
    s = d.get("summary") or {}
    tokens = s.get("tokens", d.get("tokens", 0))

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    head = Text(f"{tokens} tokens")
    reason = d.get("stop_reason")
    if d.get("error"):
        head.append(f" · failed: {d['error']}", style="bold")
    elif reason:
        head.append(f" · stopped: {reason}")
    grid.add_row("reply", head)
    ttft = d.get("ttft_s")
    decode = Text()
    decode.append(f"{d.get('tokens_per_s') or 0:.1f} tok/s", style="bold")
    if ttft is not None:
        decode.append(f" · TTFT {ttft:.2f} s")
    if s.get("prompt_tokens"):
        decode.append(f" · prefill {s['prompt_tokens']} tokens in {s.get('prefill_s', 0):.2f} s")
    grid.add_row("decode", decode)
    drafted, accepted, passes = s.get("drafted"), s.get("accepted", 0), s.get("target_passes", 0)
    if drafted is not None:
        acc = f" ({accepted / drafted:.0%})" if drafted else ""
        grid.add_row("drafting", f"{drafted} drafted · {accepted} accepted{acc} · {passes} target passes · "
                                 f"{d.get('tokens_per_pass') or 0:.2f} tokens/pass")

    draft_s, verify_s, decode_s = s.get("draft_s", 0.0), s.get("verify_s", 0.0), s.get("decode_s", 0.0)
    total = max(decode_s, draft_s + verify_s)
    if total > 0:
        other = max(0.0, total - draft_s - verify_s)
        split = Text()
        split.append(_bar(draft_s / total), style=STYLES["draft"])
        split.append(_bar(verify_s / total), style="#5fd7ff")
        split.append(_bar(other / total).replace("█", "░"), style="dim")
        split.append(f"\ndraft {draft_s:.2f} s ({draft_s / total:.0%}) · verify {verify_s:.2f} s "
                     f"({verify_s / total:.0%}) · other {other:.2f} s ({other / total:.0%})")
        grid.add_row("time", split)
    grid.add_row("speedup", speedup_line(d))
    sources = d.get("sources") or {}
    if sources:
        src = Text()
        for i, kind in enumerate(("draft", "correction", "bonus", "target")):
            if i:
                src.append(" · ")
            src.append(f"{kind} {sources.get(kind, 0)}", style=STYLES[kind] or "default")
        grid.add_row("tokens", src)

    hist = {int(k): v for k, v in (d.get("k_histogram") or {}).items()}
    parts: list = [grid]
    if hist:
        most = max(hist.values())
        table = Table.grid(padding=(0, 1))
        table.add_column(justify="right", style="bold")
        table.add_column()
        table.add_column(justify="right")
        for k in sorted(hist):
            table.add_row(f"K={k}", Text(_bar(hist[k] / most, 24) or "▏", style="#5fd7ff"), str(hist[k]))
        parts += [Text("\nK histogram (target passes per draft length)", style="bold"), table]
    return Group(*parts)


class DetailsScreen(ModalScreen):
    """The details panel; esc or F2 closes it."""

    BINDINGS = [Binding("escape", "dismiss", "Close"), Binding("f2", "dismiss", "Close")]

    def __init__(self, stats: dict | None):
        super().__init__()
        self.stats = stats

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="details"):
            yield Static(details_renderable(self.stats), id="details-body")

    def on_mount(self) -> None:
        self.query_one("#details").border_title = "last reply · details"
        self.query_one("#details").border_subtitle = "esc close"
