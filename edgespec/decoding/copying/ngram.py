"""Prompt lookup: drafts copied from the committed text, free to ask (`drafters.Drafter`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgespec.decoding.constraint import Constraint
from edgespec.decoding.copying.source_copy import SourceCopy
from edgespec.decoding.drafters import BranchRule, Draft, DrafterKind, StopRule, allowed_chain
from edgespec.decoding.sampling import SamplingParams
from edgespec.decoding.tree import ROOT


class NgramDrafter:
    """Prompt lookup over the committed text (prompt and output so far).

    An index from every n-gram (min_n..max_n tokens) to the positions it ended at is updated
    incrementally as tokens are committed, so a lookup costs O(max_n), not a scan of the context.
    A context that is not an extension of the indexed one (a new conversation) rebuilds the index.

    A proposal is a trie of what followed the longest suffix that occurred before: its first
    branch is the most recent occurrence's copy (what a chain-only lookup drafts), then the copies
    after the other occurrences, longest match first, each adding the nodes where it parts from
    the ones before. All are point masses: the target chooses among them.

    Under a constraint, at the start of a value, `source_copy` (when given) proposes instead: the
    prompt's next word where the reply's copies of it have got to (`source_copy.py`), which token
    lookup cannot find there.
    """

    kind = DrafterKind.NGRAM
    free = True
    # how far back a match is measured; beyond this, longer matches do not predict acceptance better
    MAX_MATCH = 32
    MAX_MATCHES = 8  # earlier occurrences merged into one proposal
    # The most nodes a proposal holds (the policy verifies some of them): the first branch whole,
    # however long a draft the policy asks for, and the others' nodes up to this many in all.
    MAX_NODES = 48

    def __init__(self, min_n: int = 1, max_n: int = 4, source_copy: SourceCopy | None = None):
        self.min_n, self.max_n = min_n, max_n
        self.source_copy = source_copy  # proposes a value's start under a constraint
        self._tokens: list[int] = []
        self._ends: dict[tuple[int, ...], list[int]] = {}
        self._indexed: Sequence[int] | None = None  # the context list indexed last

    def _index(self, context: Sequence[int]) -> None:
        seen = len(self._tokens)
        # Within one generation the decoder only appends to the same context list, so the prefix
        # is compared (an O(n) copy) only when a different list arrives, i.e. a new generation.
        if context is not self._indexed and (seen > len(context) or list(context[:seen]) != self._tokens):
            self._tokens, self._ends, seen = [], {}, 0
        self._indexed = context
        self._tokens.extend(context[seen:])
        toks = self._tokens
        # An n-gram is indexed once the token after it is known, so a lookup never finds the
        # context's own suffix, only an earlier occurrence with a continuation.
        for end in range(max(seen - 1, 0), len(toks) - 1):
            for n in range(self.min_n, min(self.max_n, end + 1) + 1):
                self._ends.setdefault(tuple(toks[end - n + 1 : end + 1]), []).append(end)

    def begin(self, prompt: Sequence[int]) -> None:
        # the index catches up with the committed text at each proposal
        if self.source_copy is not None:
            self.source_copy.begin(prompt)

    def behind(self, context: Sequence[int]) -> int:
        return 0  # reading the text is the lookup itself

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
        """A trie of what followed earlier occurrences of the longest matching suffix, each copy up
        to k tokens (a copy has no confidence to stop or branch on, so `stop` and `branch` do not
        apply; nor do `params`: a copy is a point mass). Under `constraint`: at a value's start the
        source copy's word if it has one (match_len 0: no token matched), else the most recent copy
        alone, up to its first token the constraint forbids."""
        if constraint is not None:
            start = self.source_copy.propose(context, k, constraint) if self.source_copy is not None else Draft()
            if start.ids:
                return start
            return allowed_chain(self._propose(context, k), constraint)
        return self._propose(context, k)

    def _propose(self, context: Sequence[int], k: int) -> Draft:
        self._index(context)
        toks = self._tokens
        for n in range(min(self.max_n, len(toks) - 1), self.min_n - 1, -1):
            ends = self._ends.get(tuple(toks[-n:]))
            if not ends:
                continue
            latest, earlier = ends[-1], ends[-self.MAX_MATCHES : -1][::-1]
            earlier.sort(key=self._match_len, reverse=True)  # stable: the most recent first among equals
            out = Draft(match_len=self._match_len(latest), parents=[])
            below: dict[tuple[int, int], int] = {}  # (parent, token) -> node
            most = max(self.MAX_NODES, len(toks[latest + 1 : latest + 1 + k]))
            for end in [latest, *earlier]:
                parent = ROOT
                for token in toks[end + 1 : end + 1 + k]:
                    node = below.get((parent, token))
                    if node is None:
                        if len(out.ids) == most:
                            return out
                        node = below[(parent, token)] = out.add(token, parent, None, 1.0)
                    parent = node
            return out
        return Draft()

    def _match_len(self, end: int) -> int:
        toks, last = self._tokens, len(self._tokens) - 1
        n = 0
        while n < self.MAX_MATCH and end - n >= 0 and toks[end - n] == toks[last - n]:
            n += 1
        return n
