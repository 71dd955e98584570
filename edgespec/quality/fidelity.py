"""How closely a derived model follows its original, and how well each predicts a text: per
position, the next-token distributions of both models and the text's own next token.

Both models read the same tokens chunk by chunk, with logits at every position, so the comparison
is position for position under teacher forcing (the text, not each model's own output: a model's
first different choice would otherwise make every later position incomparable).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from edgespec.decoding.backend import Backend

CHUNK = 64  # positions per evaluation: logits for all of them, 64 x vocabulary floats per model


@dataclass(frozen=True)
class Fidelity:
    agreement: float  # share of positions where both models' most likely token is the same
    mean_kl: float  # KL(original || derived) in nats, mean over positions
    p99_kl: float
    positions: int


@dataclass(frozen=True)
class PairedPositions:
    """Per position of a text read by two models: whether their top-1 tokens agree, KL(original ||
    derived) in nats, and each model's negative log-likelihood of the text's next token (NaN at a
    document's last position, which has no next token)."""

    agree: np.ndarray
    kl: np.ndarray
    nll_original: np.ndarray
    nll_derived: np.ndarray

    def fidelity(self) -> Fidelity:
        n = len(self.kl)
        return Fidelity(float(self.agree.mean()), float(self.kl.mean()), float(np.percentile(self.kl, 99)), n)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def read_log_probs(backend: Backend, tokens: Sequence[int]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per chunk of `tokens`: the model's log-probabilities at its positions and the text's next
    tokens (-1 after the last). The cache is cleared first; positions beyond the context are not read."""
    n = min(len(tokens), backend.n_ctx)
    backend.truncate(0)
    for start in range(0, n, CHUNK):
        chunk = list(tokens[start : min(start + CHUNK, n)])
        logp = _log_softmax(np.array(backend.eval(chunk, len(chunk)), dtype=np.float32))
        following = np.array(list(tokens[start + 1 : start + 1 + len(chunk)]), dtype=np.int64)
        yield logp, np.pad(following, (0, len(chunk) - len(following)), constant_values=-1)


def compare(
    original: Iterable[tuple[np.ndarray, np.ndarray]], derived: Iterable[tuple[np.ndarray, np.ndarray]]
) -> PairedPositions:
    """Position by position, two readings of the same text (`read_log_probs` of each model)."""
    agree: list[np.ndarray] = []
    kl: list[np.ndarray] = []
    nll_p: list[np.ndarray] = []
    nll_q: list[np.ndarray] = []
    for (p, following), (q, _) in zip(original, derived, strict=True):
        agree.append(p.argmax(axis=-1) == q.argmax(axis=-1))
        kl.append(np.maximum((np.exp(p) * (p - q)).sum(axis=-1), 0.0))
        rows = np.arange(len(following))
        known = following >= 0
        for out, logp in ((nll_p, p), (nll_q, q)):
            out.append(np.where(known, -logp[rows, np.maximum(following, 0)], np.nan))
    return PairedPositions(*(np.concatenate(parts) for parts in (agree, kl, nll_p, nll_q)))


def read_paired(original: Backend, derived: Backend, documents: Sequence[Sequence[int]]) -> PairedPositions:
    """Both models read each document from an empty cache (documents are not each other's context),
    chunk by chunk in step; the caches are left holding the last one."""
    n = [min(len(tokens), original.n_ctx, derived.n_ctx) for tokens in documents]
    return compare(
        (c for tokens, m in zip(documents, n, strict=True) for c in read_log_probs(original, tokens[:m])),
        (c for tokens, m in zip(documents, n, strict=True) for c in read_log_probs(derived, tokens[:m])),
    )


def measure_fidelity(original: Backend, derived: Backend, tokens: Sequence[int]) -> Fidelity:
    """Compare `derived` with `original` over `tokens` (both caches are cleared first and left
    holding `tokens`). Positions beyond either context are not read."""
    return read_paired(original, derived, [tokens]).fidelity()
