"""The K policies against simulated hardware and drafters: costs and acceptance set by the test.

Nothing sleeps. A simulated round (`Sim.round`) asks the policy for a plan, draws the fate of each
drafted token from Bernoulli(a) with a seeded generator (the draft model also reports a confidence
c ~ Beta(4a, 4(1 - a)) and its token survives with probability c, so confidence predicts acceptance
and the marginal rate is a), charges draft_s = drafted * t_draft and verify_s = t_verify(K + 1) from
the hardware's cost curve, and reports the Step back. The CostModel is calibrated the way the engine
does it, by `CostModel.calibrate` timing fake backends on a virtual clock.

Hardware (seconds per target pass verifying n tokens; seconds per draft-model token):
- CPU: the 2-core llama.cpp numbers, 28/45/71/121/138 ms at n = 1/2/4/8/16, draft 16 ms (~55%);
- GPU: flat, 10 ms for every n up to 17, draft 2 ms;
- BF16: torch bf16-like, 124/128/153 ms at n = 1/4/8, draft 45 ms;
- REPACKED: a repacked CPU layout, n = 4 verified for less than n = 3, draft 14 ms.

"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.drafters import Draft
from edgespec.decoding.events import ControllerState, Step
from edgespec.decoding.policy.controller import AutoK
from edgespec.decoding.policy.plan import Plan, RoundContext
from edgespec.decoding.policy.simple_policies import FixedK
from tests.fakes import MarkovBackend, VirtualClock, simulated_time

# -- simulated hardware -----------------------------------------------------------------------


def curve(points: dict[int, float]) -> Callable[[int], float]:
    """Piecewise linear through `points`, extended with the last segment's slope."""
    ns = sorted(points)

    def seconds(n: int) -> float:
        if n in points:
            return points[n]
        lo = max((m for m in ns if m < n), default=ns[0])
        hi = min((m for m in ns if m > n), default=ns[-1])
        if lo == hi:  # beyond the last point
            lo, hi = ns[-2], ns[-1]
        return points[lo] + (points[hi] - points[lo]) / (hi - lo) * (n - lo)

    return seconds


@dataclass(frozen=True)
class Hardware:
    name: str
    verify: Callable[[int], float]  # seconds per target pass over n tokens
    draft: float  # seconds per draft-model token

    @property
    def plain_rate(self) -> float:
        return 1.0 / self.verify(1)


CPU = Hardware("cpu", curve({1: 0.028, 2: 0.045, 4: 0.071, 8: 0.121, 16: 0.138}), 0.016)
GPU = Hardware("gpu", curve({1: 0.010, 17: 0.010}), 0.002)
BF16 = Hardware("bf16", curve({1: 0.124, 4: 0.128, 8: 0.153}), 0.045)
# A repacked CPU layout (llama.cpp's 4- and 8-row GEMM kernels): verifying 4 tokens costs less than
# 3, and 5 costs much more than a line from 4 to 8 says.
REPACKED = Hardware(
    "repacked",
    curve({1: 0.025, 2: 0.044, 3: 0.058, 4: 0.046, 5: 0.070, 6: 0.074, 7: 0.078, 8: 0.082, 16: 0.111}),
    0.014,
)


def calibrated(hw: Hardware, with_draft: bool = True) -> CostModel:
    """A CostModel calibrated as the engine does (`CostModel.calibrate` on the loaded backends)."""
    clock = VirtualClock()
    target = MarkovBackend(n_vocab=8, cost=hw.verify, clock=clock)
    draft = MarkovBackend(n_vocab=8, cost=lambda n: n * hw.draft, clock=clock) if with_draft else None
    costs = CostModel()
    with simulated_time(clock):
        costs.calibrate(target, draft)
    return costs


# -- simulated rounds -------------------------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
    """An n-gram proposal: `length` tokens copied after a match of `match_len`, each surviving
    with probability `a`."""

    length: int
    match_len: int
    a: float


TRUTH = 1_000_000  # simulated token ids of the committed text start here


@dataclass
class Record:
    drafted: int  # as Step.drafted
    drafter: str | None
    accepted: int
    seconds: float
    state: ControllerState | None


