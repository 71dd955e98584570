"""How closely a derived model follows its original: top-1 agreement and KL divergence of the
next-token distributions at every position of a text.

Both models read the same tokens chunk by chunk, with logits at every position, so the comparison
is position for position under teacher forcing (the original's text, not each model's own output:
a model's first different choice would otherwise make every later position incomparable).
"""

from __future__ import annotations

from collections.abc import Sequence
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


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def measure_fidelity(original: Backend, derived: Backend, tokens: Sequence[int]) -> Fidelity:
    """Compare `derived` with `original` over `tokens` (both caches are cleared first and left
    holding `tokens`). Positions beyond either context are not read."""
    n = min(len(tokens), original.n_ctx, derived.n_ctx)
    for backend in (original, derived):
        backend.truncate(0)
    agree, kls = 0, []
    for start in range(0, n, CHUNK):
        chunk = list(tokens[start : min(start + CHUNK, n)])
        p = _log_softmax(np.array(original.eval(chunk, len(chunk)), dtype=np.float32))
        q = _log_softmax(np.array(derived.eval(chunk, len(chunk)), dtype=np.float32))
        agree += int((p.argmax(axis=-1) == q.argmax(axis=-1)).sum())
        kls.extend(np.maximum((np.exp(p) * (p - q)).sum(axis=-1), 0.0).tolist())
    return Fidelity(agree / n, float(np.mean(kls)), float(np.percentile(kls, 99)), n)
