"""Drafters: cheap proposals of the next few tokens, for the target to verify in one pass.

Every draft source sits behind the same few calls (`Drafter`, as llama.cpp's common speculative
layer does it), so the decode loop never asks which one it has:
- `begin(prompt)` when a generation starts, once the first token is out (nothing is read then);
- `behind(context)`, the tokens it must read before it can propose (the draft model's catch-up);
- `propose(context, k, params, rng, stop)` up to k tokens after the committed text;
- `accept(n_committed)` once the target has verified them: forget everything past the committed
  text (the draft model drops rejected tokens from its cache).
A drafter that is `free` costs nothing to ask, so the decoder asks it before planning and the
policy sees its proposal (its length, how far its match reaches) when choosing K.

Two kinds, both with the same result type (`Draft`, a tree of tokens; a chain is a tree with one
branch, see `tree.py`):
- `ModelDrafter` runs a small model of the same vocabulary; its cache is kept in step with the
  committed text by `sync_cache`, so rolled-back tokens are dropped before the next round. Its
  chain follows its own first choice; where the policy's `branch` rule says an alternative is
  worth verifying (a low-confidence position, as in EAGLE-2's dynamic tree), its next choices at
  that position hang beside the chosen token as leaves: they come from logits the model computed
  anyway, so they cost no draft step, only verification.
- `NgramDrafter` (prompt lookup) copies what followed earlier occurrences of the text's last few
  tokens, every one of them merged into a trie whose first branch is the most recent match's copy.
  It costs nothing to run, and how far the match reaches back (`match_len`) tells the controller
  how much of the copy is likely to survive.

Under a constraint (`constraint.py`) both draft chains only: the draft model drafts under the
constraint's mask, and an n-gram copy stops at the first token the constraint forbids.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import numpy as np

from edgespec.decoding.backend import Backend, common_prefix, sync_cache
from edgespec.decoding.constraint import Constraint, masked
from edgespec.decoding.sampling import Dist, SamplingParams, softmax_top, warp
from edgespec.decoding.tree import ROOT, chain, first_branch, subtree

# (tokens drafted so far, confidence of the next) -> stop; asked before every token, the first (0) too
StopRule = Callable[[int, float], bool]
# (drafter probability of an alternative beside the chain token at a position (0 for the first), nodes
# drafted so far) -> add it
BranchRule = Callable[[float, int, int], bool]
# (backend, tokens it is about to read) -> tokens it no longer needs to read
ReadHook = Callable[[Backend, Sequence[int]], int]


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
    catch_up_tokens: int = 0  # ... and how many tokens that was
    parents: list[int] | None = None  # each node's parent (tree.ROOT for the root's children)

    def parent_list(self) -> list[int]:
        return chain(len(self.ids)) if self.parents is None else self.parents

    def head(self, k: int) -> Draft:
        """The first k nodes (a tree too: parents come before their children)."""
        return self.subtree(range(min(k, len(self.ids))))

    def first_branch(self) -> Draft:
        """The chain of the drafter's first choices (`tree.first_branch`)."""
        return self if self.parents is None else self.subtree(first_branch(self.parents))

    def add(self, token: int, parent: int, dist: Dist | None, confidence: float) -> int:
        """Append a node under `parent` (ROOT or an earlier node); its index."""
        if self.parents is None:
            self.parents = chain(len(self.ids))
        self.ids.append(token)
        self.parents.append(parent)
        self.dists.append(dist)
        self.confidence.append(confidence)
        return len(self.ids) - 1

    def subtree(self, keep: Sequence[int]) -> Draft:
        """The nodes `keep` (ascending, each with its parent: of a chain, a prefix), renumbered."""
        return Draft(
            [self.ids[i] for i in keep],
            [self.dists[i] for i in keep],
            [self.confidence[i] for i in keep],
            self.match_len,
            self.catch_up_s,
            self.catch_up_tokens,
            None if self.parents is None else subtree(self.parents, keep),
        )


class Drafter(Protocol):
    kind: DrafterKind
    free: bool  # proposing costs nothing: the decoder asks before planning, for the policy to see

    def begin(self, prompt: Sequence[int]) -> None:
        """A generation starts after `prompt` (nothing is read yet)."""
        ...

    def behind(self, context: Sequence[int]) -> int:
        """Tokens it must read before it can propose after `context` (a cost the policy weighs)."""
        ...

    def propose(
        self,
        context: Sequence[int],
        k: int,
        params: SamplingParams,
        rng: np.random.Generator,
        stop: StopRule | None = None,
        branch: BranchRule | None = None,
        constraint: Constraint | None = None,
    ) -> Draft:
        """A tree of up to k tokens deep after `context`; `stop(j, confidence)` may end the draft
        before token j+1, `branch(confidence, position, nodes)` adds an alternative beside the chain's
        token at that position. Under `constraint` (its state: after the committed text) a chain of
        allowed tokens, and the constraint is left in that state."""
        ...

    def accept(self, n_committed: int) -> None:
        """The target verified the proposal: the committed text is now `n_committed` tokens long."""
        ...


