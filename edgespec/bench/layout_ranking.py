"""Which weight layout a typical call runs fastest with, among those that keep the file's quality.

Speed belongs to the machine, and the objective is the whole call: a candidate's prompt reading
(tokens per second over one batch) and its verify curve (the steady curve its calibration left)
predict a typical call (`decoding/costs/call_prediction.py`: the development set's `auto` rounds
priced on the curve). Where the bench ran (`models tune --prompts N`), its gain of `auto` against
the original's `ar` ranks the layouts instead.

Quality belongs to the file: for a published file edgespec ships a table (data/layout_quality.json,
made by benchmarks/layout_quality.py: perplexity on held-out text against the published file, and
the rule of `quality/perplexity.py`), and only the layouts it qualifies are candidates; for a file
it does not know, top-1 agreement with the original on the calibration text is the gate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from edgespec.decoding.costs.call_prediction import typical_call_s
from edgespec.decoding.costs.steady_curve import SteadyCurve
from edgespec.models import layouts
from edgespec.quality.fidelity import Fidelity
from edgespec.quality.perplexity import Quality, shipped_quality

ORIGINAL = "original"
DRAFT_ONLY = "draft-only"  # the original target with the tuned draft
MARGIN = 1.03  # a layout must predict a call this much faster than the original to be chosen


@dataclass
class Measured:
    """One layout's figures (the original is measured the same way, as the reference)."""

    layout: str
    what: str
    path: Path
    size: int
    kept: float  # share of the original's weight bytes kept unchanged
    repacked: str  # what llama.cpp repacked of it at load (`layouts.repacked_text`)
    curve: SteadyCurve  # the target's passes, as its last calibration left them (every n auto may verify)
    read_tok_s: float  # prompt reading, tokens per second in one READ_PROBE batch
    fidelity: Fidelity | None  # top-1 / KL against the original on the calibration text (None: not measured)
    draft_ms: float | None  # one draft-model step, of the draft this row's pair uses (None: no draft)
    draft_path: Path | None  # that draft when it is the tuned one, else None
    quality: Quality | None = None  # against the published file on held-out text (shipped or measured)
    gain: float | None = None  # auto vs its own ar, median of per-prompt ratios
    gain_vs_original: float | None = None  # auto vs the original's ar

    @property
    def call_s(self) -> float:
        """The predicted seconds of a typical call (module docstring)."""
        return typical_call_s(self.curve, self.read_tok_s)

    @property
    def verify_ms(self) -> dict[int, float]:
        """Milliseconds per target pass, at each size the curve timed."""
        return {n: s * 1000 for n, s in sorted(self.curve.verify.items())}

    def pass_ms(self, n: int) -> float:
        """Milliseconds per target pass over n tokens, as the curve prices it."""
        return self.curve.pass_s(n) * 1000

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        del d["curve"]
        d["verify_ms"] = self.verify_ms
        d["path"] = str(self.path)
        d["draft_path"] = None if self.draft_path is None else str(self.draft_path)
        d["quality"] = None if self.quality is None else self.quality.to_dict()
        d["call_s"] = self.call_s
        return d


def eligible(m: Measured, min_agreement: float) -> bool:
    """Quality first by the held-out rule where it is known, else by agreement with the original."""
    if m.quality is not None:
        return m.quality.qualifies
    return m.fidelity is not None and m.fidelity.agreement >= min_agreement


def recommend(rows: Sequence[Measured], min_agreement: float, margin: float = MARGIN) -> Measured | None:
    """The eligible layout a typical call is fastest with: by the bench gain against the original's
    ar when the bench ran, else by the predicted call. None when none beats the original by
    `margin` (a gain within noise is not worth a file that is not the published one)."""

    def score(m: Measured) -> float:
        if m.gain_vs_original is not None:
            return m.gain_vs_original
        return rows[0].call_s / m.call_s

    original = next(m for m in rows if m.layout == ORIGINAL)
    candidates = [m for m in rows if m.layout != ORIGINAL and eligible(m, min_agreement)]
    best = max(candidates, key=score, default=None)
    return best if best is not None and score(best) >= margin * score(original) else None


_CANDIDATE_NAMES = {c.name for c in layouts.CANDIDATES}


def qualifying_layouts(source_sha256: str) -> tuple[list[tuple[layouts.Layout, Quality]], int]:
    """The candidates the shipped quality table qualifies for this source file, best quality first,
    and how many it knows of (0: the file is not in the table)."""
    table = shipped_quality(source_sha256)
    ok = [(layouts.candidate(name), q) for name, q in table.items() if q.qualifies and name in _CANDIDATE_NAMES]
    return sorted(ok, key=lambda lq: lq[1].ratio_high), len(table)


def why_chosen(best: Measured, original: Measured) -> str:
    """One line for `edgespec models`: the speed on this machine and the quality of the file."""
    quality = "" if best.quality is None else f"; quality against the published file: {best.quality.text()}"
    return (
        f"a typical call {original.call_s / best.call_s:.2f}x faster on this machine (reads "
        f"{best.read_tok_s / original.read_tok_s:.2f}x, verifies 4 tokens in {best.pass_ms(4):.0f} ms "
        f"against {original.pass_ms(4):.0f}){quality}"
    )


def quality_text(m: Measured) -> str:
    """Against the published file on held-out text where known, else against the original on the
    calibration text (top-1 agreement and KL mean / p99)."""
    if m.quality is not None:
        return m.quality.text() + (" (qualifies)" if m.quality.qualifies else " (fails the rule)")
    if m.fidelity is None:
        return "-"
    f = m.fidelity
    return f"top-1 {f.agreement:.1%}, KL {f.mean_kl:.3f}/{f.p99_kl:.3f}" if f.positions else "the reference"