@dataclass
class Sim:
    """Drives a policy's plan()/observe() loop on `hw`. `model(r)` is the draft model's acceptance
    in round r (None: no draft model loaded); `ngram(r)` the n-gram proposal of round r."""

    hw: Hardware
    model: Callable[[int], float] | None = None
    ngram: Callable[[int], Proposal | None] | None = None
    seed: int = 0
    draft_room: int = 10_000  # the budget (max_tokens / context) never binds unless a test says so
    records: list[Record] = field(default_factory=list)

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)
        # The committed text: position j holds token TRUTH + j. An n-gram proposal copies the true
        # continuation for its first m tokens (each surviving with probability a) and then goes
        # wrong, so the controller can score proposals against the text as it does for real.
        self.context: list[int] = [TRUTH]

    def run(self, policy, rounds: int) -> Sim:
        for _ in range(rounds):
            self.round(policy)
        return self

    def round(self, policy) -> Record:
        r = len(self.records)
        t = len(self.context)
        proposal = self.ngram(r) if self.ngram else None
        offered, right = None, 0
        if proposal is not None:
            fates = self.rng.random(proposal.length) < proposal.a
            right = next((i for i, ok in enumerate(fates) if not ok), proposal.length)
            ids = [TRUTH + t + i if i < right else -1 - i for i in range(proposal.length)]
            offered = Draft(ids, [None] * proposal.length, [1.0] * proposal.length, proposal.match_len)
        plan: Plan = policy.plan(RoundContext(offered, self.model is not None, self.draft_room, self.context))
        k = max(0, min(plan.draft_len, self.draft_room))
        draft, draft_s, accepted = Draft(), 0.0, 0
        if k and plan.drafter == "model":
            draft, fates, evals = self._draft_model(self.model(r), k, plan.stop)
            draft_s = evals * self.hw.draft
            accepted = next((i for i, ok in enumerate(fates) if not ok), len(fates))
        elif k and plan.drafter == "ngram":
            k = min(k, proposal.length)
            draft = Draft(offered.ids[:k], offered.dists[:k], offered.confidence[:k], proposal.match_len)
            accepted = min(right, k)
        n = len(draft.ids)
        step = Step(
            n,
            accepted,
            tuple(draft.ids),
            tuple(draft.ids[accepted:]),
            draft_s,
            self.hw.verify(n + 1),
            plan.drafter if n else None,
            plan.state,
        )
        policy.costs.observe_round(step, draft)  # as the decoder does
        policy.observe(step, draft)
        self.context.extend(TRUTH + t + i for i in range(accepted + 1))
        rec = Record(n, step.drafter, accepted, draft_s + step.verify_s, plan.state)
        self.records.append(rec)
        return rec

    def _draft_model(self, a: float, k: int, stop) -> tuple[Draft, list[bool], int]:
        """Like ModelDrafter.draft: one draft evaluation per token, plus one for a token that the
        stop rule then declines."""
        a = min(max(a, 1e-3), 1 - 1e-3)
        draft, fates, evals = Draft(), [], 0
        while len(draft.ids) < k:
            conf = float(self.rng.beta(4 * a, 4 * (1 - a)))
            evals += 1
            if draft.ids and stop is not None and stop(len(draft.ids), conf):
                break
            draft.ids.append(len(draft.ids))
            draft.dists.append(None)
            draft.confidence.append(conf)
            fates.append(bool(self.rng.random() < conf))
        draft.steps = len(draft.ids)
        return draft, fates, evals

    # -- what happened

    def rate(self, start: int = 0, stop: int | None = None) -> float:
        recs = self.records[start:stop]
        return sum(r.accepted + 1 for r in recs) / sum(r.seconds for r in recs)

    def speedup(self, start: int = 0, stop: int | None = None) -> float:
        return self.rate(start, stop) / self.hw.plain_rate

    def ks(self, start: int = 0, stop: int | None = None) -> list[int]:
        return [r.drafted for r in self.records[start:stop]]

    def share(self, pred: Callable[[Record], bool], start: int = 0, stop: int | None = None) -> float:
        recs = self.records[start:stop]
        return sum(map(pred, recs)) / len(recs)

    def rounds_to(self, start: int, pred: Callable[[int], bool], window: int = 10, need: int = 8) -> int | None:
        """Rounds after `start` until a window of `window` rounds has `need` whose K satisfies `pred`."""
        ks = self.ks(start)
        for i in range(len(ks) - window + 1):
            if sum(map(pred, ks[i : i + window])) >= need:
                return i
        return None


def auto(hw: Hardware, drafter: str = "model") -> AutoK:
    return AutoK(drafter, calibrated(hw, with_draft=drafter in ("model", "auto")))


def constant(a: float) -> Callable[[int], float]:
    return lambda r: a


def switch(before: float, after: float, at: int) -> Callable[[int], float]:
    return lambda r: before if r < at else after


def best_fixed(hw: Hardware, a: float, seed: int, rounds: int, ks=range(0, 13)) -> tuple[int, float]:
    """The fixed K (draft model) with the highest simulated tokens/s, and that speedup."""
    speed = {k: Sim(hw, model=constant(a), seed=seed).run(FixedK(k, "model"), rounds).speedup() for k in ks}
    k = max(speed, key=speed.get)
    return k, speed[k]


WARM_UP = 50
