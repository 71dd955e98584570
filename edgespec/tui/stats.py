"""Per-reply figures (live while generating, frozen afterwards) and the stats bar that shows them.

`ReplyStats` folds the event stream into the numbers users look for, named as llama.cpp names them:
decode tokens/s, time to first token, acceptance (accepted / drafted), tokens per target pass,
current K. While a reply streams, tokens/s and TTFT come from the wall-clock stamps the worker put
on each event (taken with the app's clock, so tests can fix it); once the `Summary` arrives its own
figures replace the live estimates.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from rich.text import Text
from textual.widgets import Static

from edgespec.decoding.events import ControllerState, Step, Summary, Token

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
            sum(values[i * n // width:(i + 1) * n // width]) / max(1, (i + 1) * n // width - i * n // width)
            for i in range(width)
        ]
    span = (hi - lo) or 1.0
    top = len(SPARK_CHARS) - 1
    return "".join(SPARK_CHARS[max(0, min(top, round((v - lo) / span * top)))] for v in values)


@dataclass
class ReplyStats:
    """Figures for one reply. Times are seconds on the app's clock; `summary` wins once it is in."""

    sent_at: float = 0.0
    first_token_at: float | None = None
    last_token_at: float | None = None
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    passes: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    plain_passes: int = 0  # passes with K=0: the reference cost of one plain token
    plain_s: float = 0.0
    k_series: list[int] = field(default_factory=list)
    acceptance_series: list[float] = field(default_factory=list)  # per pass with K > 0
    k_histogram: Counter = field(default_factory=Counter)
    sources: Counter = field(default_factory=Counter)
    controller: ControllerState | None = None
    current_k: int | None = None
    summary: Summary | None = None
    error: str | None = None

    def add(self, at: float, event: Token | Step | Summary) -> None:
        if isinstance(event, Token):
            self.tokens += 1
            self.sources[event.source.value] += 1
            if self.first_token_at is None:
                self.first_token_at = at
            self.last_token_at = at
        elif isinstance(event, Step):
            self.passes += 1
            self.drafted += event.k
            self.accepted += event.accepted
            self.draft_s += event.draft_s
            self.verify_s += event.verify_s
            self.k_series.append(event.k)
            self.k_histogram[event.k] += 1
            if event.k > 0:
                self.acceptance_series.append(event.accepted / event.k)
            else:
                self.plain_passes += 1
                self.plain_s += event.draft_s + event.verify_s
            if event.controller is not None:
                self.controller = event.controller
            self.current_k = event.controller.k if event.controller is not None else event.k
        elif isinstance(event, Summary):
            self.summary = event

    # The figures: the summary's when there is one, live estimates otherwise.

    @property
    def tokens_per_s(self) -> float:
        if self.summary is not None:
            return self.summary.decode_tokens_per_s
        if self.first_token_at is None or self.last_token_at is None or self.tokens < 2:
            return 0.0
        span = self.last_token_at - self.first_token_at
        # Decode rate excludes the first token (it carries the prefill), as the Summary does.
        return (self.tokens - 1) / span if span > 0 else 0.0

    @property
    def ttft_s(self) -> float | None:
        if self.summary is not None:
            return self.summary.ttft_s
        return None if self.first_token_at is None else self.first_token_at - self.sent_at

    @property
    def acceptance(self) -> float | None:
        drafted = self.summary.drafted if self.summary is not None else self.drafted
        accepted = self.summary.accepted if self.summary is not None else self.accepted
        return accepted / drafted if drafted else None

    @property
    def tokens_per_pass(self) -> float:
        if self.summary is not None:
            return self.summary.tokens_per_pass
        return self.tokens / self.passes if self.passes else 0.0

    @property
    def histogram(self) -> dict[int, int]:
        if self.summary is not None and self.summary.k_histogram:
            return dict(self.summary.k_histogram)
        return dict(self.k_histogram)

    @property
    def stop_reason(self) -> str:
        if self.error:
            return "error"
        return self.summary.stop_reason if self.summary is not None else ""

    # Saved with the reply, so a resumed chat shows the same frozen line.

    def to_dict(self) -> dict:
        return {
            "tokens_per_s": self.tokens_per_s,
            "ttft_s": self.ttft_s,
            "acceptance": self.acceptance,
            "tokens_per_pass": self.tokens_per_pass,
            "tokens": self.summary.tokens if self.summary is not None else self.tokens,
            "k_series": self.k_series,
            "acceptance_series": [round(a, 4) for a in self.acceptance_series],
            "k_histogram": {str(k): v for k, v in sorted(self.histogram.items())},
            "sources": dict(self.sources),
            "plain_passes": self.plain_passes,
            "plain_s": self.plain_s,
            "controller": asdict(self.controller) if self.controller is not None else None,
            "current_k": self.current_k,
            "stop_reason": self.stop_reason,
            "error": self.error,
            "summary": self.summary.to_dict() if self.summary is not None else None,
        }


