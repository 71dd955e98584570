"""Drafters: cheap proposals of the next few tokens, for the target to verify in one pass.

Every draft source sits behind the same few calls (`Drafter`, as llama.cpp's common speculative
layer does it), so the decode loop never asks which one it has:
- `begin(prompt)` when a generation starts (the draft model reads the prompt alongside the target);
- `propose(context, k, params, rng, stop)` up to k tokens after the committed text;
- `accept(n_committed)` once the target has verified them: forget everything past the committed
  text (the draft model drops rejected tokens from its cache).
A drafter that is `free` costs nothing to ask, so the decoder asks it before planning and the
policy sees its proposal (its length, how far its match reaches) when choosing K.

Two kinds, both with the same result type (`Draft`):
- `ModelDrafter` runs a small model of the same vocabulary; its cache is kept in step with the
  committed text by `sync_cache`, so rolled-back tokens are dropped before the next round.
- `NgramDrafter` (prompt lookup) copies what followed the most recent earlier occurrence of the
  text's last few tokens. It costs nothing to run, and how far the match reaches back
  (`match_len`) tells the controller how much of the copy is likely to survive.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Protocol, Sequence

import numpy as np

from edgespec.backends.base import Backend, common_prefix, sync_cache
from edgespec.decoding.sampling import Dist, SamplingParams, softmax_max, warp
from edgespec.decoding.tree import chain, subtree

StopRule = Callable[[int, float], bool]  # (tokens drafted so far, confidence of the next) -> stop


class DrafterKind(str, Enum):
    """The kinds of draft source; a policy learns each one's acceptance apart."""

    MODEL = "model"
    NGRAM = "ngram"


class DraftChoice(str, Enum):
    """The user's choice of drafters (--draft): which kinds a generation may use."""

    AUTO = "auto"  # either, chosen per round
    MODEL = "model"
    NGRAM = "ngram"
    NONE = "none"  # plain decoding

    @property
    def kinds(self) -> frozenset[DrafterKind]:
        if self is DraftChoice.AUTO:
            return frozenset(DrafterKind)
        return frozenset() if self is DraftChoice.NONE else frozenset({DrafterKind(self.value)})


@dataclass(slots=True)
class Draft:
    """A proposed tree of tokens (`tree.py`), nodes in drafting order; `dists[i]` is the warped q
    node i was sampled from (None: point mass). `parents` None is a chain, the common case."""

    ids: list[int] = field(default_factory=list)
    dists: list[Dist | None] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)  # drafter's probability of each token
    match_len: int = 0  # n-gram drafter: length of the matched suffix
    catch_up_s: float = 0.0  # model drafter: seconds spent reading committed text it had not seen
    parents: list[int] | None = None  # each node's parent (tree.ROOT for the root's children)

    def parent_list(self) -> list[int]:
        return chain(len(self.ids)) if self.parents is None else self.parents

    def head(self, k: int) -> Draft:
        """The first k nodes (a tree too: parents come before their children)."""
        return self.subtree(range(min(k, len(self.ids))))

    def subtree(self, keep: Sequence[int]) -> Draft:
        """The nodes `keep` (ascending, each with its parent: of a chain, a prefix), renumbered."""
        return Draft([self.ids[i] for i in keep], [self.dists[i] for i in keep],
                     [self.confidence[i] for i in keep], self.match_len, self.catch_up_s,
                     None if self.parents is None else subtree(self.parents, keep))


class Drafter(Protocol):
    kind: DrafterKind
    free: bool  # proposing costs nothing: the decoder asks before planning, for the policy to see

    def begin(self, prompt: Sequence[int]) -> None:
        """A generation starts after `prompt`."""
        ...

    def propose(self, context: Sequence[int], k: int, params: SamplingParams, rng: np.random.Generator,
                stop: StopRule | None = None) -> Draft:
        """Up to k tokens after `context`; `stop(j, confidence)` may end the draft before token j+1."""
        ...

    def accept(self, n_committed: int) -> None:
        """The target verified the proposal: the committed text is now `n_committed` tokens long."""
        ...


