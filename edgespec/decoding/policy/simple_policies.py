"""The two baseline K policies every tool offers: a fixed K, and transformers' +2/-1 schedule."""

from __future__ import annotations

from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.drafters import Draft, DraftChoice, DrafterKind
from edgespec.decoding.events import ControllerState, Step
from edgespec.decoding.policy.plan import Plan, RoundContext
from edgespec.decoding.tree import first_branch

_AMONG_EQUALS = {DrafterKind.REPLACED: 2, DrafterKind.NGRAM: 1}  # which copy `_preferred` takes at a tie


def _preferred(allowed: frozenset[DrafterKind], ctx: RoundContext) -> DrafterKind | None:
    """The drafter a simple policy uses this round: the model if allowed and loaded, else the copying
    drafter whose proposal reaches furthest (its chain, then its match; among equals the reply a
    regenerate replaces first, then the text's own copies)."""
    if DrafterKind.MODEL in allowed and ctx.has_model:
        return DrafterKind.MODEL
    offered = [(kind, p) for kind, p in ctx.proposals().items() if kind in allowed and p.ids]
    if not offered:
        return None
    return max(offered, key=lambda o: (_chain_len(o[1]), o[1].match_len, _AMONG_EQUALS.get(o[0], 0)))[0]


def _chain_len(proposal: Draft) -> int:
    return len(first_branch(proposal.parent_list()))


def _capped(drafter: DrafterKind | None, k: int, ctx: RoundContext) -> int:
    k = min(k, ctx.draft_room)
    proposal = ctx.proposals().get(drafter) if drafter is not None else None
    if proposal is not None:
        return min(k, _chain_len(proposal))  # these policies draft chains
    return k


class FixedK:
    """Always draft `draft_len` tokens (the n-gram drafter drafts at most what it found). `costs`:
    the curve its passes refine (it reads none; by default one of its own)."""

    def __init__(self, draft_len: int, drafter: DraftChoice | str, costs: CostModel | None = None):
        self.draft_len = self.longest_draft = draft_len
        self.allowed = DraftChoice(drafter).kinds
        self.costs = costs if costs is not None else CostModel()

    def plan(self, ctx: RoundContext) -> Plan:
        which = _preferred(self.allowed, ctx) if self.draft_len > 0 else None
        k = _capped(which, self.draft_len, ctx) if which else 0
        return Plan(which, k, state=ControllerState("fixed", k, which, 0.0, 0.0, 0.0))

    def observe(self, step: Step, draft: Draft) -> None:
        pass

    def may_use(self, kind: DrafterKind) -> bool:
        return self.draft_len > 0 and kind in self.allowed


class HeuristicK:
    """transformers' "heuristic" schedule: K += 2 after a round with every draft accepted, else
    K -= 1 (at least 1). It starts at 5 and is capped at 16 here. `costs` as for FixedK."""

    def __init__(self, drafter: DraftChoice | str, start: int = 5, cap: int = 16, costs: CostModel | None = None):
        self.draft_len, self.longest_draft, self.allowed = start, cap, DraftChoice(drafter).kinds
        self.costs = costs if costs is not None else CostModel()

    def plan(self, ctx: RoundContext) -> Plan:
        which = _preferred(self.allowed, ctx)
        k = _capped(which, self.draft_len, ctx) if which else 0
        return Plan(which, k, state=ControllerState("heuristic", k, which, 0.0, 0.0, 0.0))

    def observe(self, step: Step, draft: Draft) -> None:
        step = step.drafted_part()  # forced tokens say nothing of how long a draft survives
        if step.drafted:
            all_accepted = step.accepted == step.drafted
            self.draft_len = min(self.longest_draft, self.draft_len + 2) if all_accepted else max(1, self.draft_len - 1)

    def may_use(self, kind: DrafterKind) -> bool:
        return kind in self.allowed
