"""The cost curve steady decisions price passes from: the quiet curve as the last calibration left
it, changed by nothing but another calibration.

Greedy decoding repeats itself only for the same pass shapes: llama.cpp's CPU kernels give a
token's logits up to ~1 apart between a pass alone and a row of a longer pass, so another draft
length can flip a near-tie (docs/run.md, "The same request twice"). The live curve moves with
every pass's seconds, and the quiet curve with every reply's (`quiet.py`), so a controller
reading either can choose other lengths for the same request in the next call. This curve is saved
beside them (`CostModel.to_dict`) and read back as it was saved, so every call in one home prices
the same lengths the same way until the home is calibrated again (`steady.py` prices from it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from edgespec.decoding.costs.interpolation import piecewise

DIGITS = 7  # seconds are kept to this many decimals, in memory as in the file: a restored curve prices as the saved one


def _positive(value, what: str) -> float:
    """A positive finite number of seconds, as read from a file; ValueError for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"not a saved steady curve: {what} is not a positive time")
    return float(value)


@dataclass(frozen=True)
class SteadyCurve:
    """Seconds per target pass by tokens verified (`verify`), per draft-model step and per token the
    draft model reads (None: not measured), and whether the calibration was `provisional` (cut
    short, or sizes that contradict their neighbours: the controller then explores)."""

    verify: Mapping[int, float] = field(default_factory=dict)
    draft_step: float | None = None
    read_per_token: float | None = None
    provisional: bool = False

    @classmethod
    def of(
        cls, verify: Mapping[int, float], draft_step: float | None, read_per_token: float | None, provisional: bool
    ) -> SteadyCurve:
        """The curve of these figures, rounded as saved."""
        draft, read = (None if s is None else round(s, DIGITS) for s in (draft_step, read_per_token))
        return cls({n: round(s, DIGITS) for n, s in verify.items()}, draft, read, provisional)

    def pass_s(self, n: int) -> float:
        """Seconds for a target pass over n tokens: the figure timed, else interpolated between the
        timed sizes and extrapolated beyond them as every curve here is (`interpolation.py`)."""
        return piecewise(self.verify, n)

    def to_dict(self) -> dict:
        return {
            "verify": {str(n): s for n, s in sorted(self.verify.items())},
            "draft_step": self.draft_step,
            "read_per_token": self.read_per_token,
            "provisional": self.provisional,
        }

    @classmethod
    def from_dict(cls, d) -> SteadyCurve:
        """A curve saved by `to_dict`; ValueError for anything else (a damaged or edited file)."""
        try:
            verify = {int(n): s for n, s in d["verify"].items()}
            draft, read, provisional = d["draft_step"], d["read_per_token"], d["provisional"]
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"not a saved steady curve: {e}") from e
        if not isinstance(provisional, bool) or len(verify) < 2 or min(verify) < 1:
            raise ValueError("not a saved steady curve: its sizes or its mark")
        verify = {n: _positive(s, f"size {n}") for n, s in verify.items()}
        draft, read = (None if s is None else _positive(s, "a draft figure") for s in (draft, read))
        return cls.of(verify, draft, read, provisional)
