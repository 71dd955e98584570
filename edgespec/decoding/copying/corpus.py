"""Copies from text other than the call's own: earlier replies, history, the repository (`Drafter`).

Prompt lookup (`ngram.py`) copies from the prompt and the reply so far. A coding user's
calls repeat far more than that: the same files are asked about again, a reply is regenerated, an
agent retries after an edit failed to apply and writes nearly the same text, the same edit is made
to file after file. Each such corpus is indexed once (`suffix_index.py`) and drafted from here, as
its own drafter kind, so the controller learns and prices each source apart and a source that does
not pay on a text is not drafted while another does.

A proposal is the index's frequency-scored trie of what followed the longest match of the text's
end (SuffixDecoding): point masses, like prompt lookup's, so sampled output keeps the target's
distribution and greedy output is the target's own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from edgespec.decoding.constraint import Constraint
from edgespec.decoding.drafters import BranchRule, Draft, DrafterKind, StopRule, allowed_chain
from edgespec.decoding.sampling import SamplingParams


class Corpus(Protocol):
    """An index of earlier text that proposes what followed the context's end (`suffix_index.py`)."""

    def propose(self, context: Sequence[int], k: int, max_nodes: int = ...) -> Draft: ...


class CorpusDrafter:
    """A copying drafter of kind `kind` over `corpus`, for one generation (the engine makes one per
    call: the corpus it drafts from, the earlier replies to this prompt say, depends on the call)."""

    free = True
    MAX_MATCH = 32  # the context's last tokens a lookup matches at most, as NgramDrafter.MAX_MATCH
    # The most nodes a proposal holds (the policy verifies some of them), and at least as many as
    # the draft the policy asks for, so a long copy's first branch can be whole.
    MAX_NODES = 48

    def __init__(self, kind: DrafterKind, corpus: Corpus):
        self.kind, self.corpus = kind, corpus
        self.lookups, self.busy_s = 0, 0.0  # what its lookups cost this call (bench and --stats show it)

    def begin(self, prompt: Sequence[int]) -> None:
        pass  # the corpus was indexed before the call

    def behind(self, context: Sequence[int]) -> int:
        return 0

    def accept(self, n_committed: int) -> None:
        pass

    def propose(
        self,
        context: Sequence[int],
        k: int,
        params: SamplingParams | None = None,
        rng: np.random.Generator | None = None,
        stop: StopRule | None = None,
        branch: BranchRule | None = None,
        constraint: Constraint | None = None,
    ) -> Draft:
        """The trie of what followed the longest match, each copy up to k tokens (`stop`, `branch`
        and `params` do not apply: a copy has no confidence of its own and is a point mass). Under
        `constraint`: its first branch, up to its first token the constraint forbids."""
        if k <= 0:
            return Draft()
        start = time.perf_counter()
        draft = self.corpus.propose(context[-self.MAX_MATCH :], k, max_nodes=max(self.MAX_NODES, k))
        self.lookups += 1
        self.busy_s += time.perf_counter() - start
        return draft if constraint is None else allowed_chain(draft, constraint)
