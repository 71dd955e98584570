"""The cost-aware K policy (`auto`, and `auto-chain`), and `make_policy`, which turns the user's
`PolicyChoice` into a policy: this one, or a baseline of `simple_policies.py`.

`AutoK` keeps
  * a `CostModel`: seconds per target pass as a function of tokens verified (flat on a GPU,
    near-linear on a small CPU), and per draft-model step, calibrated at load and then updated
    from every real pass (the decoder feeds it, whatever the policy); or a steady one
    (`decoding/costs/steady.py`), fixed for the call, whose choices then follow the text and token counts
    alone, never the call's seconds, so a greedy request makes the same passes every time;
  * acceptance estimates with forgetting (`acceptance.py`): for the draft model per draft
    position and per confidence bin, for each copying source (the text itself, earlier replies to
    this prompt, history, the repository) per match-length bucket and position, each apart, so a
    source that does not pay on a text is not drafted while another does;
and each round picks the drafter and K that maximise expected tokens per second,
    E(K) / cost(K),   E(K) = 1 + sum_j prod_{i<=j} a_i   (Leviathan et al. 2023, sec. 3.5),
against plain decoding's 1 / t_verify(1). Inside a round the draft model stops early when
P(all drafted so far survive) * P(next survives | its confidence) no longer pays for the extra
verification it costs at the plan's rate.

Trees (`decoding/tree.py`) are weighed the same way: a node's value is the chance it is accepted
(its parent's, times its own after the siblings before it missed), the best m nodes are a tree
(`best_tree`), and E = 1 + the sum of their values against verify(m + 1). The n-gram drafter's
trie of every earlier match is cut to its best m nodes; the draft model, once its chain is
drafted, adds an alternative beside a chain token when P(reaching it) * P(the target takes it)
pays for its verification. On a steep CPU curve that is seldom and the drafts stay chains; where verifying more tokens
costs little (a GPU, torch bf16, a repacked layout's cheap n = 4) trees grow. Those rules act on
estimates; whether trees paid is then measured (`exploration.TreeGate`), and a drafter whose
trees did not drafts chains. `auto-chain` weighs only the first branch: the chain baseline. A
drafter that is not worth using is probed now and then (one or two tokens, with exponential
back-off: `exploration.Probe`) so a change in the text is noticed; n-gram proposals need no
probes, as they are scored against the text whether drafted or not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from edgespec.decoding.costs.measuring import LONGEST_CALIBRATED, LONGEST_DENSE_DRAFT
from edgespec.decoding.costs.model import ROUTINE_CATCH_UP, CostModel, best_k, best_tree
from edgespec.decoding.drafters import LOOKUPS, Draft, DraftChoice, DrafterKind
from edgespec.decoding.events import ControllerState, Step
from edgespec.decoding.policy.acceptance import COPY_PRIORS, ModelScores, NgramScores
from edgespec.decoding.policy.exploration import Exploration, Probe, TreeGate
from edgespec.decoding.policy.plan import Plan, Policy, PolicyChoice, RoundContext
from edgespec.decoding.policy.simple_policies import FixedK, HeuristicK
from edgespec.decoding.tree import ROOT, depths, ranks

# The longest copy auto may draft: one token short of the longest pass a calibration times. Each
# length is priced by its source's acceptance over that length (`acceptance.NgramScores`), so only
# a copy likely to hold that far (a greedy retry, an unchanged stretch of a file) gets a long pass.
LONGEST_COPY = LONGEST_CALIBRATED - 1


@dataclass
class AutoK:
    """The cost-aware controller (see the module docstring). `drafter` limits its choices:
    "auto" = n-gram, draft model or plain per round; "model" / "ngram" = that drafter or plain."""

    drafter: DraftChoice | str
    costs: CostModel
    longest_model_draft: int = 8
    longest_copy: int = LONGEST_COPY
    trees: bool = True  # draft trees where they pay; False: chains only (auto-chain)
    _model: ModelScores = field(init=False)
    _copies: dict[DrafterKind, NgramScores] = field(init=False)
    _ngram: NgramScores = field(init=False)  # the text's own copies' (one of _copies)
    _probe: Probe = field(default_factory=Probe, init=False)
    _probing: bool = field(default=False, init=False)
    _exploration: Exploration = field(default_factory=Exploration, init=False)
    _exploring: bool = field(default=False, init=False)
    _streak: float = field(default=1.0, init=False)
    _measured: float = field(default=0.0, init=False)
    _model_rounds: int = field(default=0, init=False)
    _gates: dict[DrafterKind, TreeGate] = field(init=False)

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
    # A catch-up longer than ROUTINE_CATCH_UP (the rounds since the model last drafted: part of a
    # draft step) is priced against what the rest of the reply can save.
    HORIZON = 32  # tokens the rest of a reply is taken to hold at least, when weighing a catch-up

    def __post_init__(self):
        self.allowed = DraftChoice(self.drafter).kinds
        self._model = ModelScores(self.longest_model_draft)
        self._copies = {kind: NgramScores(self.longest_copy, COPY_PRIORS[kind]) for kind in LOOKUPS}
        self._ngram = self._copies[DrafterKind.NGRAM]
        self._gates = {kind: TreeGate() for kind in DrafterKind}

    # -- choosing -------------------------------------------------------------------------

    def _cost(self, kind: DrafterKind, forced: int = 0) -> Callable[[int], float]:
        """Seconds for a round drafting k tokens with `kind` after `forced` tokens in the same pass
        (the lookups run every round, whichever drafts)."""
        c = self.costs
        if kind != DrafterKind.MODEL:
            return lambda k: c.verify(forced + k + 1) + c.ngram_lookup
        d = c.draft_step if c.draft_step is not None else c.verify(1)
        return lambda k: k * d + c.verify(forced + k + 1) + c.ngram_lookup

    def _model_option(self, ctx: RoundContext, forced: int = 0) -> tuple[int, float]:
        acc = [r.mean for r in self._model.positions[: min(self.longest_model_draft, ctx.draft_room)]]
        return best_k(acc, self._cost(DrafterKind.MODEL, forced), base=forced + 1)

    def _copy_option(
        self, kind: DrafterKind, proposal: Draft, draft_room: int, trees: bool, forced: int = 0
    ) -> tuple[int, float, tuple[int, ...] | None]:
        """(nodes to verify, at most `draft_room`; tokens per second; which nodes of the copying drafter
        `kind`'s `proposal`, None for the first ones of its first branch). Each node's chance is its
        parent's times its own: by position for a first child, by rank for a later one, after the
        siblings before it missed (`best_tree`)."""
        scores = self._copies[kind]
        g = proposal if trees else proposal.first_branch()
        parents = g.parent_list()
        rates = scores.rates_for(g.match_len)
        values: list[float] = []
        missed: dict[int, float] = {}  # per parent: the chance all its children so far were wrong
        for parent, depth, rank in zip(parents, depths(parents), ranks(parents), strict=True):
            known = scores.rate(rates, depth, rank)
            a = known.mean if known is not None else 0.0
            before = missed.get(parent, 1.0)
            values.append((1.0 if parent == ROOT else values[parent]) * before * a)
            missed[parent] = before * (1.0 - a)
        order = sorted(range(len(values)), key=lambda i: (-values[i], i))[: self._copy_reach(draft_room)]
        m, rate = best_tree([values[i] for i in order], self._cost(DrafterKind.NGRAM, forced), base=forced + 1)
        return m, rate, tuple(sorted(order[:m])) if trees else None

    @property
    def longest_draft(self) -> int:
        """The longest draft this controller may ask for, so the longest proposal worth making: a
        copy is never verified past `_copy_reach`, and proposing 255 tokens to keep 16 costs every
        round a longer lookup (and, under a constraint, a grammar walk per token)."""
        return max(self.longest_model_draft, self._copy_reach(self.longest_copy))

    def _copy_reach(self, longest: int) -> int:
        """The most tokens a copy may draft this round: within `longest`, the controller's cap, and the
        passes the curve has timed (every length up to LONGEST_DENSE_DRAFT + 1 is, once calibrated)."""
        return min(longest, self.longest_copy, max(self.costs.reach(), LONGEST_DENSE_DRAFT + 1) - 1)

    def _trees_now(self, kind: DrafterKind) -> bool:
        """Whether this round's `kind` draft may be a tree (asked once per round)."""
        return self.trees and self._gates[kind].allows()

    def fixed_k(self, kind: DrafterKind, match_len: int = 0) -> int:
        """The draft length this controller would choose for `kind` from what it believes now (its
        acceptance estimates and the cost curve), for an engine that drafts the same K every round
        (vLLM's `num_speculative_tokens`); for n-gram lookup, after a match of `match_len` tokens.
        0 when drafting with `kind` does not pay here."""
        if kind == DrafterKind.MODEL:
            return self._model_option(RoundContext(None, True, self.longest_model_draft))[0]
        longest = self._copy_reach(self.longest_copy)
        proposal = Draft(ids=[0] * longest, match_len=match_len)  # a chain: only its length is read
        return self._copy_option(DrafterKind.NGRAM, proposal, longest, trees=False)[0]

    def may_use(self, kind: DrafterKind) -> bool:
        if kind == DrafterKind.MODEL:
            return kind in self.allowed and self._model_could_pay()
        return kind in self.allowed

    def _model_could_pay(self) -> bool:
        return best_k([self.BEST_CASE] * self.longest_model_draft, self._cost(DrafterKind.MODEL))[0] > 0

    def _best_case_rate(self) -> float:
        return best_k([self.BEST_CASE] * self.longest_model_draft, self._cost(DrafterKind.MODEL))[1]

    def _catch_up_pays(self, ctx: RoundContext, model_rate: float) -> bool:
        """Whether the draft model's catch-up (reading the text it has not seen, at first the
        prompt's window) is worth what drafting at `model_rate` would save over the rest of the
        reply, against the rate decoding has without it (plain steps, n-gram copies: the live
        rate). The rest of the reply is unknown: it is taken to be as long as the reply so far
        (at least HORIZON tokens), within what max_tokens leaves, so a reply that ends early
        seldom pays for a read it could not use. A catch-up of a few tokens is routine (the
        rounds since the model last drafted) and is priced in its draft step."""
        if ctx.model_behind <= ROUTINE_CATCH_UP:
            return True
        without = max(1.0 / (self.costs.verify(1) + self.costs.ngram_lookup), self._measured)
        saved = 1.0 / without - 1.0 / model_rate  # seconds per token
        rest = min(ctx.draft_room + 1, max(ctx.emitted, self.HORIZON))
        return saved > 0 and self.costs.read(ctx.model_behind) <= saved * rest

    def plan(self, ctx: RoundContext) -> Plan:
        copies = {kind: p for kind, p in ctx.proposals().items() if kind in self.allowed}
        for kind, proposal in copies.items():
            scores = self._copies[kind]
            scores.score(ctx.context)
            if proposal.ids:  # the whole trie is scored against the text, drafted or not
                scores.remember(len(ctx.context), proposal if self.trees else proposal.first_branch())
        # A draft after forced text is weighed at what it adds to that pass, against that pass's rate.
        plain_rate = (ctx.forced + 1) / (self.costs.verify(ctx.forced + 1) + self.costs.ngram_lookup)
        options: dict[DrafterKind | None, tuple[int, float, tuple[int, ...] | None]] = {None: (0, plain_rate, None)}
        if ctx.has_model and DrafterKind.MODEL in self.allowed:
            k, rate = self._model_option(ctx, ctx.forced)
            alone = self._model_option(ctx)[1] if ctx.forced else rate  # its rate of its own tokens
            options[DrafterKind.MODEL] = (k if self._catch_up_pays(ctx, alone) else 0, rate, None)
        for kind, proposal in copies.items():
            if proposal.ids:
                options[kind] = self._copy_option(kind, proposal, ctx.draft_room, self._trees_now(kind), ctx.forced)
        self._probe.idle += 1
        which = max(options, key=lambda d: options[d][1] if options[d][0] or d is None else 0.0)
        k, rate, nodes = options[which]
        self._probing = self._exploring = False
        if k == 0:
            which = None
            if (
                DrafterKind.MODEL in options
                and ctx.draft_room > 0
                and self._probe.due(self._probe_cap())
                and self._model_could_pay()
                and self._catch_up_pays(ctx, self._best_case_rate())
            ):
                which, k, self._probing = DrafterKind.MODEL, min(2, ctx.draft_room), True
            elif self.costs.provisional:
                which, k, rate = self._explore(copies, options, ctx)
                self._exploring = k > 0
        elif which == DrafterKind.MODEL:
            self._model_rounds += 1
            if self._model_rounds % self.STRETCH == 0:
                k = min(k + 1, self.longest_model_draft, ctx.draft_room)
        if which == DrafterKind.MODEL:
            self._probe.used(self._probing)
        state = ControllerState(
            "auto",
            k,
            which,
            self._first_acceptance(which, ctx),
            rate / plain_rate,
            self._measured * self.costs.verify(1),
        )
        if which != DrafterKind.MODEL:
            return Plan(which, k, state=state, nodes=nodes if which is not None else None)
        rules = _ModelRound(self.costs, self._model, rate)
        trees = not self._probing and self._trees_now(DrafterKind.MODEL)
        return Plan(which, k, rules.stop, state, rules.branch if trees else None)

    def _explore(
        self,
        copies: dict[DrafterKind, Draft],
        options: dict[DrafterKind | None, tuple[int, float, tuple[int, ...] | None]],
        ctx: RoundContext,
    ) -> tuple[DrafterKind | None, int, float]:
        """While the cost curve is provisional, a round the curve gives to plain decoding: the first
        branch of the likeliest copy, as far as `Exploration` allows (drafter, k, and its rate
        priced by the curve as if none of it were taken), or plain decoding (None, 0, its rate)."""
        plain = (None, 0, options[None][1])
        candidates = [kind for kind, proposal in copies.items() if proposal.ids]
        if not candidates:
            return plain
        kind = max(candidates, key=lambda c: options[c][1])
        longest = min(len(copies[kind].first_branch().ids), self._copy_reach(ctx.draft_room))
        k = self._exploration.length(longest, self._one_pass())
        if not k:
            return plain
        return kind, k, (ctx.forced + 1) / self._cost(kind, ctx.forced)(k)

    def _probe_cap(self) -> int:
        """Rounds between model probes at which their extra time is PROBE_BUDGET of plain decoding."""
        c = self.costs
        extra = 2 * (c.draft_step if c.draft_step is not None else c.verify(1)) + c.verify(3) - c.verify(1)
        return max(Probe.BASE, min(Probe.MAX, int(extra / (self.PROBE_BUDGET * c.verify(1)))))

    def _first_acceptance(self, which: DrafterKind | None, ctx: RoundContext) -> float:
        if which == DrafterKind.MODEL:
            return self._model.positions[0].mean
        if which is not None:
            proposal = ctx.proposals()[which]  # a copying drafter is chosen only for its proposal
            return self._copies[which].rates_for(proposal.match_len)[0].mean
        return 0.0

    # -- learning -------------------------------------------------------------------------

    def observe(self, step: Step, draft: Draft) -> None:
        """Learn from a round. Its timings are already in the cost curve (the decoder feeds it
        every pass, whatever the policy). The live rate counts every token the pass gave, forced
        ones too (what decoding gets without the draft model), over the pass's seconds (on a
        steady curve, over the seconds the curve gives it: `_priced`); the drafter's scores learn
        from the part it drafted (`draft` is that part)."""
        tokens = step.accepted + 1
        seconds = self._priced(step) if self.costs.steady else step.draft_s + step.verify_s
        spent = step.drafted + 1 if self.costs.steady else seconds  # as `_one_pass` counts
        self._exploration.observe(spent, tokens, self._one_pass(), self._exploring)
        self._measured = (
            tokens / seconds if not self._measured else self._measured + 0.1 * (tokens / seconds - self._measured)
        )
        step = step.drafted_part()
        parents, path = step.tree()
        if step.drafter is not None:
            self._gates[DrafterKind(step.drafter)].observe(parents, path, self.costs, self._measured)
        if step.drafter != DrafterKind.MODEL:  # copying proposals are scored against the text in plan()
            return
        self._check_surprise(step)
        self._model.learn(parents, path, draft.confidence)

    def _one_pass(self) -> float:
        """What exploration counts a one-token pass as: its seconds now, or on a steady curve
        (`costs.steady`) 1, each pass counted as the tokens it verifies (the most it can cost in
        one-token passes), so that the explorations of a call follow its tokens, not its seconds."""
        return 1.0 if self.costs.steady else self.costs.verify(1)

    def _priced(self, step: Step) -> float:
        """The seconds the curve gives a round like `step` (a steady curve's stand-in for its timing)."""
        kind = DrafterKind(step.drafter) if step.drafter is not None else DrafterKind.NGRAM  # plain: a lookup
        return self._cost(kind, step.forced)(step.drafted - step.forced)

    def _check_surprise(self, step: Step) -> None:
        """After fully accepted probes in a row: was that unlikely under the estimates? Then forget them."""
        if not self._probing or step.accepted < step.drafted:
            self._streak = 1.0
            return
        for r in self._model.positions[: step.drafted]:
            self._streak *= r.mean
        if self._streak < self.SURPRISE:
            self._streak = 1.0
            self._model.forget_positions()
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

    def __init__(self, costs: CostModel, model: ModelScores, rate: float):
        self._costs, self._model, self._rate = costs, model, rate
        self._survive = 1.0  # P(the chain drafted so far survives)
        self._reach: list[float] = []  # per chain position: P(it is reached)

    def _pays(self, value: float, nodes: int) -> bool:
        verify = self._costs.verify_at_least
        longest = LONGEST_DENSE_DRAFT + 1
        return value >= self._rate * (verify(nodes + 2, longest) - verify(nodes + 1, longest))

    def stop(self, j: int, confidence: float) -> bool:
        a = self._model.calibrated(confidence)
        if j and not self._pays(self._survive * a, j):
            return True
        self._reach.append(self._survive)
        self._survive *= a
        return False

    def branch(self, confidence: float, position: int, nodes: int) -> bool:
        return self._pays(self._reach[position] * self._model.calibrated(confidence), nodes)


def make_policy(choice: PolicyChoice, drafter: DraftChoice, costs: CostModel) -> Policy:
    """The policy the user's choice names."""
    if choice.cost_aware:
        return AutoK(drafter, costs, trees=choice.policy == "auto")
    if choice.policy == "heuristic":
        return HeuristicK(drafter, costs=costs)
    return FixedK(choice.fixed_len, drafter, costs)
