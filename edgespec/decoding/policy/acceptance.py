"""How often the target takes what each drafter proposes: the estimates the auto policy
(`controller.py`) weighs every round, learnt online with forgetting so they follow the text.

- `Rate`: one Bernoulli rate, a discounted Beta posterior mean.
- `ModelScores`: the draft model's, per chain position and per confidence bin, learnt from the
  rounds it drafted.
- `NgramScores`: a copying drafter's (`drafters.LOOKUPS`), per match-length bucket and position,
  learnt from every proposal, drafted or not; one per source, each from its own priors
  (`COPY_PRIORS`).
"""

from __future__ import annotations

from collections.abc import Sequence

from edgespec.decoding.drafters import Draft, DrafterKind
from edgespec.decoding.tree import ROOT, children, first_branch


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


class ModelScores:
    """The draft model's acceptance: per position of its chain (the chance the target takes the
    i-th token, given the ones before it survived), and per confidence bin (how often the target
    takes a token the draft model gave that probability, a chain token or an alternative)."""

    def __init__(self, longest: int):
        self.longest = longest  # the longest chain drafted: the positions scored
        self.positions = self._prior()
        self._confidence = [Rate(0.3 + 0.6 * i / len(_CONF_BINS)) for i in range(len(_CONF_BINS) + 1)]

    def _prior(self) -> list[Rate]:
        """A draft model of the same family agrees often."""
        return [Rate(0.7) for _ in range(self.longest)]

    def forget_positions(self) -> None:
        """Back to the priors, when the text has changed under them."""
        self.positions = self._prior()

    def calibrated(self, confidence: float) -> float:
        """How often the target takes a token the draft model gave this probability."""
        return self._confidence[_bucket(confidence, _CONF_BINS)].mean

    def learn(self, parents: Sequence[int], path: Sequence[int], confidence: Sequence[float]) -> None:
        """A round whose draft was `parents` (the draft model's confidence per node) and whose
        accepted nodes were `path`. Every node whose parent was reached was tried: a hit if the
        target took it."""
        position = {node: i for i, node in enumerate(first_branch(parents))}
        accepted = set(path)
        for node, parent in enumerate(parents):
            if parent != ROOT and parent not in accepted:
                continue
            hit = node in accepted
            i = position.get(node)
            if i is not None and i < len(self.positions):
                self.positions[i].update(hit)
            self._confidence[_bucket(confidence[node], _CONF_BINS)].update(hit)


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
    # A proposal that matched no token (match_len 0: a value's start drafted from the prompt's text,
    # `source_copy.py`) has its own rates, from an even prior.
    SOURCE = 0.5
    RISE = 0.85  # the miss rate shrinks by this factor per position
    # ... for this many positions; past them it stays where it got to (a constant hazard): the
    # development set's copies were measured only that far, and a prior that kept shrinking would
    # take a copy that held 16 tokens to hold for ever, and buy the longest pass on no evidence.
    RISE_FOR = 16

    # After the copies before it were wrong, another earlier occurrence's copy is right this often
    # (per place among the siblings: second, third and later); learnt from the text like the rest.
    OTHER = (0.3, 0.2)

    def __init__(self, longest: int, first: Sequence[float] = FIRST):
        """`longest`: the longest copy scored; `first`: the prior of a copy's first token per match
        bucket (FIRST: the text's own copies)."""
        self.rates = [
            [Rate(1.0 - (1.0 - a) * self.RISE ** min(i, self.RISE_FOR), prior_weight=3.0) for i in range(longest)]
            for a in (self.SOURCE, *first)
        ]
        self.others = [Rate(a, prior_weight=3.0) for a in self.OTHER]
        self._pending: list[tuple[int, Draft, list[Rate]]] = []  # (position, proposal, rates)

    def rates_for(self, match_len: int) -> list[Rate]:
        return self.rates[0 if match_len == 0 else 1 + _bucket(match_len, _MATCH_BUCKETS[1:])]

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

    def _walk(
        self, context: Sequence[int], position: int, proposal: Draft, rates: list[Rate]
    ) -> list[tuple[Rate, bool]] | None:
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


# The first-token priors of each copying source, per match bucket (`NgramScores.FIRST`'s shape).
# The same match length predicts less in a corpus of many documents than in the text itself: a short
# match there is mostly chance. An earlier reply to this prompt is copied like the text itself: a
# regeneration matches its whole lead at once and so starts in the longest bucket, while the reply
# before a tool call's next one matches only the chat template's few tokens, and is another call.
# The reply a regenerate replaces is the one text the user asked to have again: it starts highest,
# so the controller drafts from it before any other copy, and learns from there what it is worth.
COPY_PRIORS: dict[DrafterKind, tuple[float, ...]] = {
    DrafterKind.NGRAM: NgramScores.FIRST,
    DrafterKind.RETRY: NgramScores.FIRST,
    DrafterKind.REPLACED: (0.3, 0.5, 0.65, 0.8, 0.9, 0.95, 0.97, 0.99),
    DrafterKind.HISTORY: (0.05, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 0.95),
    DrafterKind.REPOSITORY: (0.05, 0.15, 0.3, 0.45, 0.6, 0.75, 0.9, 0.95),
}
