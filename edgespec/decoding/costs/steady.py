"""A cost curve that prices every pass of a call from the steady curve (`steady_curve.py`), never
from the call's own seconds, while those seconds still reach the engine's live curve.

The decoder feeds every pass's timings to its policy's `costs`; here they go on to the live
`CostModel` the curve was taken from (its quiet curve is saved and judged from them: a measurement
that live passes contradict is still measured again), and nothing here moves. Every method of
`CostModel` that learns or changes a curve is overridden below: each `observe_` forwards, and the
rest refuse, so none can move this object's own copy unseen. The n-gram lookup is priced at
nothing: its live figure is a moving average of this call's seconds.
"""

from __future__ import annotations

from edgespec.decoding.costs.model import Calibration, CostModel
from edgespec.decoding.drafters import Draft
from edgespec.decoding.events import Step


class SteadyCosts(CostModel):
    """`live`'s steady curve (`CostModel.steady_curve`, taken now if it has none), fixed for this
    object's life; what it observes goes to `live`."""

    steady = True

    def __init__(self, live: CostModel):
        super().__init__()
        curve = live.fixed_curve()
        self._live = live
        self._verify = dict(curve.verify)
        self._taken_at = dict.fromkeys(curve.verify, 1.0)
        self._draft_step = None if curve.draft_step is None else (curve.draft_step, 1.0)
        self._read_per_token = None if curve.read_per_token is None else (curve.read_per_token, 1.0)
        self.provisional = curve.provisional
        self.steady_curve = curve  # what `fixed_curve` gives: the curve priced from, not one of its own

    def observe_round(self, step: Step, draft: Draft, whole_rows: bool = True, own_threads: bool = True) -> None:
        self._live.observe_round(step, draft, whole_rows, own_threads)

    def observe_verify(self, n: int, seconds: float, own_threads: bool = True) -> None:
        self._live.observe_verify(n, seconds, own_threads)

    def observe_draft(self, tokens: int, seconds: float, own_threads: bool = True) -> None:
        self._live.observe_draft(tokens, seconds, own_threads)

    def observe_read(self, tokens: int, seconds: float, own_threads: bool = True) -> None:
        self._live.observe_read(tokens, seconds, own_threads)

    def observe_lookup(self, seconds: float) -> None:
        self._live.observe_lookup(seconds)

    # What would replace or refold this curve: the live curve's to do (`keeper.py`), never a copy's.

    def end_session(self) -> bool:
        raise _fixed("end_session")

    def restore(self, d: dict) -> None:
        raise _fixed("restore")

    def calibrate(self, *args: object, **kwargs: object) -> Calibration:
        raise _fixed("calibrate")


def _fixed(what: str) -> TypeError:
    return TypeError(
        f"{what} on a steady curve: it changes only with a calibration of the live curve it was taken from"
    )
