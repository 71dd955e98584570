"""What a K policy sees and decides each round, and the interface every policy has.

The decoder builds a `RoundContext` before each target pass (what the free drafters propose, which
drafters are loaded, how many tokens are left), asks the policy for a `Plan`, feeds the pass's
timings into the policy's cost curve, and reports the outcome back with `observe`. `PolicyChoice` is
the user's choice of policy, parsed once at the edge.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.drafters import LOOKUPS, BranchRule, Draft, DrafterKind, StopRule
from edgespec.decoding.events import ControllerState, Step
from edgespec.util.errors import SettingError


@dataclass(frozen=True, slots=True)
class Plan:
    """One round: which drafter proposes, how many tokens at most, when the draft model stops and
    branches, and which nodes of a free drafter's proposal are verified."""

    drafter: DrafterKind | None  # None: plain decoding
    draft_len: int  # tokens to verify at most (the nodes of a tree; a draft model's chain length)
    stop: StopRule | None = None
    state: ControllerState | None = None
    branch: BranchRule | None = None  # None: the draft model drafts a chain
    nodes: tuple[int, ...] | None = None  # a free proposal's nodes (ascending); None: its first branch


@dataclass(frozen=True, slots=True)
class RoundContext:
    """What a policy may look at before the round: the free proposals (the n-gram lookup's, and the
    other copying sources'), the budget, and the committed text (prompt and output so far,
    read-only), against which earlier proposals can be scored whether or not they were drafted."""

    ngram: Draft | None  # None when the n-gram drafter is off
    has_model: bool  # a draft model is loaded and allowed
    draft_room: int  # the most tokens this round may draft: more would overrun max_tokens or the context
    context: Sequence[int] = ()
    model_behind: int = 0  # tokens the draft model must read before its next draft (its catch-up)
    emitted: int = 0  # tokens this reply has emitted so far
    forced: int = 0  # tokens a constraint forced before this draft, verified in the same pass
    # the other copying drafters' proposals (history, retries, the repository), by kind, where loaded
    lookups: Mapping[DrafterKind, Draft] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        free: Mapping[DrafterKind, Draft],
        loaded: Collection[DrafterKind],
        draft_room: int,
        context: Sequence[int],
        model_behind: int = 0,
        emitted: int = 0,
        forced: int = 0,
    ) -> RoundContext:
        """From what the decoder has: the free drafters' proposals, the kinds loaded, and how far
        behind the text the draft model is."""
        ngram = free.get(DrafterKind.NGRAM, Draft()) if DrafterKind.NGRAM in loaded else None
        lookups = {kind: free.get(kind, Draft()) for kind in LOOKUPS - {DrafterKind.NGRAM} if kind in loaded}
        return cls(ngram, DrafterKind.MODEL in loaded, draft_room, context, model_behind, emitted, forced, lookups)

    def proposals(self) -> dict[DrafterKind, Draft]:
        """Every loaded copying drafter's proposal (possibly empty), by kind."""
        out = dict(self.lookups)
        if self.ngram is not None:
            out[DrafterKind.NGRAM] = self.ngram
        return out


class Policy(Protocol):
    costs: CostModel  # the cost curve: the decoder feeds it every pass's timings, whether the policy reads it or not

    @property
    def longest_draft(self) -> int:
        """The longest draft this policy may ask for now (bounds what the free drafters propose)."""
        ...

    def plan(self, ctx: RoundContext) -> Plan: ...

    def observe(self, step: Step, draft: Draft) -> None:
        """Learn from a round: `step` the whole pass (with `step.forced` tokens a constraint forced
        before the draft), `draft` what the drafter proposed after them."""
        ...

    def may_use(self, kind: DrafterKind) -> bool:
        """Whether this drafter may be asked to draft in this generation (a draft model then
        reads the prompt alongside the target)."""
        ...


@dataclass(frozen=True, slots=True)
class PolicyChoice:
    """How the draft length is chosen: the cost-aware controller ("auto", drafting trees where
    they pay; "auto-chain", chains only), transformers' +2/-1 schedule ("heuristic"), or a fixed K
    ("fixed", K = 0 is plain decoding). Parsed once, where
    the user's text comes in (`parse`)."""

    policy: Literal["auto", "auto-chain", "heuristic", "fixed"]
    fixed_len: int = 0  # the "fixed" policy's draft length (0: plain decoding)

    LONGEST_FIXED = 64  # a longer fixed draft only wastes verification
    # the controller's policies: they need the measured cost curve
    COST_AWARE: ClassVar[tuple[Literal["auto", "auto-chain"], ...]] = ("auto", "auto-chain")

    @property
    def cost_aware(self) -> bool:
        return self.policy in self.COST_AWARE

    @classmethod
    def parse(cls, text: str) -> PolicyChoice:
        """ "auto", "auto-chain", "heuristic" or a whole number 0..LONGEST_FIXED; anything else is a SettingError."""
        text = text.strip()
        if text in cls.COST_AWARE:
            return cls(text)
        if text == "heuristic":
            return cls("heuristic")
        try:
            n = int(text)
        except ValueError:
            raise SettingError(f"{text!r} is not auto, auto-chain, heuristic or a whole number") from None
        if not 0 <= n <= cls.LONGEST_FIXED:
            raise SettingError(f"{n} is outside 0..{cls.LONGEST_FIXED}")
        return cls("fixed", n)

    def __str__(self) -> str:
        return str(self.fixed_len) if self.policy == "fixed" else self.policy
