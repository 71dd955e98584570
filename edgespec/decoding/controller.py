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
  verification it costs at the plan's rate.

  Trees (`tree.py`) are weighed the same way: a node's value is the chance it is accepted (its
  parent's, times its own after the siblings before it missed), the best m nodes are a tree
  (`best_tree`), and E = 1 + the sum of their values against verify(m + 1). The n-gram drafter's
  trie of every earlier match is cut to its best m nodes; the draft model, once its chain is
  drafted, adds an alternative beside a chain token when P(reaching it) * P(the target takes it)
  pays for its verification.
  On a steep CPU curve that is seldom and the drafts stay chains; where verifying more tokens
  costs little (a GPU, torch bf16, a repacked layout's cheap n = 4) trees grow. Those rules act on
  estimates; whether trees paid is then measured (`_TreeGate`), and a drafter whose trees did not
  drafts chains. `auto-chain` weighs only the first branch: the chain baseline. A drafter that is
  not worth using is probed now and then (one or two tokens, with exponential back-off) so a change
  in the text is noticed; n-gram proposals need no probes, as they are scored against the text
  whether drafted or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from edgespec.decoding.costs import CostModel, best_k, best_tree
from edgespec.decoding.drafters import Draft, DraftChoice, DrafterKind
from edgespec.decoding.events import ControllerState, Step
from edgespec.decoding.plan import KSetting, Plan, Policy, RoundContext
from edgespec.decoding.simple_policies import FixedK, HeuristicK
from edgespec.decoding.tree import ROOT, children, depths, first_branch, ranks


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

    # After the copies before it were wrong, another earlier occurrence's copy is right this often
    # (per place among the siblings: second, third and later); learnt from the text like the rest.
    OTHER = (0.3, 0.2)

    def __init__(self, max_k: int):
        self.rates = [[Rate(1.0 - (1.0 - first) * self.RISE**i, prior_weight=3.0) for i in range(max_k)]
                      for first in self.FIRST]
        self.others = [Rate(a, prior_weight=3.0) for a in self.OTHER]
        self._pending: list[tuple[int, Draft, list[Rate]]] = []  # (position, proposal, rates)

    def rates_for(self, match_len: int) -> list[Rate]:
        return self.rates[_bucket(match_len, _MATCH_BUCKETS[1:])]

    def rate(self, rates: list[Rate], depth: int, rank: int) -> Rate | None:
        """The rate of a node at `depth` (1 for the root's children) and `rank` among its siblings:
        the first child's by position, the others' by rank; None beyond the positions tracked."""
        if rank:
            return self.others[min(rank, len(self.others)) - 1]
        return rates[depth - 1] if depth <= len(rates) else None

    def remember(self, position: int, proposal: Draft) -> None:
        self._pending.append((position, proposal, self.rates_for(proposal.match_len)))
        del self._pending[: -self.MAX_PENDING]

    def score(self, context: Sequence[int]) -> None:
        """Settle every proposal whose fate the committed text now shows: walk the text down the
        proposal's tree; at each node reached, its children were right or wrong in turn."""
        still = []
        for position, proposal, rates in self._pending:
            outcomes = self._walk(context, position, proposal, rates)
            if outcomes is None:
                still.append((position, proposal, rates))  # all seen so far match: not settled yet
                continue
            for rate, hit in outcomes:
                rate.update(hit)
        self._pending = still

    def _walk(self, context: Sequence[int], position: int, proposal: Draft,
              rates: list[Rate]) -> list[tuple[Rate, bool]] | None:
        below = children(proposal.parent_list())
        outcomes: list[tuple[Rate, bool]] = []
        row, depth = 0, 1
        while below[row]:
            if position + depth > len(context):
                return None
            token = context[position + depth - 1]
            taken = None
            for rank, node in enumerate(below[row]):
                hit = proposal.ids[node] == token
                rate = self.rate(rates, depth, rank)
                if rate is not None:
                    outcomes.append((rate, hit))
                if hit:
                    taken = node
                    break
            if taken is None:
                break
            row, depth = taken + 1, depth + 1
        return outcomes


class _TreeGate:
    """Whether one drafter's trees have paid, measured on its own tree rounds, not predicted.

    The branch rules add a node when its estimated chance pays for its measured cost, and the
    estimates can be wrong: an alternative's chance is read off a confidence bin that chain tokens
    fill too, an earlier copy's off a prior. Yet every tree round shows what its chain alone would
    have done: its first branch (the chain the drafter drafted first), accepted as far as the path
    follows it, verified in a pass over fewer tokens. The gate keeps a discounted sum of the tokens
    the alternatives added minus what their extra verification cost, in tokens at the live rate. While the sum is below
    -LOSS the drafter drafts chains, but every EXPLORE-th round a tree, so that trees that start to
    pay (the text changed) are noticed. A round without alternatives tells nothing and is skipped.

    For the n-gram trie the counterfactual chain is the tree's own first branch, which may be
    shorter than the chain `auto-chain` would verify (alternatives can take a deeper copy token's
    place); a round accepted to its end is thus slightly in the tree's favour."""

    DECAY = 0.95  # about 20 tree rounds of memory
    LOSS = 1.0  # tokens: less lost over that memory is within the noise of a timing
    EXPLORE = 8

    def __init__(self):
        self.net = 0.0  # tokens gained over chains, discounted; trees are tried first
        self._held = 0  # rounds drafted as chains since the sum fell below -LOSS

    def allows(self) -> bool:
        """Asked once per round that could draft a tree."""
        if self.net >= -self.LOSS:
            self._held = 0
            return True
        self._held += 1
        return self._held % self.EXPLORE == 0

    def observe(self, parents: Sequence[int], path: Sequence[int], costs: CostModel, rate: float) -> None:
        """A round whose draft was `parents` and whose accepted nodes were `path`, at `rate` tokens a
        second."""
        first = first_branch(parents)
        if len(first) == len(parents):
            return
        followed = 0
        while followed < min(len(path), len(first)) and path[followed] == first[followed]:
            followed += 1
        extra_s = costs.verify(len(parents) + 1) - costs.verify(len(first) + 1)
        self.net = self.net * self.DECAY + (len(path) - followed) - rate * extra_s


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


LONGEST_DRAFT = 16  # the longest draft auto proposes (an n-gram copy); calibration times one more token


@dataclass
class AutoK:
    """The cost-aware controller (see the module docstring). `drafter` limits its choices:
    "auto" = n-gram, draft model or plain per round; "model" / "ngram" = that drafter or plain."""

    drafter: DraftChoice | str
    costs: CostModel
    max_k_model: int = 8
    max_k_ngram: int = LONGEST_DRAFT
    trees: bool = True  # draft trees where they pay; False: chains only (auto-chain)
    _pos: list[Rate] = field(init=False)
    _conf: list[Rate] = field(init=False)
    _ngram: NgramScores = field(init=False)
    _probe: _Probe = field(default_factory=_Probe, init=False)
    _probing: bool = field(default=False, init=False)
    _streak: float = field(default=1.0, init=False)
    _measured: float = field(default=0.0, init=False)
    _model_rounds: int = field(default=0, init=False)
    _gates: dict[DrafterKind, _TreeGate] = field(init=False)

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
    # A catch-up of this many tokens or fewer is part of a draft step (the rounds since the model
    # last drafted); a longer one is priced against what the rest of the reply can save.
    ROUTINE_CATCH_UP = 16
    HORIZON = 32  # tokens the rest of a reply is taken to hold at least, when weighing a catch-up

    def __post_init__(self):
        self.allowed = DraftChoice(self.drafter).kinds
        self.max_k = max(self.max_k_model, self.max_k_ngram)
        self._pos = self._model_prior()
        self._conf = [Rate(0.3 + 0.6 * i / len(_CONF_BINS)) for i in range(len(_CONF_BINS) + 1)]
        self._ngram = NgramScores(self.max_k_ngram)
        self._gates = {kind: _TreeGate() for kind in DrafterKind}

    def _model_prior(self) -> list[Rate]:
        """A draft model of the same family agrees often."""
        return [Rate(0.7) for _ in range(self.max_k_model)]

    # -- choosing -------------------------------------------------------------------------

    def _cost(self, kind: DrafterKind) -> Callable[[int], float]:
        """Seconds for a round drafting k tokens with `kind`."""
        c = self.costs
        if kind == DrafterKind.NGRAM:
            return lambda k: c.verify(k + 1) + c.ngram_lookup
        d = c.draft_step if c.draft_step is not None else c.verify(1)
        return lambda k: k * d + c.verify(k + 1) + c.ngram_lookup

    def _model_option(self, ctx: RoundContext) -> tuple[int, float]:
        acc = [r.mean for r in self._pos[: min(self.max_k_model, ctx.max_k)]]
        return best_k(acc, self._cost(DrafterKind.MODEL))

    def _ngram_option(self, ctx: RoundContext, trees: bool) -> tuple[int, float, tuple[int, ...] | None]:
        """(nodes to verify, tokens per second, which nodes of the proposal: None for the first ones
        of its first branch). Each node's chance is its parent's times its own: by position for a
        first child, by rank for a later one, after the siblings before it missed (`best_tree`)."""
        g = ctx.ngram if trees else ctx.ngram.first_branch()
        parents = g.parent_list()
        rates = self._ngram.rates_for(g.match_len)
        values: list[float] = []
        missed: dict[int, float] = {}  # per parent: the chance all its children so far were wrong
        for parent, depth, rank in zip(parents, depths(parents), ranks(parents)):
            rate = self._ngram.rate(rates, depth, rank)
            a = rate.mean if rate is not None else 0.0
            before = missed.get(parent, 1.0)
            values.append((1.0 if parent == ROOT else values[parent]) * before * a)
            missed[parent] = before * (1.0 - a)
        order = sorted(range(len(values)), key=lambda i: (-values[i], i))[: min(ctx.max_k, self.max_k_ngram)]
        m, rate = best_tree([values[i] for i in order], self._cost(DrafterKind.NGRAM))
        return m, rate, tuple(sorted(order[:m])) if trees else None

    def _trees_now(self, kind: DrafterKind) -> bool:
        """Whether this round's `kind` draft may be a tree (asked once per round)."""
        return self.trees and self._gates[kind].allows()

    def fixed_k(self, kind: DrafterKind, match_len: int = 0) -> int:
        """The draft length this controller would choose for `kind` from what it believes now (its
        acceptance estimates and the cost curve), for an engine that drafts the same K every round
        (vLLM's `num_speculative_tokens`); for n-gram lookup, after a match of `match_len` tokens.
        0 when drafting with `kind` does not pay here."""
        if kind == DrafterKind.MODEL:
            return self._model_option(RoundContext(None, True, self.max_k_model))[0]
        proposal = Draft(ids=[0] * self.max_k_ngram, match_len=match_len)  # a chain: only its length is read
        return self._ngram_option(RoundContext(proposal, False, self.max_k_ngram), trees=False)[0]

    def may_use(self, kind: DrafterKind) -> bool:
        if kind == DrafterKind.MODEL:
            return kind in self.allowed and self._model_could_pay()
        return kind in self.allowed

    def _model_could_pay(self) -> bool:
        return best_k([self.BEST_CASE] * self.max_k_model, self._cost(DrafterKind.MODEL))[0] > 0

    def _best_case_rate(self) -> float:
        return best_k([self.BEST_CASE] * self.max_k_model, self._cost(DrafterKind.MODEL))[1]

    def _catch_up_pays(self, ctx: RoundContext, model_rate: float) -> bool:
        """Whether the draft model's catch-up (reading the text it has not seen, at first the
        prompt's window) is worth what drafting at `model_rate` would save over the rest of the
        reply, against the rate decoding has without it (plain steps, n-gram copies: the live
        rate). The rest of the reply is unknown: it is taken to be as long as the reply so far
        (at least HORIZON tokens), within what max_tokens leaves, so a reply that ends early
        seldom pays for a read it could not use. A catch-up of a few tokens is routine (the
        rounds since the model last drafted) and is priced in its draft step."""
        if ctx.model_behind <= self.ROUTINE_CATCH_UP:
            return True
        without = max(1.0 / (self.costs.verify(1) + self.costs.ngram_lookup), self._measured)
        saved = 1.0 / without - 1.0 / model_rate  # seconds per token
        rest = min(ctx.max_k + 1, max(ctx.emitted, self.HORIZON))
        return saved > 0 and self.costs.read(ctx.model_behind) <= saved * rest

    def plan(self, ctx: RoundContext) -> Plan:
        use_ngram = ctx.ngram is not None and DrafterKind.NGRAM in self.allowed
        if use_ngram:
            self._ngram.score(ctx.context)
            if ctx.ngram.ids:  # the whole trie is scored against the text, drafted or not
                self._ngram.remember(len(ctx.context), ctx.ngram if self.trees else ctx.ngram.first_branch())
        plain_rate = 1.0 / (self.costs.verify(1) + self.costs.ngram_lookup)
        options: dict[DrafterKind | None, tuple[int, float, tuple[int, ...] | None]] = {None: (0, plain_rate, None)}
        if ctx.has_model and DrafterKind.MODEL in self.allowed:
            k, rate = self._model_option(ctx)
            options[DrafterKind.MODEL] = (k if self._catch_up_pays(ctx, rate) else 0, rate, None)
        if use_ngram and ctx.ngram.ids:
            options[DrafterKind.NGRAM] = self._ngram_option(ctx, self._trees_now(DrafterKind.NGRAM))
        self._probe.idle += 1
        which = max(options, key=lambda d: options[d][1] if options[d][0] or d is None else 0.0)
        k, rate, nodes = options[which]
        self._probing = False
        if k == 0:
            which = None
            if DrafterKind.MODEL in options and ctx.max_k > 0 and self._probe.due(self._probe_cap()) \
                    and self._model_could_pay() and self._catch_up_pays(ctx, self._best_case_rate()):
                which, k, self._probing = DrafterKind.MODEL, min(2, ctx.max_k), True
        elif which == DrafterKind.MODEL:
            self._model_rounds += 1
            if self._model_rounds % self.STRETCH == 0:
                k = min(k + 1, self.max_k_model, ctx.max_k)
        if which == DrafterKind.MODEL:
            self._probe.used(self._probing)
        state = ControllerState("auto", k, which, self._first_acceptance(which, ctx), rate / plain_rate,
                                self._measured * self.costs.verify(1))
        if which != DrafterKind.MODEL:
            return Plan(which, k, state=state, nodes=nodes if which == DrafterKind.NGRAM else None)
        rules = _ModelRound(self, rate)
        trees = not self._probing and self._trees_now(DrafterKind.MODEL)
        return Plan(which, k, rules.stop, state, rules.branch if trees else None)

    def _probe_cap(self) -> int:
        """Rounds between model probes at which their extra time is PROBE_BUDGET of plain decoding."""
        c = self.costs
        extra = 2 * (c.draft_step if c.draft_step is not None else c.verify(1)) + c.verify(3) - c.verify(1)
        return max(_Probe.BASE, min(_Probe.MAX, int(extra / (self.PROBE_BUDGET * c.verify(1)))))

    def _first_acceptance(self, which: DrafterKind | None, ctx: RoundContext) -> float:
        if which == DrafterKind.MODEL:
            return self._pos[0].mean
        if which == DrafterKind.NGRAM:
            return self._ngram.rates_for(ctx.ngram.match_len)[0].mean
        return 0.0

    def _calibrated(self, confidence: float) -> float:
        """How often the target takes a token the draft model gave this probability."""
        return self._conf[_bucket(confidence, _CONF_BINS)].mean

    # -- learning -------------------------------------------------------------------------

    def observe(self, step: Step, draft: Draft) -> None:
        self.costs.observe_verify(step.k + 1, step.verify_s)
        tokens = step.accepted + 1
        seconds = step.draft_s + step.verify_s
        self._measured = tokens / seconds if not self._measured else self._measured + 0.1 * (tokens / seconds - self._measured)
        parents, path = step.tree()
        if step.drafter is not None:
            self._gates[step.drafter].observe(parents, path, self.costs, self._measured)
        if step.drafter != DrafterKind.MODEL:  # n-gram proposals are scored against the text in plan()
            self.costs.observe_lookup(step.draft_s)
            return
        self._check_surprise(step)
        chain = first_branch(parents)  # one draft step each; the alternatives beside them were free
        if not draft.catch_up_s:
            self.costs.observe_draft(len(chain), step.draft_s)
        else:
            if draft.catch_up_tokens > self.ROUTINE_CATCH_UP:
                self.costs.observe_read(draft.catch_up_tokens, draft.catch_up_s)
            if len(chain) > 1:
                self.costs.observe_draft(len(chain) - 1, step.draft_s - draft.catch_up_s)
        # Every node whose parent was reached was tried: a hit if the target took it.
        position = {node: i for i, node in enumerate(chain)}
        accepted = set(path)
        for node, parent in enumerate(parents):
            if parent != ROOT and parent not in accepted:
                continue
            hit = node in accepted
            i = position.get(node)
            if i is not None and i < len(self._pos):
                self._pos[i].update(hit)
            self._conf[_bucket(draft.confidence[node], _CONF_BINS)].update(hit)

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


class _ModelRound:
    """A draft-model round's rules, at the plan's rate (tokens per second): adding a node pays when
    the tokens it is expected to add are worth its extra verification time at that rate.

    `stop(j, confidence)` before the chain's next token, j nodes drafted so far: it would add
    P(the chain so far survives) * P(it survives | its confidence). It is asked before the first
    token too, which it never stops (the plan chose to draft) but must count: every later token
    survives only if the first does. `branch(confidence, position, nodes)` for an alternative
    beside the chain's token at `position`: it would add P(that position is reached) * P(the target
    takes it | its confidence), EAGLE-2's value of a node.

    The extra time of one more node is read off the cheapest pass that verifies at least that
    many tokens: where the curve dips (a repacked layout verifies 4 tokens for less than 3), a
    third node is worth drafting for the fourth that comes nearly free, which a step-by-step
    comparison would never see."""

    def __init__(self, controller: AutoK, rate: float):
        self._ctl, self._rate = controller, rate
        self._survive = 1.0  # P(the chain drafted so far survives)
        self._reach: list[float] = []  # per chain position: P(it is reached)

    def _pays(self, value: float, nodes: int) -> bool:
        verify = self._ctl.costs.verify_at_least
        return value >= self._rate * (verify(nodes + 2) - verify(nodes + 1))

    def stop(self, j: int, confidence: float) -> bool:
        a = self._ctl._calibrated(confidence)
        if j and not self._pays(self._survive * a, j):
            return True
        self._reach.append(self._survive)
        self._survive *= a
        return False

    def branch(self, confidence: float, position: int, nodes: int) -> bool:
        return self._pays(self._reach[position] * self._ctl._calibrated(confidence), nodes)


def make_policy(k: KSetting, drafter: DraftChoice, costs: CostModel) -> Policy:
    """The policy a K setting names."""
    if k.cost_aware:
        return AutoK(drafter, costs, trees=k.policy == "auto")
    if k.policy == "heuristic":
        return HeuristicK(drafter)
    return FixedK(k.k, drafter)
