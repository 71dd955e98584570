"""Choosing the draft length K for each round (K = 0 is plain decoding).

The decoder asks a `Policy` for a `Plan` before every target pass and reports the outcome back
with `observe`. Three policies:

- `FixedK`: always K tokens from one drafter (the baseline every tool offers).
- `HeuristicK`: Hugging Face's "heuristic" schedule, +2 after a fully accepted round, -1 otherwise.
- `AutoK`: the cost-aware controller. It keeps
    * a `CostModel`: seconds per target pass as a function of tokens verified (flat on a GPU,
      near-linear on a small CPU), and per draft-model step, calibrated at load and then updated
      from every real pass;
    * acceptance estimates with forgetting: for the draft model per draft position and per
      confidence bin, for the n-gram drafter per match-length bucket and position;
  and each round picks the drafter and K that maximise expected tokens per second,
      E(K) / cost(K),   E(K) = 1 + sum_j prod_{i<=j} a_i   (Leviathan et al. 2023, sec. 3.5),
  against plain decoding's 1 / t_verify(1). Inside a round the draft model stops early when
  P(all drafted so far survive) * P(next survives | its confidence) no longer pays for the extra
  verification it costs at the plan's rate. A drafter that is not worth using is probed now and
  then (one or two tokens, with exponential back-off) so a change in the text is noticed; n-gram
  proposals need no probes, as they are scored against the text whether drafted or not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Literal, Protocol, Sequence

from edgespec.errors import SettingError
from edgespec.spec.drafters import Draft
from edgespec.spec.events import ControllerState, Step

StopRule = Callable[[int, float], bool]  # (tokens drafted so far, confidence of the next) -> stop


@dataclass(frozen=True, slots=True)
class Plan:
    """One round: which drafter proposes, how many tokens at most, and when the draft model stops."""

    drafter: str | None  # "model", "ngram" or None (plain decoding)
    k: int
    stop: StopRule | None = None
    state: ControllerState | None = None


@dataclass(frozen=True, slots=True)
class RoundContext:
    """What a policy may look at before the round: the free n-gram proposal, the budget, and the
    committed text (prompt and output so far, read-only), against which earlier n-gram proposals
    can be scored whether or not they were drafted."""

    ngram: Draft | None  # None when the n-gram drafter is off
    has_model: bool  # a draft model is loaded and allowed
    max_k: int  # drafts beyond this would overrun max_tokens or the context
    context: Sequence[int] = ()


class Policy(Protocol):
    max_k: int  # the longest draft this policy may ask for (bounds the n-gram lookup)

    def plan(self, ctx: RoundContext) -> Plan: ...

    def observe(self, step: Step, draft: Draft) -> None: ...

    def uses_model(self) -> bool:
        """Whether the draft model may be asked to draft (then it reads the prompt with the target)."""
        ...


def _preferred(drafter: str, ctx: RoundContext) -> str | None:
    """The drafter a fixed policy uses this round: "auto" means the model if loaded, else n-gram."""
    if drafter in ("model", "auto") and ctx.has_model:
        return "model"
    if drafter in ("ngram", "auto") and ctx.ngram is not None and ctx.ngram.ids:
        return "ngram"
    return None


def _capped(drafter: str | None, k: int, ctx: RoundContext) -> int:
    k = min(k, ctx.max_k)
    return min(k, len(ctx.ngram.ids)) if drafter == "ngram" and ctx.ngram is not None else k


class FixedK:
    """Always draft k tokens (the n-gram drafter drafts at most what it found)."""

    def __init__(self, k: int, drafter: str):
        self.k = self.max_k = k
        self.drafter = drafter

    def plan(self, ctx: RoundContext) -> Plan:
        which = _preferred(self.drafter, ctx) if self.k > 0 else None
        k = _capped(which, self.k, ctx) if which else 0
        return Plan(which, k, state=ControllerState("fixed", k, which, 0.0, 0.0, 0.0))

    def observe(self, step: Step, draft: Draft) -> None:
        pass

    def uses_model(self) -> bool:
        return self.k > 0 and self.drafter in ("model", "auto")


class HeuristicK:
    """transformers' "heuristic" schedule: K += 2 after a round with every draft accepted, else
    K -= 1 (at least 1). It starts at 5 and is capped at 16 here."""

    def __init__(self, drafter: str, start: int = 5, cap: int = 16):
        self.k, self.max_k, self.drafter = start, cap, drafter

    def plan(self, ctx: RoundContext) -> Plan:
        which = _preferred(self.drafter, ctx)
        k = _capped(which, self.k, ctx) if which else 0
        return Plan(which, k, state=ControllerState("heuristic", k, which, 0.0, 0.0, 0.0))

    def observe(self, step: Step, draft: Draft) -> None:
        if step.k:
            self.k = min(self.max_k, self.k + 2) if step.accepted == step.k else max(1, self.k - 1)

    def uses_model(self) -> bool:
        return self.drafter in ("model", "auto")


class Rate:
    """A Bernoulli rate with exponential forgetting (a discounted Beta posterior mean)."""

    __slots__ = ("hits", "weight", "decay")

    def __init__(self, prior: float, prior_weight: float = 2.0, decay: float = 0.97):
        self.hits, self.weight, self.decay = prior * prior_weight, prior_weight, decay

    def update(self, hit: bool) -> None:
        self.hits = self.hits * self.decay + hit
        self.weight = self.weight * self.decay + 1.0

    @property
    def mean(self) -> float:
        return self.hits / self.weight


class CostModel:
    """Seconds per target pass verifying n tokens, and per draft-model step.

    Measured points are smoothed per n (exponential moving average); between them the cost is
    interpolated linearly and beyond the largest extrapolated with the last slope. The curve is
    flat on a GPU and near-linear on a small CPU: nothing here assumes either.
    """

    SMOOTH = 0.15

    def __init__(self):
        self._verify: dict[int, float] = {}
        self._curve: dict[int, float] = {}  # verify(n) as interpolated, until the next observation
        self.draft_step: float | None = None  # seconds per draft-model token
        self.ngram_lookup = 0.0  # seconds per n-gram lookup

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.SMOOTH * (new - old)

    def observe_verify(self, n: int, seconds: float) -> None:
        self._verify[n] = self._ema(self._verify.get(n), seconds)
        self._curve.clear()

    def observe_draft(self, tokens: int, seconds: float) -> None:
        if tokens:
            self.draft_step = self._ema(self.draft_step, seconds / tokens)

    def observe_lookup(self, seconds: float) -> None:
        self.ngram_lookup = self._ema(self.ngram_lookup, seconds)

    @property
    def calibrated(self) -> bool:
        return len(self._verify) >= 2

    def to_dict(self) -> dict:
        return {"verify": {str(n): s for n, s in sorted(self._verify.items())}, "draft_step": self.draft_step}

    def restore(self, d: dict) -> None:
        """Take measurements saved by `to_dict` (an earlier run on the same machine and models)."""
        self._verify = {int(n): float(s) for n, s in d["verify"].items()}
        self._curve.clear()
        self.draft_step = None if d.get("draft_step") is None else float(d["draft_step"])

    def verify(self, n: int) -> float:
        """Seconds for a target pass over n tokens (the controller asks this dozens of times a round)."""
        t = self._curve.get(n)
        if t is None:
            t = self._curve[n] = self._interpolate(n)
        return t

    def _interpolate(self, n: int) -> float:
        pts = self._verify
        if n in pts:
            return pts[n]
        ns = sorted(pts)
        if not ns:
            return 1.0
        if len(ns) == 1:
            return pts[ns[0]] * n / ns[0]
        lo = max((m for m in ns if m < n), default=None)
        hi = min((m for m in ns if m > n), default=None)
        if lo is None:
            lo, hi = ns[0], ns[1]
        elif hi is None:
            lo, hi = ns[-2], ns[-1]
        slope = (pts[hi] - pts[lo]) / (hi - lo)
        return max(pts[lo] + slope * (n - lo), 1e-6)

    def calibrate(self, target, draft=None, sizes: Sequence[int] = (1, 2, 4, 8, 16), rounds: int = 3) -> None:
        """Time a few verification sizes on the target (and one draft step) on dummy tokens, then
        roll the caches back; about 30 target-token evaluations a round, a second or two in all.

        Each size keeps the fastest of `rounds` interleaved timings: another process waking up only
        ever adds time, and a curve skewed by one busy moment would be kept for every later run
        (measured here: a saved curve had verify(2) at 116 ms against 66-75 ms when quiet, and so
        ruled out short drafts for good)."""
        for backend, ns in ((target, sizes), (draft, (1,))):
            if backend is None:
                continue
            start = len(backend.cached)
            room = backend.n_ctx - start
            backend.eval([0], 1)  # warm-up: first calls pay for allocation
            backend.truncate(start)
            fastest: dict[int, float] = {}
            for _ in range(rounds):
                for n in ns:
                    if n > room:
                        break
                    t0 = time.perf_counter()
                    backend.eval([0] * n, n)
                    elapsed = time.perf_counter() - t0
                    backend.truncate(start)
                    fastest[n] = min(elapsed, fastest.get(n, elapsed))
            for n, elapsed in fastest.items():
                if backend is target:
                    self.observe_verify(n, elapsed)
                else:
                    self.observe_draft(n, elapsed)


def best_k(acceptance: Sequence[float], cost: Callable[[int], float]) -> tuple[int, float]:
    """The K in 0..len(acceptance) maximising E(K)/cost(K); returns (K, tokens per second)."""
    best, rate = 0, 1.0 / cost(0)
    expected, survive = 1.0, 1.0
    for k, a in enumerate(acceptance, start=1):
        survive *= a
        expected += survive
        r = expected / cost(k)
        if r > rate:
            best, rate = k, r
    return best, rate


# n-gram match lengths that predict acceptance differently (a longer copy survives longer)
_MATCH_BUCKETS = (1, 2, 3, 4, 6, 9, 16, 32)
_CONF_BINS = (0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 0.99)


def _bucket(x: float, edges: Sequence[float]) -> int:
    return sum(x >= e for e in edges)


class NgramScores:
    """Acceptance of n-gram proposals per match-length bucket and draft position, learnt from every
    proposal, drafted or not.

    The lookup runs every round for free, and once the text has moved past a proposal it is known
    how many of its tokens the target produced: under greedy decoding exactly the ones
    verification would have accepted; under sampling the target emits x with probability p(x),
    which is the probability a point-mass draft of x is accepted, so the estimate is unbiased.
    The controller thus learns the drafter's worth while decoding plainly, without paying for
    probes, and follows the text as it moves between prose and copying.
    """

    MAX_PENDING = 64
    # Priors, the shape measured on the development set's greedy outputs: a one-token match
    # predicts the next token one time in five, a 32-token match nearly always; and once a copy's
    # first tokens survive, the next ones are likelier still (the conditional rate rises with the
    # position). Live scores take over within a few dozen proposals.
    FIRST = (0.2, 0.4, 0.55, 0.7, 0.8, 0.9, 0.95, 0.98)  # per match bucket, first position
    RISE = 0.85  # the miss rate shrinks by this factor per position

    def __init__(self, max_k: int):
        self.rates = [[Rate(1.0 - (1.0 - first) * self.RISE**i, prior_weight=3.0) for i in range(max_k)]
                      for first in self.FIRST]
        self._pending: list[tuple[int, list[int], list[Rate]]] = []  # (position, proposal, rates)

    def rates_for(self, match_len: int) -> list[Rate]:
        return self.rates[_bucket(match_len, _MATCH_BUCKETS[1:])]

    def remember(self, position: int, proposal: Draft) -> None:
        self._pending.append((position, list(proposal.ids), self.rates_for(proposal.match_len)))
        del self._pending[: -self.MAX_PENDING]

    def score(self, context: Sequence[int]) -> None:
        """Settle every proposal whose fate the committed text now shows."""
        still = []
        for position, ids, rates in self._pending:
            seen = context[position : position + len(ids)]
            hits = 0
            while hits < len(seen) and seen[hits] == ids[hits]:
                hits += 1
            if hits == len(seen) and len(seen) < len(ids):
                still.append((position, ids, rates))  # all seen so far match: not settled yet
                continue
            for i in range(min(hits + 1, len(ids), len(rates))):
                rates[i].update(i < hits)
        self._pending = still


@dataclass
class _Probe:
    """Exponential back-off for trying the draft model while the cost model rejects it."""

    interval: int = 16
    idle: int = 0
    BASE = 16
    MAX = 512

    def due(self, cap: int) -> bool:
        return self.idle >= min(self.interval, cap)

    def used(self, probing: bool) -> None:
        self.idle = 0
        self.interval = min(self.interval * 2, self.MAX) if probing else self.BASE

    def reset(self) -> None:
        self.interval = self.BASE


@dataclass
class AutoK:
    """The cost-aware controller (see the module docstring). `drafter` limits its choices:
    "auto" = n-gram, draft model or plain per round; "model" / "ngram" = that drafter or plain."""

    drafter: str
    costs: CostModel
    max_k_model: int = 8
    max_k_ngram: int = 16
    _pos: list[Rate] = field(init=False)
    _conf: list[Rate] = field(init=False)
    _ngram: NgramScores = field(init=False)
    _probe: _Probe = field(default_factory=_Probe, init=False)
    _probing: bool = field(default=False, init=False)
    _streak: float = field(default=1.0, init=False)
    _measured: float = field(default=0.0, init=False)
    _model_rounds: int = field(default=0, init=False)

    # Every STRETCH-th draft-model round drafts one token past the chosen K: a position that is
    # never drafted is never measured, so one early miss there would cap K for good.
    STRETCH = 8
    # Model probes fully accepted in a row although the estimates gave that less than this chance
    # mean the text has changed: the draft model's estimates go back to their priors.
    SURPRISE = 0.15
    # Probes may cost at most this share of plain decoding's time: it caps the back-off, and with
    # it the number of rounds before a draft model that became good is noticed (a probe is nearly
    # free on a GPU, so it comes often there; on a small CPU it is rarer).
    PROBE_BUDGET = 0.01
    # The draft model is probed only if it would pay at this acceptance: on a small CPU a draft
    # model costing half a target step never does, and each probe would pay for reading back text.
    BEST_CASE = 0.9

    def __post_init__(self):
        self.max_k = max(self.max_k_model, self.max_k_ngram)
        self._pos = self._model_prior()
        self._conf = [Rate(0.3 + 0.6 * i / len(_CONF_BINS)) for i in range(len(_CONF_BINS) + 1)]
        self._ngram = NgramScores(self.max_k_ngram)

    def _model_prior(self) -> list[Rate]:
        """A draft model of the same family agrees often."""
        return [Rate(0.7) for _ in range(self.max_k_model)]

    # -- choosing -------------------------------------------------------------------------

    def _cost(self, name: str) -> Callable[[int], float]:
        """Seconds for a round drafting k tokens with `name`."""
        c = self.costs
        if name == "ngram":
            return lambda k: c.verify(k + 1) + c.ngram_lookup
        d = c.draft_step if c.draft_step is not None else c.verify(1)
        return lambda k: k * d + c.verify(k + 1) + c.ngram_lookup

    def _model_option(self, ctx: RoundContext) -> tuple[int, float]:
        acc = [r.mean for r in self._pos[: min(self.max_k_model, ctx.max_k)]]
        return best_k(acc, self._cost("model"))

    def _ngram_option(self, ctx: RoundContext) -> tuple[int, float]:
        g = ctx.ngram
        acc = [r.mean for r in self._ngram.rates_for(g.match_len)[: min(len(g.ids), ctx.max_k, self.max_k_ngram)]]
        return best_k(acc, self._cost("ngram"))

    def uses_model(self) -> bool:
        return self.drafter in ("auto", "model") and self._model_could_pay()

    def _model_could_pay(self) -> bool:
        return best_k([self.BEST_CASE] * self.max_k_model, self._cost("model"))[0] > 0

    def plan(self, ctx: RoundContext) -> Plan:
        use_ngram = ctx.ngram is not None and self.drafter in ("auto", "ngram")
        if use_ngram:
            self._ngram.score(ctx.context)
            if ctx.ngram.ids:
                self._ngram.remember(len(ctx.context), ctx.ngram)
        plain_rate = 1.0 / (self.costs.verify(1) + self.costs.ngram_lookup)
        options: dict[str | None, tuple[int, float]] = {None: (0, plain_rate)}
        if ctx.has_model and self.drafter in ("auto", "model"):
            options["model"] = self._model_option(ctx)
        if use_ngram and ctx.ngram.ids:
            options["ngram"] = self._ngram_option(ctx)
        self._probe.idle += 1
        which = max(options, key=lambda d: options[d][1] if options[d][0] or d is None else 0.0)
        k, rate = options[which]
        self._probing = False
        if k == 0:
            which = None
            if "model" in options and ctx.max_k > 0 and self._probe.due(self._probe_cap()) and self._model_could_pay():
                which, k, self._probing = "model", min(2, ctx.max_k), True
        elif which == "model":
            self._model_rounds += 1
            if self._model_rounds % self.STRETCH == 0:
                k = min(k + 1, self.max_k_model, ctx.max_k)
        if which == "model":
            self._probe.used(self._probing)
        state = ControllerState("auto", k, which, self._first_acceptance(which, ctx), rate / plain_rate,
                                self._measured * self.costs.verify(1))
        return Plan(which, k, self._stop_rule(rate) if which == "model" else None, state)

    def _probe_cap(self) -> int:
        """Rounds between model probes at which their extra time is PROBE_BUDGET of plain decoding."""
        c = self.costs
        extra = 2 * (c.draft_step if c.draft_step is not None else c.verify(1)) + c.verify(3) - c.verify(1)
        return max(_Probe.BASE, min(_Probe.MAX, int(extra / (self.PROBE_BUDGET * c.verify(1)))))

    def _first_acceptance(self, which: str | None, ctx: RoundContext) -> float:
        if which == "model":
            return self._pos[0].mean
        if which == "ngram":
            return self._ngram.rates_for(ctx.ngram.match_len)[0].mean
        return 0.0

    def _stop_rule(self, rate: float) -> StopRule:
        """Stop drafting before token j+1 when the tokens it is expected to add, P(1..j survive) *
        P(j+1 survives | confidence), are worth less than the extra verification time at `rate`."""
        survive = [1.0]

        def stop(j: int, confidence: float) -> bool:
            a = self._conf[_bucket(confidence, _CONF_BINS)].mean
            extra = self.costs.verify(j + 2) - self.costs.verify(j + 1)
            if survive[0] * a < rate * extra:
                return True
            survive[0] *= a
            return False

        return stop

    # -- learning -------------------------------------------------------------------------

    def observe(self, step: Step, draft: Draft) -> None:
        self.costs.observe_verify(step.k + 1, step.verify_s)
        tokens = step.accepted + 1
        seconds = step.draft_s + step.verify_s
        self._measured = tokens / seconds if not self._measured else self._measured + 0.1 * (tokens / seconds - self._measured)
        if step.drafter != "model":  # n-gram proposals are scored against the text in plan()
            self.costs.observe_lookup(step.draft_s)
            return
        self._check_surprise(step)
        if not draft.catch_up_s:
            self.costs.observe_draft(step.k, step.draft_s)
        elif step.k > 1:
            self.costs.observe_draft(step.k - 1, step.draft_s - draft.catch_up_s)
        for i in range(min(step.k, step.accepted + 1)):
            hit = i < step.accepted
            if i < len(self._pos):
                self._pos[i].update(hit)
            self._conf[_bucket(draft.confidence[i], _CONF_BINS)].update(hit)

    def _check_surprise(self, step: Step) -> None:
        """After fully accepted probes in a row: was that unlikely under the estimates? Then forget them."""
        if not self._probing or step.accepted < step.k:
            self._streak = 1.0
            return
        for r in self._pos[: step.k]:
            self._streak *= r.mean
        if self._streak < self.SURPRISE:
            self._streak = 1.0
            self._pos = self._model_prior()
            self._probe.reset()


@dataclass(frozen=True, slots=True)
class KSetting:
    """How the draft length is chosen: the cost-aware controller ("auto"), transformers' +2/-1
    schedule ("heuristic"), or a fixed K ("fixed", K = 0 is plain decoding). Parsed once, where
    the user's text comes in (`parse`)."""

    policy: Literal["auto", "heuristic", "fixed"]
    k: int = 0

    MAX = 64  # a longer fixed draft only wastes verification

    @classmethod
    def parse(cls, text: str) -> KSetting:
        """"auto", "heuristic" or a whole number 0..MAX; anything else is a SettingError."""
        text = text.strip()
        if text in ("auto", "heuristic"):
            return cls(text)
        try:
            n = int(text)
        except ValueError:
            raise SettingError(f"{text!r} is not auto, heuristic or a whole number") from None
        if not 0 <= n <= cls.MAX:
            raise SettingError(f"{n} is outside 0..{cls.MAX}")
        return cls("fixed", n)

    def __str__(self) -> str:
        return str(self.k) if self.policy == "fixed" else self.policy


def make_policy(k: KSetting, drafter: str, costs: CostModel) -> Policy:
    """The policy a K setting names."""
    if k.policy == "auto":
        return AutoK(drafter, costs)
    if k.policy == "heuristic":
        return HeuristicK(drafter)
    return FixedK(k.k, drafter)