class ModelDrafter:
    """A small draft model, run autoregressively for up to k tokens."""

    kind = DrafterKind.MODEL
    free = False

    def __init__(self, backend: Backend):
        self.backend = backend

    def propose(
        self,
        context: Sequence[int],
        k: int,
        params: SamplingParams,
        rng: np.random.Generator,
        stop: StopRule | None = None,
    ) -> Draft:
        """Draft up to k tokens after `context`. `stop(j, confidence)` may end the draft before
        token j+1 (j >= 1 drafted so far) when its drafter probability makes it unlikely to survive."""
        out = Draft()
        if k <= 0:
            return out
        # After plain or n-gram rounds the draft model is behind the text; reading it back is a
        # prefill, not a draft step, and is reported apart so the cost model is not misled.
        behind = len(context) - common_prefix(self.backend.cached, context)
        t0 = time.perf_counter()
        logits = sync_cache(self.backend, context, 1)[0]
        if behind > 2:  # drafting every round leaves one or two tokens to read
            out.catch_up_s = time.perf_counter() - t0
        while True:
            if params.greedy:
                token, conf = softmax_max(logits)
                dist = None
            else:
                dist = warp(logits, params)
                token = dist.sample(rng)
                conf = dist.prob(token)
            if out.ids and stop is not None and stop(len(out.ids), conf):
                break
            out.ids.append(token)
            out.dists.append(dist)
            out.confidence.append(conf)
            if len(out.ids) == k:
                break
            logits = self.backend.eval([token], 1)[0]
        return out

    def begin(self, prompt: Sequence[int]) -> None:
        """Read the prompt alongside the target's prefill, so the first draft has no catch-up."""
        sync_cache(self.backend, prompt, 1)

    def accept(self, n_committed: int) -> None:
        """Drop drafted tokens past the committed text (the rejected ones)."""
        self.backend.truncate(min(n_committed, len(self.backend.cached)))


class NgramDrafter:
    """Prompt lookup over the committed text (prompt and output so far).

    An index from every n-gram (min_n..max_n tokens) to the last position it ended at is updated
    incrementally as tokens are committed, so a lookup costs O(max_n), not a scan of the context.
    A context that is not an extension of the indexed one (a new conversation) rebuilds the index.
    """

    kind = DrafterKind.NGRAM
    free = True
    # how far back a match is measured; beyond this, longer matches do not predict acceptance better
    MAX_MATCH = 32

    def __init__(self, min_n: int = 1, max_n: int = 4):
        self.min_n, self.max_n = min_n, max_n
        self._tokens: list[int] = []
        self._last_end: dict[tuple[int, ...], int] = {}
        self._source: Sequence[int] | None = None  # the context list indexed last

    def _index(self, context: Sequence[int]) -> None:
        seen = len(self._tokens)
        # Within one generation the decoder only appends to the same context list, so the prefix
        # is compared (an O(n) copy) only when a different list arrives, i.e. a new generation.
        if context is not self._source and (seen > len(context) or list(context[:seen]) != self._tokens):
            self._tokens, self._last_end, seen = [], {}, 0
        self._source = context
        self._tokens.extend(context[seen:])
        toks = self._tokens
        # An n-gram is indexed once the token after it is known, so a lookup never finds the
        # context's own suffix, only an earlier occurrence with a continuation.
        for end in range(max(seen - 1, 0), len(toks) - 1):
            for n in range(self.min_n, min(self.max_n, end + 1) + 1):
                self._last_end[tuple(toks[end - n + 1 : end + 1])] = end

    def begin(self, prompt: Sequence[int]) -> None:
        pass  # the index catches up with the committed text at each proposal

    def accept(self, n_committed: int) -> None:
        pass

    def propose(self, context: Sequence[int], k: int, params: SamplingParams | None = None,
                rng: np.random.Generator | None = None, stop: StopRule | None = None) -> Draft:
        """Up to k tokens that followed the most recent match of the longest suffix (a copy has no
        confidence to stop on, so `stop` does not apply; nor do `params`: a copy is a point mass)."""
        self._index(context)
        toks = self._tokens
        for n in range(min(self.max_n, len(toks) - 1), self.min_n - 1, -1):
            end = self._last_end.get(tuple(toks[-n:]))
            if end is None:
                continue
            ids = toks[end + 1 : end + 1 + k]
            return Draft(ids=ids, dists=[None] * len(ids), confidence=[1.0] * len(ids),
                         match_len=self._match_len(end))
        return Draft()

    def _match_len(self, end: int) -> int:
        toks, last = self._tokens, len(self._tokens) - 1
        n = 0
        while n < self.MAX_MATCH and end - n >= 0 and toks[end - n] == toks[last - n]:
            n += 1
        return n
