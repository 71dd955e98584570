"""The draft model as a drafter (`drafters.Drafter`): a small model of the target's vocabulary.

Its cache is kept in step with the committed text by `sync_cache`, so rolled-back tokens are dropped
before the next round. Its chain follows its own first choice; where the policy's `branch` rule says
an alternative is worth verifying (a low-confidence position, as in EAGLE-2's dynamic tree), its next
choices at that position hang beside the chosen token as leaves: they come from logits the model
computed anyway, so they cost no draft step, only verification. Under a constraint it drafts a chain
under the constraint's mask; where the constraint forces the next tokens (a key, a brace), it takes
them as they are and reads them in one batch with the token before them: they cost it no draft step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from edgespec.decoding.backend import Backend, common_prefix, reused_prefix, sync_cache
from edgespec.decoding.constraint import Constraint, masked, take_forced
from edgespec.decoding.drafters import BranchRule, Draft, DrafterKind, StopRule
from edgespec.decoding.sampling import Dist, SamplingParams, softmax_top, warp
from edgespec.decoding.tree import ROOT

# (backend, tokens it is about to read) -> tokens it no longer needs to read
ReadHook = Callable[[Backend, Sequence[int]], int]
# one choice at a position: (token, the q it was drawn from or None for a point mass, its probability)
Choice = tuple[int, Dist | None, float]
# where alternatives could hang: (the chain token's parent, its position, the alternatives)
Candidates = tuple[int, int, list[Choice]]


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
        # Set by the engine before a call whose passes must follow its text alone (steady passes):
        # the view is placed, and the first catch-up priced, as a newly made drafter's would be,
        # whatever it or the prompt cache read before. A warm start then drafts when a cold one
        # does (the reading it saves only makes the call faster), not at once for a read it skips.
        self.as_new = False
        self._read = False  # whether it has read its view in this generation

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
        logits = self._catch_up(context, out)
        if constraint is not None:
            branch = None  # chains under a constraint
        # The chain first; alternatives are weighed once it is drafted, position by position, so that
        # none takes the place of a likelier chain token. Where one more node costs nothing to
        # verify (a repacked layout's fourth row) the first candidate asked would get it, whatever
        # its worth.
        candidates = self._chain(out, logits, min(k, self.MAX_NODES), params, rng, stop, branch, constraint)
        if branch is not None:  # alternatives were looked for
            self._add_alternatives(out, candidates, branch)
        return out

    def _catch_up(self, context: Sequence[int], out: Draft) -> np.ndarray:
        """Read what the model has not seen of its view of `context`; the logits after it. After
        plain or n-gram rounds the draft model is behind the text; reading it back is a prefill,
        not a draft step, and is reported apart in `out` so the cost model is not misled."""
        self._read = True  # from here `behind` counts what it really reads
        behind = self.behind(context)
        t0 = time.perf_counter()
        # Within a generation it keeps all it read: its numbers decide only how fast the reply
        # comes. `begin` kept only the exact part of the last one's, so warm drafts as cold does.
        logits = sync_cache(self.backend, context[self.start :], 1, exact=False)[0]
        if behind > 2:  # drafting every round leaves one or two tokens to read
            out.catch_up_s, out.catch_up_tokens = time.perf_counter() - t0, behind
        return logits

    def _chain(
        self,
        out: Draft,
        logits: np.ndarray,
        limit: int,
        params: SamplingParams,
        rng: np.random.Generator,
        stop: StopRule | None,
        branch: BranchRule | None,
        constraint: Constraint | None,
    ) -> list[Candidates]:
        """Draft the chain into `out`, at most `limit` nodes, from `logits` after the committed text:
        the model's choices, each followed by the tokens the constraint then forces. Returns, per
        chain position where `branch` said an alternative could pay, (its parent, the position,
        the alternatives in drawing order). The matcher is left where it was."""
        candidates: list[Candidates] = []
        parent = ROOT
        advanced = 0  # tokens the constraint consumed, to roll back
        while True:
            if constraint is not None:
                logits = masked(logits, constraint.allowed())
            choices = self._choices(logits, params, rng, 1)
            token, dist, conf = choices[0]
            depth = len(out.ids)  # only chain tokens so far
            if stop is not None and stop(depth, conf):
                break
            node = out.add(token, parent, dist, conf)
            out.steps += 1
            if constraint is not None:
                consumed = constraint.advance(token)
                advanced += consumed
                if not consumed or constraint.done():
                    break  # nothing (or only the end) follows: no token is left to draft
            # the logits are read now (the next step overwrites them), if an alternative could pay
            if branch is not None and branch(1.0 - conf, depth, depth + 1):
                alternatives = self._choices(logits, params, rng, 1 + self.ALTERNATIVES, choices[0])[1:]
                candidates.append((parent, depth, alternatives))
            parent = node
            forced: list[int] = []
            if constraint is not None:
                forced, consumed_forced = take_forced(constraint, limit - len(out.ids))
                for forced_token in forced:
                    parent = out.add(forced_token, parent, None, 1.0)
                advanced += consumed_forced
                if forced and (advanced < len(out.ids) or constraint.done()):
                    break  # the matcher refused one (a tokenization it does not expect), or the end follows
            if len(out.ids) >= limit:
                break
            logits = self.backend.eval([token, *forced], 1)[0]
        if constraint is not None:
            constraint.rollback(advanced)
        return candidates

    def _add_alternatives(self, out: Draft, candidates: list[Candidates], branch: BranchRule) -> None:
        """Hang the alternatives beside the chain's tokens, each where `branch` says it pays, while
        the tree has room."""
        for parent, depth, alternatives in candidates:
            for alt, alt_dist, alt_conf in alternatives:
                if len(out.ids) >= self.MAX_NODES or not branch(alt_conf, depth, len(out.ids)):
                    break
                out.add(alt, parent, alt_dist, alt_conf)

    @staticmethod
    def _choices(
        logits: np.ndarray,
        params: SamplingParams,
        rng: np.random.Generator,
        n: int,
        first: Choice | None = None,
    ) -> list[Choice]:
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
        """Place the view's start, keep only the exact part of what the model read before
        (`sync_cache`), and load a saved state of the view if there is one; read nothing. A view
        that would still hold between `window` and twice `window` tokens is kept, so the next turn
        of a chat reads little more than what is new."""
        n = len(prompt)
        self._read = False
        if self.as_new:
            self.start = 0
        if self.window is None or n <= self.window:
            self.start = 0
        elif not (self.start <= n - self.window and n - self.start <= 2 * self.window):
            self.start = (n - self.window) // self.ALIGN * self.ALIGN
        self.backend.truncate(reused_prefix(self.backend, prompt[self.start :]))
        if self.before_read is not None:
            self.before_read(self.backend, prompt[self.start :])

    def behind(self, context: Sequence[int]) -> int:
        """Tokens of the view it has not read: what its next draft must read first (`as_new`: all
        of the view until it first reads in this generation)."""
        view = context[self.start :]
        if self.as_new and not self._read:
            return len(view)
        return len(view) - common_prefix(self.backend.cached, view)

    def accept(self, n_committed: int) -> None:
        """Drop drafted tokens past the committed text (the rejected ones)."""
        self.backend.truncate(min(n_committed - self.start, len(self.backend.cached)))
