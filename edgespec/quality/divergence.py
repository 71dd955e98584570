"""Why a greedy speculative output parted from plain decoding: a numerical near-tie, or a bug.

Greedy speculative decoding emits the target's argmax of the logits its verify pass computed;
plain decoding emits the argmax of single-token steps. The two evaluations differ by the target's
noise floor (`noise_floor.py`), so where two tokens are nearly tied the outputs may part without
any bug. At the first differing token the target is asked again, both ways, and the parting is:

- `tie` when each evaluation is within the noise floor of preferring the token its own mode
  emitted, and the two evaluations differ by no more than the floor allows: the gap of two tokens
  moves by at most twice the largest difference of one logit;
- `DIFF` otherwise: a token the target's own logits do not explain, which is a bug.

Which batch is "the verify pass": the one the speculative decoder ran. The bench records each
round's first output index and drafted tokens, so the pass is replayed exactly: the same tokens,
the same batch size, on the speculative run's own cache, which still holds the very entries that
pass read (rounds only ever cut the cache back past the committed text). The single-token steps
start from that same cache and evaluate the round's tokens one by one, as plain decoding would, so
a cache the speculative run spoiled shows up as a single step that cannot explain plain decoding's
token, instead of hiding behind a fresh evaluation. That cache was written by the run's earlier
passes, not by plain decoding's single steps, and this moves the logits too: on the dev set 5 of 9
partings came from passes of 1-3 tokens, whose rows llama.cpp computes exactly like single steps,
and there the single step prefers the speculative token by a few hundredths. The noise floor is
measured over a window that batches fill (`measure_noise_floor`), so it covers this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgespec.decoding.backend import Backend, common_prefix
from edgespec.decoding.tree import chain

TIE, DIFF = "tie", "DIFF"


@dataclass(frozen=True)
class Round:
    """A speculative round as the bench saw it: the output index of its first new token, the tokens
    it drafted (its target pass evaluated the previous token and these) as a tree (`tree.py`), the
    path it accepted, and which drafter drafted them."""

    start: int
    drafted: tuple[int, ...]
    parents: tuple[int, ...] = ()  # () with drafted tokens: a chain
    path: tuple[int, ...] = ()
    drafter: str | None = None  # a DrafterKind; None for a plain pass

    def tree(self) -> tuple[list[int], list[int]]:
        """(parents, path), a chain's spelled out."""
        if self.parents or not self.drafted:
            return list(self.parents), list(self.path)
        return chain(len(self.drafted)), list(self.path)


@dataclass(frozen=True)
class Parting:
    """The first token where an output differs from plain decoding's, explained.

    Gaps are logit(mode's token) - logit(plain decoding's token): the verify pass should find it
    >= 0 (it emitted the mode's token), the single step <= 0."""

    position: int  # index in the output
    token: int  # the mode's token there (an end-of-generation id where its output ended)
    ar_token: int  # plain decoding's token there (likewise)
    batch: int  # tokens in the target pass that produced the mode's token (1: the prompt's last)
    gap_batched: float
    gap_single: float
    floor: float
    verdict: str  # TIE or DIFF


def verdict(gap_batched: float, gap_single: float, floor: float) -> str:
    """TIE when noise of at most `floor` per logit explains both tokens (module docstring), else DIFF."""
    near = gap_batched >= -floor and gap_single <= floor and gap_batched - gap_single <= 2 * floor
    return TIE if near else DIFF


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two outputs differ (the shorter one's length when one is a prefix of the
    other), or None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def explain_parting(
    target: Backend,
    prompt: Sequence[int],
    ar_ids: Sequence[int],
    ids: Sequence[int],
    rounds: Sequence[Round],
    floor: float,
) -> Parting:
    """Classify the first parting of greedy output `ids` from plain decoding's `ar_ids`.

    `rounds` are the speculative run's, and `target` should still hold that run's cache (the bench
    calls this right after the run); with any other cache the prefix is evaluated again and the
    replay is only as exact as the noise floor. The cache is left holding the shared prefix."""
    i = first_divergence(ids, ar_ids)
    if i is None:
        raise ValueError("the outputs do not part")
    seq = [*prompt, *ar_ids[:i]]  # the text both runs had committed before the parting
    # The pass that produced token i: the round that started at or before it, else the prefill's
    # last token (both runs read the prompt from a cache that held all of it but that token).
    r = next((r for r in reversed(rounds) if r.start <= i), None)
    parents: list[int]
    path: list[int]
    if r is None:
        start, drafted, parents, path = len(prompt) - 1, [], [], []
    else:
        start = len(prompt) + r.start - 1  # the round's pending token, then its drafts
        drafted, (parents, path) = list(r.drafted), r.tree()
    depth = len(seq) - 1 - start  # token i follows the pending token and depth accepted nodes
    row = 0 if depth == 0 else path[depth - 1] + 1  # the pass's row that predicts token i

    _hold(target, seq[:start])
    batched = np.array(target.eval_tree(seq[start], drafted, parents)[row])
    target.keep_path(path[:depth])
    _hold(target, seq[:start])
    for t in seq[start:-1]:
        target.eval([t], 1)
    single = np.array(target.eval([seq[-1]], 1)[0])

    ends = sorted(target.eos_ids)
    token = ids[i] if i < len(ids) else _best(batched, ends)
    ar_token = ar_ids[i] if i < len(ar_ids) else _best(single, ends)
    gap_b = float(batched[token] - batched[ar_token])
    gap_s = float(single[token] - single[ar_token])
    return Parting(i, int(token), int(ar_token), len(drafted) + 1, gap_b, gap_s, floor, verdict(gap_b, gap_s, floor))


def _hold(target: Backend, tokens: Sequence[int]) -> None:
    """Make the cache hold exactly `tokens`, keeping (not re-evaluating) what it already holds of them."""
    keep = common_prefix(target.cached, tokens)
    target.truncate(keep)
    if keep < len(tokens):
        target.eval(tokens[keep:], 1)


def _best(row: np.ndarray, candidates: Sequence[int]) -> int:
    """The end-of-generation id an output that stopped there emitted: the likeliest one."""
    return int(candidates[int(np.argmax(row[candidates]))])