class ModelDrafter:
    """A small draft model, run autoregressively for up to k tokens.

    It reads lazily: nothing when a generation starts, so the first token never waits for it, and
    then only when the policy first drafts with it (the decoder tells the policy how far behind it
    is, `behind`, so a short reply need not pay for the reading at all). And it reads a window:
    its view of the text starts at most about `window` tokens before the prompt's end, so a long
    file costs it a bounded read. What it needs to draft the next few tokens is mostly recent
    text; what it would copy from further back, the n-gram drafter finds for free."""

    kind = DrafterKind.MODEL
    free = False
    ALIGN = 64  # view starts are multiples of this, so calls on one file that differ in their last words share it

    def __init__(self, backend: Backend, window: int | None = None, before_read: ReadHook | None = None):
        """`window`: tokens of the prompt's end it reads at most (None: all of it).
        `before_read(backend, tokens)` is called when a generation begins, before the model may
        read anything: the engine loads a saved state of a prefix of its view there (the prompt
        cache), without this module knowing."""
        self.backend, self.window, self.before_read = backend, window, before_read
        self.start = 0  # the view of the text is context[start:]

    ALTERNATIVES = 2  # the most alternatives beside one drafted token (top-3 at that position)
    MAX_NODES = 16  # the most nodes of a tree (its branches stay within llama.cpp's MAX_BRANCHES)

    def propose(
        self,
        context: Sequence[int],
        k: int,
        params: SamplingParams,
        rng: np.random.Generator,
        stop: StopRule | None = None,
        branch: BranchRule | None = None,
        constraint: Constraint | None = None,
    ) -> Draft:
        """Draft a chain of up to k tokens after `context` (under `constraint`: each token chosen
        from the masked logits, the matcher advanced along the chain and rolled back at the end).
        `stop(j, confidence)` is asked before each
        token (j nodes drafted so far, 0 for the first) and may end the chain there when its drafter
        probability makes it unlikely to survive;
        `branch(confidence, position, nodes)`, asked once the chain is drafted for each next choice
        at its positions in turn, adds it as a leaf beside the chain's token there (greedy: the next
        likeliest tokens, point masses; sampled: tokens drawn without replacement, each carrying the
        q it was drawn from). The alternatives are only looked for where one could pay: they share
        the drafted token's leftover probability, 1 - confidence."""
        out = Draft(parents=[])
        if k <= 0:
            return out
        # After plain or n-gram rounds the draft model is behind the text; reading it back is a
        # prefill, not a draft step, and is reported apart so the cost model is not misled.
        view = context[self.start :]
        behind = len(view) - common_prefix(self.backend.cached, view)
        t0 = time.perf_counter()
        logits = sync_cache(self.backend, view, 1)[0]
        if behind > 2:  # drafting every round leaves one or two tokens to read
            out.catch_up_s, out.catch_up_tokens = time.perf_counter() - t0, behind
        # The chain first; alternatives are weighed once it is drafted, position by position, so that
        # none takes the place of a likelier chain token. Where one more node costs nothing to
        # verify (a repacked layout's fourth row) the first candidate asked would get it, whatever
        # its worth.
        candidates: list[tuple[int, int, list]] = []  # (parent, chain position, alternatives in drawing order)
        parent = ROOT
        advanced = 0  # tokens the constraint consumed, to roll back
        if constraint is not None:
            branch = None
        while True:
            if constraint is not None:
                logits = masked(logits, constraint.allowed())
            choices = self._choices(logits, params, rng, 1)
            token, dist, conf = choices[0]
            depth = len(out.ids)  # only chain tokens so far
            if stop is not None and stop(depth, conf):
                break
            node = out.add(token, parent, dist, conf)
            if constraint is not None:
                consumed = constraint.advance(token)
                advanced += consumed
                if not consumed or constraint.done():
                    break  # nothing (or only the end) follows: no token is left to draft
            # the logits are read now (the next step overwrites them), if an alternative could pay
            if branch is not None and branch(1.0 - conf, depth, depth + 1):
                candidates.append(
                    (parent, depth, self._choices(logits, params, rng, 1 + self.ALTERNATIVES, choices[0])[1:])
                )
            parent = node
            if depth + 1 == k or depth + 1 == self.MAX_NODES:
                break
            logits = self.backend.eval([token], 1)[0]
        if constraint is not None:
            constraint.rollback(advanced)
        if branch is None:  # no alternatives were looked for
            return out
        for parent, depth, alternatives in candidates:
            for alt, alt_dist, alt_conf in alternatives:
                if len(out.ids) >= self.MAX_NODES or not branch(alt_conf, depth, len(out.ids)):
                    break
                out.add(alt, parent, alt_dist, alt_conf)
        return out

    @staticmethod
    def _choices(
        logits: np.ndarray,
        params: SamplingParams,
        rng: np.random.Generator,
        n: int,
        first: tuple[int, Dist | None, float] | None = None,
    ) -> list[tuple[int, Dist | None, float]]:
        """The drafted token and up to n - 1 alternatives at one position: (token, the q it was
        drawn from or None for a point mass, its drafter probability). `first`: the token already
        drafted there, kept as the first choice."""
        if params.greedy:
            return [(t, None, c) for t, c in softmax_top(logits, n)]
        q = first[1] if first is not None else warp(logits, params)
        assert q is not None, "a sampled choice carries the q it was drawn from"
        out = [first] if first is not None else []
        rest: Dist | None = q if first is None else q.without([first[0]])
        while rest is not None and len(out) < n:
            token = rest.sample(rng)
            out.append((token, rest, q.prob(token)))
            if len(out) < n:
                rest = rest.without([t for t, _, _ in out])
        return out

    def begin(self, prompt: Sequence[int]) -> None:
        """Place the view's start, and load a saved state of the view if there is one; read
        nothing. A view that would still hold between `window` and twice `window` tokens is kept,
        so the next turn of a chat reads only what is new."""
        n = len(prompt)
        if self.window is None or n <= self.window:
            self.start = 0
        elif not (self.start <= n - self.window and n - self.start <= 2 * self.window):
            self.start = (n - self.window) // self.ALIGN * self.ALIGN
        if self.before_read is not None:
            self.before_read(self.backend, prompt[self.start :])

    def behind(self, context: Sequence[int]) -> int:
        """Tokens of the view it has not read: what its next draft must read first."""
        view = context[self.start :]
        return len(view) - common_prefix(self.backend.cached, view)

    def accept(self, n_committed: int) -> None:
        """Drop drafted tokens past the committed text (the rejected ones)."""
        self.backend.truncate(min(n_committed - self.start, len(self.backend.cached)))


