"""What a round costs: seconds per target pass as a function of the tokens it verifies, and per
draft-model step; and the K that maximises expected tokens per second under such costs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from edgespec.decoding.costs.interpolation import piecewise
from edgespec.decoding.costs.measuring import LONGEST_CALIBRATED, LONGEST_DENSE_DRAFT, time_passes
from edgespec.decoding.costs.plausible import implausible
from edgespec.decoding.costs.quiet import QuietCost
from edgespec.decoding.costs.steady_curve import SteadyCurve
from edgespec.decoding.drafters import Draft, DrafterKind
from edgespec.decoding.events import Step

# A catch-up of this many tokens or fewer (the rounds since the draft model last drafted) is part
# of a draft step; a longer one is a read, timed and priced on its own.
ROUTINE_CATCH_UP = 16


class CostModel:
    """Seconds per target pass verifying n tokens, and per draft-model step, at two time scales.

    Live (`verify`, `draft_step`): what the next pass will cost, for the controller's choice of
    it. Each timing moves its size's estimate by SMOOTH (an exponential moving average), so within
    a few passes it follows whatever this reply meets: a context grown long, a CPU shared with
    another job, where the draft step and the target's pass need not slow alike. Every timing also
    moves the level (`_level`: live passes over their quiet cost, the same average), and an
    estimate counts as taken at the level of its last timing: a size not timed since, and the draft
    step, are scaled by how far the level has moved. A reply that has run on one thread under load
    for a hundred one-token passes then prices a 4-token pass or a draft step as dear as the load
    makes it, not at the quiet figure that made drafting look cheap.

    Quiet (`QuietCost` per size and for the draft step): what a pass costs when nothing else runs,
    which is what the next run will most likely find. Live passes refine it with low quantiles
    (see quiet.py); it is what `to_dict` saves and `restore` takes, and the live estimates
    start from it. One estimator cannot serve both: a low quantile is slow to rise by design and
    would price every pass of a busy reply as if the machine were quiet; a moving average saved
    between runs would let one busy spell set the costs of every later run.

    Between measured sizes the live cost is interpolated linearly and beyond the largest
    extrapolated with the last slope. The curve is flat on a GPU and near-linear on a small CPU:
    nothing here assumes either.
    """

    SMOOTH = 0.15
    steady = False  # prices from a curve fixed for the call (`steady.SteadyCosts`); here, live
    # The quiet curve is contradicted when live passes put it this much lower, since it was last
    # measured or restored, at SEVERAL sizes or more: the measurement ran on a busy machine. Or FAR
    # times lower at any one size: a short reply may try only one, and no noise makes a pass twice
    # as fast as the machine can run it.
    MARGIN = 0.15
    SEVERAL = 2
    FAR = 2.0

    def __init__(self) -> None:
        self._verify: dict[int, float] = {}  # per size: the live estimate, at the level `_taken_at` says
        self._taken_at: dict[int, float] = {}
        self._curve: dict[int, float] = {}  # verify(n) as interpolated, until the next observation
        self._draft_step: tuple[float, float] | None = None  # seconds per draft-model token, and its level
        self._read_per_token: tuple[float, float] | None = None  # per token the draft model reads in a batch
        self._level = 1.0  # live passes over their quiet cost (1: as quiet, or no quiet curve)
        self.ngram_lookup = 0.0  # seconds per n-gram lookup
        self._quiet_verify: dict[int, QuietCost] = {}
        self._quiet_draft = QuietCost()
        self._quiet_read = QuietCost()
        self._start: dict[int, float] = {}  # the quiet curve when last measured or restored
        self._reference: dict[int, float] = {}  # what the level is read against (`observe_verify`)
        # The quiet curve may be wrong: its calibration was cut short by its budget, or has sizes
        # their neighbours contradict (`plausible.py`), or live passes contradicted it
        # (`contradicted`), or it was saved so marked. The controller then explores the passes
        # the curve advises against (`exploration.Exploration`), so that its errors show in live
        # passes; a calibration that is not provisional ends it.
        self.provisional = False
        # the quiet curve as the last calibration left it, saved and restored as it is: what steady
        # decisions price from (`steady_curve.py`); None before any calibration or restore
        self.steady_curve: SteadyCurve | None = None

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.SMOOTH * (new - old)

    # The `own_threads` of the observe_ methods: whether the timing was taken at the thread count
    # the curve is for (the models' own; see `observe_round`). Only such timings reach the quiet
    # curve; every timing moves the live estimates.

    def observe_verify(self, n: int, seconds: float, own_threads: bool = True) -> None:
        old = self._verify.get(n)
        self._verify[n] = self._ema(None if old is None else self._now((old, self._taken_at[n])), seconds)
        if self._start:
            self._level = self._ema(self._level, seconds / self._quiet_reference(n, seconds))
        self._taken_at[n] = self._level
        self._curve.clear()
        if own_threads:
            self._quiet_verify.setdefault(n, QuietCost()).add(seconds)

    def _quiet_reference(self, n: int, seconds: float) -> float:
        """What a pass over n tokens costs on a quiet machine, to read the level against: the quiet
        curve as last measured or restored, unless a live pass at n ran MARGIN faster than it. No
        noise makes a pass faster than the machine can run it, so then the measured figure was
        inflated, not the machine faster, and the live pass is the better reference: read against
        the inflated figure, every such pass would drag the level down and with it the estimates
        of every other size, and the estimate at n, taken at that low level, would be scaled back up
        as the next passes restore the level, never converging on what the passes show."""
        if n in self._reference and seconds < (1 - self.MARGIN) * self._reference[n]:
            self._reference[n] = seconds
        return piecewise(self._reference, n)

    def _now(self, estimate: tuple[float, float] | None) -> float | None:
        """An estimate taken at some level, moved with the level since."""
        return None if estimate is None else estimate[0] * self._level / estimate[1]

    @property
    def draft_step(self) -> float | None:
        """Seconds per draft-model token now."""
        return self._now(self._draft_step)

    @property
    def read_per_token(self) -> float | None:
        """Seconds per token the draft model reads in one batch now."""
        return self._now(self._read_per_token)

    def observe_draft(self, tokens: int, seconds: float, own_threads: bool = True) -> None:
        if tokens:
            self._draft_step = self._ema(self.draft_step, seconds / tokens), self._level
            if own_threads:
                self._quiet_draft.add(seconds / tokens)

    def observe_read(self, tokens: int, seconds: float, own_threads: bool = True) -> None:
        if tokens:
            self._read_per_token = self._ema(self.read_per_token, seconds / tokens), self._level
            if own_threads:
                self._quiet_read.add(seconds / tokens)

    def read(self, n: int) -> float:
        """Seconds for the draft model to read n tokens of text it has not seen (its catch-up).
        Unmeasured, a token read in a batch is taken to cost a third of a draft step (a batch costs
        less per token than stepping: somewhat less on a small CPU, far less on a GPU)."""
        per = self.read_per_token
        if per is None:
            per = (self.draft_step if self.draft_step is not None else self.verify(1)) / 3
        return n * per

    def observe_lookup(self, seconds: float) -> None:
        self.ngram_lookup = self._ema(self.ngram_lookup, seconds)

    def observe_round(self, step: Step, draft: Draft, whole_rows: bool = True, own_threads: bool = True) -> None:
        """Learn from one round's timings (the decoder calls it after every pass, whatever the
        policy): the target's pass over the tokens it verified (if `whole_rows`: every row's logits
        computed, as the curve prices them); then for a draft-model round its draft steps (one per
        token it chose: alternatives and forced tokens came free) and a long catch-up as a read,
        for any other round the time before the pass as an n-gram lookup.

        `own_threads`: the round ran at the models' own thread count, the one the curve is saved
        for. A round on fewer threads (a busy machine, or the thread policy's probe) prices this
        reply but is no evidence of the quiet curve: on 2 cores a pass on 1 thread costs about
        twice as much, and replies run wholly on 1 thread under load would otherwise set the quiet
        cost of every size they used, for good at a size that then looks too dear to try again."""
        if whole_rows:
            self.observe_verify(step.drafted + 1, step.verify_s, own_threads)
        if step.drafter != DrafterKind.MODEL:
            self.observe_lookup(step.draft_s)
            return
        if not draft.catch_up_s:
            self.observe_draft(draft.steps, step.draft_s, own_threads)
            return
        if draft.catch_up_tokens > ROUTINE_CATCH_UP:
            self.observe_read(draft.catch_up_tokens, draft.catch_up_s, own_threads)
        if draft.steps > 1:
            self.observe_draft(draft.steps - 1, step.draft_s - draft.catch_up_s, own_threads)

    def reach(self) -> int:
        """The longest pass the curve has timed (0: none): beyond it the curve is a guess."""
        return max(self._verify, default=0)

    @property
    def calibrated(self) -> bool:
        return len(self._verify) >= 2

    def end_session(self) -> bool:
        """Fold the live timings seen since the last call into the quiet curve (at the end of a
        reply); whether it learnt anything worth saving."""
        learnt = any([q.end_session() for q in (*self._quiet_verify.values(), self._quiet_draft, self._quiet_read)])
        if learnt and not self.provisional:
            self.provisional = bool(implausible(self.quiet_curve())) or self.contradicted() is not None
        return learnt

    def contradicted(self) -> float | None:
        """How many times too dear live passes have proved the quiet curve (the largest ratio of a
        size's figure when last measured or restored to its figure now), when they contradict it:
        MARGIN lower at SEVERAL sizes or more, or FAR lower at one; else None. A size counts once
        live passes gave it a figure (a session of MIN_TIMINGS passes or more, in one reply or
        several). Then the measurement ran while other work did, and the sizes no live pass has
        tried since are likely as inflated: the controller, finding them dear, would never try
        them and learn otherwise. A curve live passes find higher is no contradiction: busy
        moments and long contexts only ever add time, and the quiet curve rises by itself when
        the machine really is slower."""
        ratios = [self._start[n] / s for n, s in self.quiet_curve().items() if n in self._start]
        fell = [ratio for ratio in ratios if ratio > 1 / (1 - self.MARGIN)]
        if len(fell) >= self.SEVERAL or any(ratio > self.FAR for ratio in fell):
            return max(fell)
        return None

    def quiet_curve(self) -> dict[int, float]:
        """Seconds per target pass by tokens verified, when nothing else runs (what is saved)."""
        return {n: s for n, q in self._quiet_verify.items() if (s := q.seconds) is not None}

    def to_dict(self) -> dict:
        """The quiet curve, as `restore` takes it: per size, and for the draft step and a token the
        draft model reads, the recent sessions' figures in seconds, oldest first; and the steady curve."""
        verify = {str(n): self._quiet_verify[n].to_list() for n in sorted(self.quiet_curve())}
        return {
            "verify": verify,
            "draft_step": self._quiet_draft.to_list() or None,
            "read_per_token": self._quiet_read.to_list() or None,
            "provisional": self.provisional,
            "steady": (self.steady_curve or self._fix()).to_dict(),
        }

    def restore(self, d: dict) -> None:
        """Take a quiet curve saved by `to_dict` (earlier runs on the same machine and models), and
        start the live estimates from it. Raises ValueError, changing nothing, if `d` is not one.
        It is provisional if it was saved so, or (a curve saved before the mark, or edited) if its
        sizes contradict each other. Its steady curve is the one saved with it, or (a curve saved
        before there was one) the quiet curve as restored."""
        try:
            verify = {int(n): QuietCost.from_list(v) for n, v in d["verify"].items()}
            draft, read = (
                QuietCost() if d.get(key) is None else QuietCost.from_list(d[key])
                for key in ("draft_step", "read_per_token")
            )
            steady = SteadyCurve.from_dict(d["steady"]) if "steady" in d else None
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a saved cost curve: {e}") from e
        self._quiet_verify, self._quiet_draft, self._quiet_read = verify, draft, read
        self._start_from_quiet()
        self.provisional = d.get("provisional") is True or bool(implausible(self.quiet_curve()))
        self.steady_curve = steady if steady is not None else self._fix()

    def _start_from_quiet(self) -> None:
        """Live estimates and the contradiction check start from the quiet curve as it is now."""
        self._start = self.quiet_curve()
        self._reference = dict(self._start)
        self._verify = dict(self._start)
        self._level = 1.0
        self._taken_at = dict.fromkeys(self._start, 1.0)
        self._curve.clear()
        self._draft_step, self._read_per_token = (
            None if q.seconds is None else (q.seconds, 1.0) for q in (self._quiet_draft, self._quiet_read)
        )

    def _fix(self) -> SteadyCurve:
        """The quiet curve as it is now, and whether it is provisional, as a steady curve."""
        draft, read = self._quiet_draft.seconds, self._quiet_read.seconds
        return SteadyCurve.of(self.quiet_curve(), draft, read, self.provisional)

    def fixed_curve(self) -> SteadyCurve:
        """The steady curve; taken from the quiet curve now if no calibration or restore left one."""
        if self.steady_curve is None:
            self.steady_curve = self._fix()
        return self.steady_curve

    def verify(self, n: int) -> float:
        """Seconds for a target pass over n tokens (the controller asks this dozens of times a round)."""
        t = self._curve.get(n)
        if t is None:
            t = self._curve[n] = self._interpolate(n)
        return t

    def shape(self, n: int) -> float:
        """verify(n) / verify(1): what a pass over n tokens costs in one-token passes, so that
        passes of any length compare (the thread policy's timings). Read off the quiet curve where
        it has both sizes: the shape belongs to the model and its layout, and the live curve also
        moves with the load and the thread count being measured; else off the live one."""
        if n == 1:
            return 1.0
        quiet = self.quiet_curve()
        if 1 in quiet and n in quiet:
            return quiet[n] / quiet[1]
        return self.verify(n) / self.verify(1)

    def verify_at_least(self, n: int, longest: int) -> float:
        """Seconds for the cheapest pass over n tokens or more, up to `longest` (the longest the
        caller verifies): where the curve dips, n tokens cost no more than the cheaper longer pass
        they can grow into."""
        return min(self.verify(m) for m in range(n, max(n, longest) + 1))

    def _interpolate(self, n: int) -> float:
        return piecewise({m: t * self._level / self._taken_at[m] for m, t in self._verify.items()}, n)  # as `_now`

    def calibrate(
        self,
        target,
        draft=None,
        max_n: int = LONGEST_DENSE_DRAFT + 1,
        rounds: int = 3,
        budget_s: float | None = None,
        progress: Callable[[float], None] | None = None,
        longest: int = LONGEST_CALIBRATED,
    ) -> Calibration:
        """Time the target's passes (every size from 1 to `max_n`, then sparse longer ones up to
        `longest` while the cost per token falls), a draft step and a read of the draft model, on
        dummy tokens, then roll the caches back (`measuring.py`: which passes, in which order).

        Each size's `rounds` interleaved timings are one session of its quiet cost (their low
        quantile: the fastest of three), added to the sessions restored before, if any: another
        process waking up only ever adds time, and one busy moment in a measurement would
        otherwise rule out the sizes it hit. The live estimates then start from the quiet curve.

        `budget_s` bounds the time: on a machine too slow or too busy to finish, it stops once
        the budget is spent and keeps what it timed (at least two sizes, the least a curve needs).
        Such a calibration, or one whose curve has sizes its neighbours contradict
        (`plausible.py`), is `provisional`. `progress` is called after every timing with the seconds spent so far (a
        front end says a long one is under way); an exception it raises stops the calibration,
        the caches rolled back and nothing kept."""
        timer, wanted = time_passes(target, draft, max_n, rounds, longest, budget_s, progress)
        for (what, n), seconds in timer.timings.items():
            quiet = {"draft": self._quiet_draft, "read": self._quiet_read}.get(what)
            (quiet or self._quiet_verify.setdefault(n, QuietCost())).add_session(seconds)
        self._start_from_quiet()
        self.provisional = timer.cut or bool(implausible(self.quiet_curve()))
        self.steady_curve = self._fix()
        return Calibration(len(timer.verified()), wanted, timer.cut, timer.spent, self.provisional)


@dataclass(frozen=True)
class Calibration:
    """What one `CostModel.calibrate` did: `sizes` of the `wanted` verification sizes timed, in
    `seconds`; `cut`: its budget ran out before its last round ended; `provisional`: cut, or
    sizes that their neighbours contradict (see `CostModel.calibrate`)."""

    sizes: int
    wanted: int
    cut: bool
    seconds: float
    provisional: bool = False


def best_k(acceptance: Sequence[float], cost: Callable[[int], float], base: float = 1.0) -> tuple[int, float]:
    """The K in 0..len(acceptance) maximising E(K)/cost(K) for a chain with per-position acceptance
    `acceptance` (each given the ones before survived); returns (K, tokens per second). `base`: as
    `best_tree`'s."""
    survive, values = 1.0, []
    for a in acceptance:
        survive *= a
        values.append(survive)
    return best_tree(values, cost, base)


def best_tree(values: Sequence[float], cost: Callable[[int], float], base: float = 1.0) -> tuple[int, float]:
    """How many of a draft's candidate nodes to verify: `values` are the nodes' chances of being
    accepted (the path down to them survives), best first; the m best, verified in one pass, emit
    1 + sum(values[:m]) tokens on average (each accepted node, then the target's own). Returns the m
    in 0..len(values) maximising that over cost(m), and its tokens per second.

    Taking the best m nodes is taking a tree: a node is never likelier than its parent, so the
    parent of every node taken was taken before it (EAGLE-2's reranking). A chain's values are
    the running products of its acceptances, already in order.

    `base`: the tokens the pass emits whatever is drafted (1, the target's own; more when a
    constraint's forced text comes first in the same pass, and `cost` then prices the pass with
    it), so a draft is weighed at its extra cost in that pass, against that pass's rate."""
    best, rate = 0, base / cost(0)
    expected = base
    for m, v in enumerate(values, start=1):
        expected += v
        r = expected / cost(m)
        if r > rate:
            best, rate = m, r
    return best, rate