def frozen_line(d: dict) -> Text:
    """The one-line record under a finished reply, from `ReplyStats.to_dict()` (live or loaded)."""
    t = Text(style="dim")
    parts = [f"{d.get('tokens', 0)} tokens", f"{d.get('tokens_per_s') or 0:.1f} tok/s"]
    if d.get("ttft_s") is not None:
        parts.append(f"TTFT {d['ttft_s']:.2f} s")
    if d.get("acceptance") is not None:
        parts.append(f"accept {d['acceptance']:.0%}")
    if d.get("tokens_per_pass"):
        parts.append(f"{d['tokens_per_pass']:.2f} tok/pass")
    t.append(" · ".join(parts))
    ks = d.get("k_series") or []
    if ks:
        t.append("  K ")
        t.append(sparkline([float(k) for k in ks], 0.0, float(max(ks) or 1), SPARK_WIDTH), style=f"not dim {K_STYLE}")
    acc = d.get("acceptance_series") or []
    if acc:
        t.append(" acc ")
        t.append(sparkline(acc, 0.0, 1.0, SPARK_WIDTH), style=f"not dim {ACC_STYLE}")
    reason = d.get("stop_reason")
    if d.get("error"):
        t.append(f"  · failed: {d['error']}", style="not dim bold")
    elif reason and reason != "eos":
        t.append(f"  · stopped: {reason}", style="not dim italic")
    return t


class StatsBar(Static):
    """One line above the prompt: live figures while generating, the last reply's otherwise.

    Takes the `ReplyStats.to_dict()` form for both, so live and frozen figures print the same way.
    Always one line (cut with an ellipsis when the terminal is narrow), so an update repaints this
    line alone instead of asking the whole screen for a new layout several times a second.
    """

    def show(self, d: dict | None, generating: bool) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        if generating:
            t.append("● ", style="bold #7bd88f")
        else:
            t.append("○ ", style="dim")
        if d is None or (generating and not d.get("tokens")):
            t.append("reading the prompt…" if generating else "ready", style="dim")
            self.update(t, layout=False)
            return
        t.append(f"{d.get('tokens_per_s') or 0:.1f} tok/s", style="bold")
        ttft = d.get("ttft_s")
        t.append(f" · TTFT {ttft:.2f} s" if ttft is not None else " · TTFT –")
        acc = d.get("acceptance")
        t.append(f" · accept {acc:.0%}" if acc is not None else " · accept –")
        t.append(f" · {d.get('tokens_per_pass') or 0:.2f} tok/pass")
        if d.get("current_k") is not None:
            t.append(f" · K {d['current_k']}")
            drafter = (d.get("controller") or {}).get("drafter")
            if drafter:
                t.append(f" {drafter}", style="dim")
        ks = d.get("k_series") or []
        if ks:
            t.append("  K ", style="dim")
            t.append(sparkline([float(k) for k in ks], 0.0, float(max(ks) or 1), SPARK_WIDTH), style=K_STYLE)
        acc_series = d.get("acceptance_series") or []
        if acc_series:
            t.append(" acc ", style="dim")
            t.append(sparkline(acc_series, 0.0, 1.0, SPARK_WIDTH), style=ACC_STYLE)
        if not generating and d.get("stop_reason") not in (None, "", "eos"):
            t.append(f" · {d['stop_reason']}", style="dim")
        self.update(t, layout=False)


def context_gauge(used: int | None, n_ctx: int | None) -> Text:
    """'ctx 812/4096 (20%)', yellow past 75 %, red past 90 % (shown on the prompt box)."""
    if used is None or not n_ctx:
        return Text("")
    fill = used / n_ctx
    style = "bold red" if fill > 0.9 else "yellow" if fill > 0.75 else ""
    return Text(f"ctx {used}/{n_ctx} ({fill:.0%})", style=style)