class NgramDrafter:
    """Prompt lookup over the committed text (prompt and output so far).

    An index from every n-gram (min_n..max_n tokens) to the positions it ended at is updated
    incrementally as tokens are committed, so a lookup costs O(max_n), not a scan of the context.
    A context that is not an extension of the indexed one (a new conversation) rebuilds the index.

    A proposal is a trie of what followed the longest suffix that occurred before: its first
    branch is the most recent occurrence's copy (what a chain-only lookup drafts), then the copies
    after the other occurrences, longest match first, each adding the nodes where it parts from
    the ones before. All are point masses: the target chooses among them.
    """

    kind = DrafterKind.NGRAM
    free = True
    # how far back a match is measured; beyond this, longer matches do not predict acceptance better
    MAX_MATCH = 32
    MAX_MATCHES = 8  # earlier occurrences merged into one proposal
    MAX_NODES = 48  # the most nodes a proposal holds (the policy verifies some of them)

    def __init__(self, min_n: int = 1, max_n: int = 4):
        self.min_n, self.max_n = min_n, max_n
        self._tokens: list[int] = []
        self._ends: dict[tuple[int, ...], list[int]] = {}
        self._source: Sequence[int] | None = None  # the context list indexed last

    def _index(self, context: Sequence[int]) -> None:
        seen = len(self._tokens)
        # Within one generation the decoder only appends to the same context list, so the prefix
        # is compared (an O(n) copy) only when a different list arrives, i.e. a new generation.
        if context is not self._source and (seen > len(context) or list(context[:seen]) != self._tokens):
            self._tokens, self._ends, seen = [], {}, 0
        self._source = context
        self._tokens.extend(context[seen:])
        toks = self._tokens
        # An n-gram is indexed once the token after it is known, so a lookup never finds the
        # context's own suffix, only an earlier occurrence with a continuation.
        for end in range(max(seen - 1, 0), len(toks) - 1):
            for n in range(self.min_n, min(self.max_n, end + 1) + 1):
                self._ends.setdefault(tuple(toks[end - n + 1 : end + 1]), []).append(end)

    def begin(self, prompt: Sequence[int]) -> None:
        pass  # the index catches up with the committed text at each proposal

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
        apply; nor do `params`: a copy is a point mass). Under `constraint`: the most recent copy
        alone, up to its first token the constraint forbids."""
        if constraint is not None:
            copy = self._propose(context, k).first_branch()
            return copy.head(constraint.allowed_prefix(copy.ids))
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
            for end in [latest, *earlier]:
                parent = ROOT
                for token in toks[end + 1 : end + 1 + k]:
                    node = below.get((parent, token))
                    if node is None:
                        if len(out.ids) == self.MAX_NODES:
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
