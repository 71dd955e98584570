"""What the decode loop needs from a constraint (a JSON schema, a regular expression, a grammar): the
set of tokens allowed next, and a matcher state that follows the draft and rolls back.

The algorithm owns this protocol and never imports a grammar engine; `edgespec.constraints` builds
one from llguidance over the target's vocabulary. Under a constraint every row the decoder chooses
or verifies with is masked first (`masked`), the draft model drafts under the same mask and an
n-gram copy is cut at the first forbidden token, so verification stays the usual acceptance test
on masked distributions: greedy takes the allowed argmax, sampling renormalises over the allowed
tokens, and the output follows the target restricted to what the constraint allows.

A constraint can lead nowhere: a state where it allows only the end although the reply is not a
complete match (a schema no finite document satisfies that no check before decoding found, or the
grammar engine failing mid-reply). The end there is no success: the decoder raises
`ConstraintDeadEnd` instead of ending the reply as if it were whole.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

import numpy as np

from edgespec.util.errors import EdgespecError


class Constraint(Protocol):
    """A matcher over token ids that has consumed the reply so far (the prompt is not its input).

    `advance` and `rollback` move it along a draft and back; every other call reads the state after
    the tokens consumed so far.
    """

    busy_s: float  # seconds spent in its calls so far (the decoder reports it: the mask's cost)

    def allowed(self) -> np.ndarray:
        """Which tokens may come next: a bool array over the constraint's vocabulary (ids past its
        end are forbidden). Only end-of-generation ids are allowed once the constraint is complete."""
        ...

    def advance(self, token_id: int) -> bool:
        """Consume one token; False (and nothing consumed) when the constraint forbids it."""
        ...

    def rollback(self, n: int) -> None:
        """Forget the last n consumed tokens."""
        ...

    def allowed_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, in order, could be consumed now (nothing is consumed)."""
        ...

    def forced(self) -> list[int]:
        """Tokens spelling the constraint's forced text (the only text it allows next); empty when
        it leaves a choice. The text is certain, its split into tokens is not: the model may spell
        the same text otherwise, or merge its end with what follows, so these are a draft the
        target verifies, never committed unchecked."""
        ...

    def done(self) -> bool:
        """Nothing but the end of the reply may follow."""
        ...

    def accepting(self) -> bool:
        """The reply so far is a complete match: an end there is a success."""
        ...


class ConstraintDeadEnd(EdgespecError):
    """The constraint allowed nothing but the end of a reply that does not match it yet: the reply
    failed (exit 1 in `run`, an error in `serve`), however much of it was already sent."""

    def __init__(self, tokens: int):
        super().__init__(
            f"the constraint leads nowhere: after {tokens} tokens it allows only the end of an incomplete "
            "reply (a schema no finite document satisfies, or one past the grammar engine's limits)"
        )


def masked(rows: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Logit rows (n, n_vocab) or one row with -inf wherever `allowed` is False (a copy). A model
    whose vocabulary is padded past the constraint's has its extra ids forbidden."""
    keep = np.zeros(rows.shape[-1], dtype=bool)
    n = min(len(allowed), len(keep))
    keep[:n] = allowed[:n]
    return np.where(keep, rows, np.float32(-np.inf)).astype(rows.dtype, copy=False)


def take_forced(constraint: Constraint, limit: int, refused: Collection[int] = ()) -> tuple[list[int], int]:
    """The constraint's forced text (`Constraint.forced`) as the start of a draft, with the matcher
    advanced along it: at most `limit` tokens, less a last one in `refused` (an ending the target
    spelled otherwise before). Returns the tokens and how many of them the matcher consumed (fewer
    when it refused one: a tokenization it does not expect); the caller rolls the matcher back."""
    tokens = constraint.forced()[:limit]
    if tokens and tokens[-1] in refused:
        tokens.pop()
    return tokens, sum(constraint.advance(token) for token in tokens)
