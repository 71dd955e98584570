"""What keeps the auto policy (`controller.py`) measuring the choices its estimates would stop it
from making, so that it notices when the text changes or its cost curve is wrong:

- `TreeGate`: whether one drafter's trees have paid, measured on its own tree rounds; a drafter
  whose trees did not drafts chains, with a tree every EXPLORE-th round.
- `Probe`: exponential back-off for trying the draft model while the cost model rejects it;
- `Exploration`: copies verified although the cost curve advises against them, while the curve is
  provisional, within a budget of decoding time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.tree import first_branch


class TreeGate:
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
class Probe:
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


class Exploration:
    """Passes the controller verifies although the cost curve advises against them, while the curve
    is provisional (`CostModel.provisional`), so that a wrong curve shows itself.

    A curve measured on a busy machine prices every multi-token pass too high; the controller then
    never runs one, and live passes, which correct the sizes they run, never run at those sizes.
    So now and then, when a copying drafter has a candidate, its first branch is verified anyway.
    What such a pass loses is measured, not predicted: its seconds beyond what plain decoding
    would have taken for the tokens it gave (negative when the copy held and it gained). The
    losses stay within BUDGET of decoding's time: an exploration goes ahead only when the losses so
    far plus its own worst case, priced as if batching gained nothing (k more one-token passes),
    fit in BUDGET of the time decoded. Its length is the largest power of two that fits and the
    candidate holds, so the explored sizes are few and each gathers the timings a quiet figure
    needs (`quiet.MIN_TIMINGS`). On a steady curve the controller counts in one-token passes,
    not seconds (`AutoK._one_pass`), each pass priced at that worst case."""

    BUDGET = 0.02

    def __init__(self) -> None:
        self.decoding_s = 0.0  # every observed pass's time, explorations included
        self.lost_s = 0.0  # explorations' time beyond plain decoding's for the same tokens

    def length(self, candidate: int, one_token_s: float) -> int:
        """Tokens to explore of a candidate of `candidate` tokens, when one-token passes cost
        `one_token_s` now; 0: none fits the budget."""
        room = (self.BUDGET * self.decoding_s - self.lost_s) / one_token_s
        fits = min(candidate, int(room)) if room >= 1 else 0
        return 1 << (fits.bit_length() - 1) if fits else 0

    def observe(self, seconds: float, tokens: int, one_token_s: float, explored: bool) -> None:
        """A round that took `seconds` and gave `tokens`; `explored`: it was an exploration."""
        self.decoding_s += seconds
        if explored:
            self.lost_s += seconds - tokens * one_token_s
