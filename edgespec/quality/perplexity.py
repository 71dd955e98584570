"""A weight layout's quality judged against text, not against another 4-bit file.

No higher-precision file (Q8_0 or F16) of the built-in target can be had from the registries this
project reaches, so the reference is the text itself: perplexity on held-out text (code and prose
in neither the development set nor the calibration text: data/quality_heldout.txt), measured
position by position beside the published file's. KL divergence and top-1 agreement with the
published file are reported too: they say how far a layout moved from it, not in which direction.

The rule. A candidate qualifies when, with 95% confidence, its perplexity on the held-out text is
at most TOLERANCE above the published file's: the upper end of the interval of the perplexity ratio
(candidate / published) is at most 1 + TOLERANCE. A candidate that qualifies may still be measurably
worse than the published file (its whole interval above 1), by less than TOLERANCE. The interval
is a paired bootstrap over blocks of BLOCK consecutive positions (neighbouring positions' losses
are correlated, so resampling single positions would understate the noise), so the measurement's
own noise decides: a text too short to tell fails the rule rather than passing it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib.resources import files

import numpy as np

from edgespec.decoding.backend import Backend
from edgespec.quality.fidelity import compare, read_log_probs

HELDOUT_TEXT = files("edgespec") / "data" / "quality_heldout.txt"
# the table edgespec ships: per published file (by sha256), each candidate layout's Quality
# (benchmarks/layout_quality.py writes it, with the command, commit and machine that made it)
SHIPPED = files("edgespec") / "data" / "layout_quality.json"
DOCUMENT_BREAK = "\f"  # documents of the held-out text; each is read from an empty cache
TOLERANCE = 0.01  # perplexity may be at most 1% above the published file's, at the interval's upper end
BLOCK = 64  # positions per bootstrap block
RESAMPLES = 2000
RULE = (
    f"within {TOLERANCE:.0%} of the published file's perplexity: the upper end of the 95% interval of "
    f"the perplexity ratio on held-out text is at most {1 + TOLERANCE:g}"
)


@dataclass(frozen=True)
class Quality:
    """A layout against the published file on the held-out text."""

    positions: int  # positions scored (each with a next token)
    perplexity: float
    reference_perplexity: float  # the published file's, on the same positions
    ratio: float  # perplexity / reference_perplexity
    ratio_low: float  # the ratio's 95% interval (paired block bootstrap)
    ratio_high: float
    agreement: float  # top-1 agreement with the published file
    mean_kl: float  # KL(published || layout), nats per position
    p99_kl: float

    @property
    def qualifies(self) -> bool:
        return self.ratio_high <= 1 + TOLERANCE

    def text(self) -> str:
        """e.g. "perplexity x1.004 (0.998-1.010), KL 0.012, top-1 97.1%" """
        return (
            f"perplexity x{self.ratio:.3f} ({self.ratio_low:.3f}-{self.ratio_high:.3f}), "
            f"KL {self.mean_kl:.3f}, top-1 {self.agreement:.1%}"
        )

    def to_dict(self) -> dict:
        return asdict(self) | {"qualifies": self.qualifies}

    @classmethod
    def from_dict(cls, d: dict) -> Quality:
        """The inverse of `to_dict`; ValueError when `d` is not one."""
        try:
            return cls(**{name: type_(d[name]) for name, type_ in _FIELDS.items()})
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a quality record: {e}") from None


_FIELDS = {
    "positions": int,
    "perplexity": float,
    "reference_perplexity": float,
    "ratio": float,
    "ratio_low": float,
    "ratio_high": float,
    "agreement": float,
    "mean_kl": float,
    "p99_kl": float,
}


def heldout_documents(backend: Backend) -> list[list[int]]:
    text = HELDOUT_TEXT.read_text(encoding="utf-8")
    return [backend.tokenize(doc.strip("\n"), special=False) for doc in text.split(DOCUMENT_BREAK)]


class Reference:
    """The published file's reading of the held-out documents, read once and compared with every
    layout (a reading is most of a comparison's time: 4k positions of a 1.5B model with logits at
    each, and their log-probabilities held here, 2.5 GB for a 150k vocabulary)."""

    def __init__(self, published: Backend, documents: Sequence[Sequence[int]]):
        self.documents = [list(tokens[: published.n_ctx]) for tokens in documents]
        self.readings = [c for tokens in self.documents for c in read_log_probs(published, tokens)]


def measure_quality(reference: Reference, layout: Backend) -> Quality:
    """`layout` reads every document as the reference did; the ratio's interval is the paired block
    bootstrap. `layout`'s context must hold the longest document the reference read."""
    readings = (c for tokens in reference.documents for c in read_log_probs(layout, tokens))
    paired = compare(reference.readings, readings)
    scored = ~np.isnan(paired.nll_original)
    return judge(paired.nll_original[scored], paired.nll_derived[scored], paired.fidelity())


def judge(nll_reference: np.ndarray, nll: np.ndarray, fidelity) -> Quality:
    """The Quality of per-position losses `nll` against `nll_reference` (the same positions)."""
    diff = nll - nll_reference
    n_blocks = max(1, len(diff) // BLOCK)
    blocks = np.array_split(diff, n_blocks)
    sums = np.array([b.sum() for b in blocks])
    counts = np.array([len(b) for b in blocks])
    picks = np.random.default_rng(0).integers(0, n_blocks, size=(RESAMPLES, n_blocks))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Quality(
        positions=len(diff),
        perplexity=float(np.exp(nll.mean())),
        reference_perplexity=float(np.exp(nll_reference.mean())),
        ratio=float(np.exp(diff.mean())),
        ratio_low=float(np.exp(low)),
        ratio_high=float(np.exp(high)),
        agreement=fidelity.agreement,
        mean_kl=fidelity.mean_kl,
        p99_kl=fidelity.p99_kl,
    )


def shipped_quality(source_sha256: str) -> dict[str, Quality]:
    """Layout name -> Quality for the published file with this sha256, from the shipped table ({}
    for a file it does not know)."""
    try:
        entry = json.loads(SHIPPED.read_text())["files"][source_sha256]["layouts"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    table = {}
    for name, record in entry.items():
        try:
            table[name] = Quality.from_dict(record)
        except ValueError:
            continue
    return table
