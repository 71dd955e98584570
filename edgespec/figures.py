"""The figures of a generation, worded once for every front end.

`run --stats`, the chat app's stats bar and the line under each finished reply all show the same
few numbers, named as llama.cpp's tools name them (tokens/s, TTFT, acceptance, tokens per target
pass): `figure_parts` words them, each front end joins and styles them its own way.
"""

from __future__ import annotations

from typing import NamedTuple

from edgespec.decoding.events import Summary


class FigureParts(NamedTuple):
    speed: str
    tokens: str
    ttft: str
    acceptance: str
    per_pass: str


def figure_parts(s: Summary, compact: bool = False) -> FigureParts:
    """Decode speed, tokens, time to first token, acceptance, tokens per target pass. `compact`
    words them for a one-line bar that also holds sparklines (the chat app)."""
    if not s.drafted:
        acceptance = "accept –" if compact else "acceptance –"
    elif compact:
        acceptance = f"accept {s.acceptance:.0%}"
    else:
        acceptance = f"acceptance {s.acceptance:.0%} ({s.accepted}/{s.drafted} drafted)"
    per_pass = f"{s.tokens_per_pass:.2f} {'tok' if compact else 'tokens'}/pass"
    return FigureParts(f"{s.decode_tokens_per_s:.1f} tok/s", f"{s.tokens} tokens", f"TTFT {s.ttft_s:.2f} s", acceptance,
                       per_pass)


def histogram_text(histogram: dict[int, int]) -> str:
    """'0:183 1:1 16:4': target passes per draft length, shortest first."""
    return " ".join(f"{k}:{v}" for k, v in sorted(histogram.items())) or "-"


def stats_line(s: Summary) -> str:
    """The one line `edgespec run --stats` prints on stderr."""
    return ", ".join([*figure_parts(s), f"K histogram {histogram_text(s.k_histogram)}", f"stop: {s.stop_reason}"])
