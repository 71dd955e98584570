"""The stats line: the figures of a generation, worded once for every front end.

`run --stats`, the chat app's stats bar and the line under each finished reply all show the same
few numbers, named as llama.cpp's tools name them (tokens/s, TTFT, acceptance, tokens per target
pass): `figure_parts` words them, each front end joins and styles them its own way. The figure a
user waits for is the whole reply (first token + decoding); decode speed alone leaves out the
reading of the prompt, often the larger part of a call on a real file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from edgespec.decoding.events import Summary


class FigureParts(NamedTuple):
    speed: str  # decode tokens/s
    tokens: str
    ttft: str  # time to first token (with its reading split out, unless compact)
    acceptance: str
    per_pass: str
    decode: str  # decoding time
    total: str  # the whole reply: time and tokens/s


def figure_parts(s: Summary, compact: bool = False) -> FigureParts:
    """Decode speed, tokens, time to first token, acceptance, tokens per target pass, decoding time
    and the whole reply. `compact` words them for a one-line bar that also holds sparklines (the
    chat app)."""
    if not s.drafted:
        acceptance = "accept –" if compact else "acceptance –"
    elif compact:
        acceptance = f"accept {s.acceptance:.0%}"
    else:
        acceptance = f"acceptance {s.acceptance:.0%} ({s.accepted}/{s.drafted} drafted)"
    per_pass = f"{s.tokens_per_pass:.2f} {'tok' if compact else 'tokens'}/pass"
    speed = f"{s.decode_tokens_per_s:.1f} tok/s"
    if s.served_again:  # no pass ran: no speed, no acceptance to show (`engine/same_reply.py`)
        speed, acceptance, per_pass = "served again", "the same request's reply, from the history", "no target pass"
    ttft, decode = f"TTFT {s.ttft_s:.2f} s", f"decode {s.decode_s:.2f} s"
    if not compact:
        ttft += f" (target read {s.target_read_s:.2f} s)"
        decode += f" (draft read {s.draft_read_s:.2f} s)"
    return FigureParts(
        speed,
        f"{s.tokens} tokens",
        ttft,
        acceptance,
        per_pass,
        decode,
        f"total {s.total_s:.2f} s, {s.total_tokens_per_s:.1f} tok/s",
    )


def replaced_note(s: Summary) -> str | None:
    """'drafts from the replaced reply (180 taken) · sampled exactly': what a regenerated reply drafted
    from the reply it replaces (`DrafterKind.REPLACED`), and what that did to it: nothing, as
    verification keeps a sampled reply's distribution the target's and a greedy one the target's
    own tokens. None for a reply that replaced none."""
    taken = s.accepted_by.get("replaced", 0)
    if not taken and "replaced" not in s.lookups:
        return None
    how = "sampled exactly" if s.sampled else "greedy, the target's own tokens"
    return f"drafts from the replaced reply ({taken} taken) · {how}"


def histogram_text(histogram: dict[int, int]) -> str:
    """'0:183 1:1 16:4': target passes per draft length (or thread count), smallest first."""
    return " ".join(f"{k}:{v}" for k, v in sorted(histogram.items())) or "-"


def load_text(load_s: Mapping[str, float]) -> str:
    """'load 1.93 s (check 0.01 s, target 1.50 s, draft 0.42 s)': what opening the pair took."""
    parts = ", ".join(f"{part} {seconds:.2f} s" for part, seconds in load_s.items())
    return f"load {sum(load_s.values()):.2f} s ({parts})"


def stats_line(s: Summary, load_s: Mapping[str, float] | None = None) -> str:
    """The one line `edgespec run --stats` prints on stderr: in the order the user waited, the load
    (when given), the first token, decoding, the whole reply, then how the drafting went (the accepted
    drafts by source: 'accepted from retry 233, ngram 40'), and the
    CPU threads the passes ran on where edgespec chose them ('threads 2:180 1:12': passes per count)."""
    p = figure_parts(s)
    load = [load_text(load_s)] if load_s else []
    threads = [f"threads {histogram_text(s.threads)}"] if s.threads else []
    by = ", ".join(f"{kind} {n}" for kind, n in sorted(s.accepted_by.items(), key=lambda kv: -kv[1]) if n)
    sources = [f"accepted from {by}"] if by else []
    return ", ".join(
        [
            *load,
            p.ttft,
            p.decode,
            p.total,
            p.speed if s.served_again else f"decode {p.speed}",
            p.tokens,
            p.acceptance,
            *sources,
            p.per_pass,
            f"K histogram {histogram_text(s.k_histogram)}",
            *threads,
            f"stop: {s.stop_reason}",
        ]
    )
