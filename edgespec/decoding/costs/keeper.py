"""The cost curve of one engine's pair on this machine, through its life: restored from the saved
calibration or measured, refined by every reply's live passes, judged, and measured again while it
is provisional (`Engine.cost_model`, `Engine.keep_costs`); saved by `saved.py`.

When it is measured:
- at the first cost-aware reply on a machine and pair (no saved curve, or a damaged one), within
  CALIBRATION_BUDGET_S;
- again when the curve is provisional: its calibration was cut short by the budget, or sizes
  contradict their neighbours (`plausible.py`), or live passes contradicted it
  (`CostModel.contradicted`). Only at a quiet moment: when `serve` loads, before its first
  request (`quiet`); else before a reply, at most once a DAY_S (the user waits for it), within
  the same budget. Meanwhile the controller explores the passes the curve advises against
  (`exploration.Exploration`), and the live passes correct the sizes they run;
- for `models tune`, each candidate with no time limit (`measure`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from edgespec.decoding.costs.measuring import LONGEST_CALIBRATED, LONGEST_DENSE_DRAFT
from edgespec.decoding.costs.model import Calibration, CostModel
from edgespec.decoding.costs.saved import CALIBRATION_FORMAT, read_calibration, save_calibration

# A calibration stops after this long and goes on with what it timed: a machine that needs longer
# is busy, so the figures would be inflated anyway. It is provisional, measured again at a quiet
# moment, and live passes correct what they run meanwhile.
CALIBRATION_BUDGET_S = 30.0
SAY_AFTER_S = 1.0  # a calibration that lasts this long is said on the front end (see `_calibrate`)
DAY_S = 86_400.0  # a provisional curve is measured again before a reply at most this often
wall_clock = time.time  # seconds since the epoch, saved with a measurement: its day outlives the process
QUIET_MOMENT = "at the next quiet moment (when serve starts, or a day after the last measurement)"


class CalibrationStopped(Exception):
    """The front end stopped a calibration (`cost_model`'s `stop`): none of it is kept."""


class CurveKeeper:
    """`costs` for the models `target` and `draft` of pair `pair`, saved under `key()`; `say` tells
    the user (the engine's `notice`)."""

    def __init__(self, costs: CostModel, key: Callable[[], str], target, draft, pair: str, say: Callable[[str], None]):
        self.costs, self._key, self._target, self._draft = costs, key, target, draft
        self._pair, self._say = pair, say
        self.loaded = False  # measured or restored: only then is what live passes teach it saved
        self.measure_again = False  # live passes contradicted the curve (`costs.provisional` too)
        self.measured_at: float | None = None  # when it was last measured (`wall_clock`), if known

    def cost_model(self, stop: threading.Event | None = None, quiet: bool = False) -> CostModel:
        """The curve: the saved one, or one measured now (raising CalibrationStopped within a pass
        of `stop` being set). `quiet`: the caller is at a quiet moment (a server before its first
        request), where a provisional curve is measured again whenever it was last measured."""
        if not self.loaded:
            self._load_or_calibrate(stop, quiet)
        return self.costs

    def _load_or_calibrate(self, stop: threading.Event | None, quiet: bool) -> None:
        saved = read_calibration(self._key())
        if saved:
            try:
                self.costs.restore(saved)
            except ValueError:
                saved = None
        if not saved or not self.costs.calibrated:
            self._calibrate(again=bool(saved), stop=stop)
            return
        self.loaded = True
        self.measure_again = saved.get("measure_again") is True
        self.costs.provisional = self.costs.provisional or self.measure_again
        at = saved.get("measured_at")
        self.measured_at = float(at) if isinstance(at, int | float) and math.isfinite(at) else None
        if self.costs.provisional and (quiet or self._day_passed()):
            self._calibrate(again=True, stop=stop)

    def _day_passed(self) -> bool:
        """DAY_S or more since the last measurement, or no sign of when it was (a clock set back too)."""
        return self.measured_at is None or not 0 <= wall_clock() - self.measured_at < DAY_S

    def before_reply(self) -> None:
        """Before a cost-aware reply: a provisional curve is measured again, once a day at most."""
        if self.loaded and self.costs.provisional and self._day_passed():
            self._calibrate(again=True)

    def _calibrate(self, again: bool, stop: threading.Event | None = None) -> None:
        """Measure the curve for the front ends, within CALIBRATION_BUDGET_S, and save it. One that
        lasts SAY_AFTER_S or more is said while it runs and when it ends, with what it found: the
        user is waiting for it (a shorter one, on a GPU or tiny models, is not worth a line).
        `again`: a saved curve is measured again."""
        said = False

        def progress(spent: float) -> None:
            nonlocal said
            if stop is not None and stop.is_set():
                raise CalibrationStopped
            if not said and spent >= SAY_AFTER_S:
                said = True
                how_often = "again" if again else "(once per machine and pair)"
                self._say(
                    f"measuring this machine's speed with {self._pair!r} {how_often}, "
                    f"{CALIBRATION_BUDGET_S:g} s at most…"
                )

        run = self.measure(CALIBRATION_BUDGET_S, progress)
        if said:
            self._say(self._measured(run))

    def _measured(self, run: Calibration) -> str:
        """One line on a calibration that was said to be running: what it found and, if it is
        provisional, why and when it is measured again."""
        curve = self.costs.quiet_curve()
        ends = (f"{n} token{'s' * (n > 1)} {curve[n] * 1000:.0f} ms" for n in (min(curve), max(curve)))
        found = "a pass over " + ", over ".join(ends)
        if not run.cut:
            uneven = f"; sizes disagree with each other (a busy moment): measured again {QUIET_MOMENT}"
            return f"speed measured in {run.seconds:.1f} s: {found}" + uneven * run.provisional
        estimated = f", {run.wanted - run.sizes} estimated from them" if run.sizes < run.wanted else ""
        return (
            f"speed measurement stopped at its {CALIBRATION_BUDGET_S:g} s limit (a busy or slow machine) with "
            f"{run.sizes} of {run.wanted} sizes timed{estimated}: {found}; measured again {QUIET_MOMENT}"
        )

    def measure(
        self,
        budget_s: float | None = None,
        progress: Callable[[float], None] | None = None,
        longest: int = LONGEST_CALIBRATED,
    ) -> Calibration:
        """Time the target's verification at every length auto may draft (and longer passes up to
        `longest`), and a draft step; add them to the curve and save it."""
        run = self.costs.calibrate(
            self._target,
            self._draft,
            max_n=LONGEST_DENSE_DRAFT + 1,
            budget_s=budget_s,
            progress=progress,
            longest=longest,
        )
        self.loaded, self.measure_again, self.measured_at = self.costs.calibrated, False, wall_clock()
        self._save()
        return run

    def keep(self) -> None:
        """Fold the live passes since the last call, whatever their policy, into the saved curve
        once there is one, after each reply and at close. Cheap (one small JSON file rewritten)
        and only when they taught it something. A curve they contradict is said in one line and
        becomes provisional (the file says so): measured again before the next reply, in this
        process or the next, once DAY_S has passed since it was measured."""
        if not self.loaded or not self.costs.end_session():
            return
        overstated = self.costs.contradicted()
        if overstated is not None and not self.measure_again:
            when = "before the next reply" if self._day_passed() else QUIET_MOMENT
            self._say(
                f"live passes ran up to {overstated:.1f}x faster than the saved speed measurement (taken "
                f"while the machine was busy); measuring it again {when}"
            )
        self.measure_again = self.measure_again or overstated is not None
        self._save()

    def _save(self) -> None:
        entry = {
            **self.costs.to_dict(),
            "format": CALIBRATION_FORMAT,
            "measure_again": self.measure_again,
            "measured_at": self.measured_at,
        }
        save_calibration(self._key(), entry)
