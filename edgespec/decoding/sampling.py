"""Logit warping and lossless verification of drafted tokens.

Drafts are trees (`tree.py`; a chain is a tree with one branch). Greedy: follow the target's argmax
down the tree. Sampling (Leviathan et al. 2023, Chen et al. 2023; for siblings SpecInfer and
multi-draft speculative sampling): warp the target's and the drafter's logits identically into p and
q, accept x with probability min(1, p(x)/q(x)), on rejection replace p with max(0, p - q)
normalised and try the next sibling, and when none is left sample from p; after a leaf, a bonus
token from p. Whatever the drafter proposes, the emitted tokens follow the target's (warped)
distribution exactly. A drafter with no distribution (n-gram lookup) is a point mass, q(x) = 1.

Distributions are kept sparse (`Dist`: the ids that survive warping and their probabilities)
because with top-k / top-p a 151936-token row shrinks to a few dozen candidates, which keeps the
host-side cost per verified row well under a millisecond.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from edgespec.decoding.tree import children

# top-k and top-p first look among the tokens close to the best one and widen the search only when
# those are too few; the result is the same as a full sort, at a fraction of its cost.
_PROBE_WIDTHS = (8.0, 32.0, 128.0)  # logit units below the maximum
_NUCLEUS_PROBE = 1024  # rows shorter than this are simply sorted
_NUCLEUS_CUTS = (1e-3, 1e-6, 1e-12)  # weights relative to the most likely token


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How tokens are chosen. temperature <= 0 means greedy (argmax); the filters are then unused."""

    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def sampling_from_flags(defaults: SamplingParams, temperature, top_p, top_k, min_p, seed) -> SamplingParams:
    """The pair's default sampling with the values the user gave (command-line flags, a request's
    fields; None where not given) laid over it."""
    given = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, seed=seed)
    return replace(defaults, **{k: v for k, v in given.items() if v is not None})


def _finite_in(low: float, high: float, *, low_open: bool = False, meaning: str = "") -> Callable[[float], str | None]:
    def check(value: float) -> str | None:
        above = value > low if low_open else value >= low
        if math.isfinite(value) and above and value <= high:
            return None
        span = (
            f"in {'(' if low_open else '['}{low:g}, {high:g}]" if math.isfinite(high) else f"a finite number >= {low:g}"
        )
        return f"{value} is not {span}" + (f" ({meaning})" if meaning else "")

    return check


# The one rule for every sampling value, used by models.toml and the command-line flags alike.
# NaN fails every comparison and infinity is refused, so neither can reach the sampler.
SAMPLING_RULES: dict[str, Callable[[float], str | None]] = {
    "temperature": _finite_in(0.0, math.inf, meaning="0 = greedy"),
    "top_k": _finite_in(0, math.inf, meaning="0 = off"),
    "top_p": _finite_in(0.0, 1.0, low_open=True, meaning="1 = off"),
    "min_p": _finite_in(0.0, 1.0, meaning="0 = off"),
    "seed": lambda v: None if 0 <= v < 2**64 else f"{v} is not in 0..{2**64 - 1}",  # numpy takes 64 bits
}


def sampling_problem(name: str, value: float) -> str | None:
    """What is wrong with `value` for the sampling setting `name`, or None when it is valid."""
    return SAMPLING_RULES[name](value)


@dataclass(frozen=True, slots=True)
class Dist:
    """A sparse probability distribution: `ids` ascending, `probs` summing to 1."""

    ids: np.ndarray  # int64, sorted ascending
    probs: np.ndarray  # float64, same length

    def prob(self, token_id: int) -> float:
        i = int(np.searchsorted(self.ids, token_id))
        return float(self.probs[i]) if i < len(self.ids) and self.ids[i] == token_id else 0.0

    def on(self, ids: np.ndarray) -> np.ndarray:
        """Probabilities of `ids` (ascending), 0 where outside the support."""
        i = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        return np.where(self.ids[i] == ids, self.probs[i], 0.0)

    def sample(self, rng: np.random.Generator) -> int:
        return int(self.ids[_sample_index(self.probs, rng)])

    def without(self, tokens: Sequence[int]) -> Dist | None:
        """This distribution with `tokens` removed, renormalised (what a sibling drawn without
        replacement is drawn from); None when nothing is left."""
        keep = ~np.isin(self.ids, tokens) & (self.probs > 0.0)
        total = self.probs[keep].sum()
        return Dist(self.ids[keep], self.probs[keep] / total) if total > 0.0 else None


def _sample_index(weights: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(weights)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(cdf) - 1))


def warp(logits: np.ndarray, params: SamplingParams) -> Dist:
    """Temperature, then top-k, top-p and min-p, as transformers orders them; one row in, a Dist out.

    Greedy params (temperature <= 0) give a point mass on the argmax, so sampled verification with
    them degenerates to greedy verification instead of dividing by zero.
    """
    n = logits.shape[-1]
    if params.greedy:
        return Dist(np.array([int(np.argmax(logits))], dtype=np.int64), np.ones(1))
    if 0 < params.top_k < n:
        ids = _top_k_ids(logits, params.top_k)
    else:
        ids = None  # every token is still a candidate
    z = (logits if ids is None else logits[ids]).astype(np.float64)
    with np.errstate(over="ignore"):  # shifted first: a tiny temperature (1e-308) gives -inf, not inf - inf
        z = (z - z.max()) / params.temperature
    w = np.exp(z)
    total = w.sum()
    if ids is None:
        ids = np.arange(n)
    if params.top_p < 1.0:
        ids, w = _nucleus(ids, w, total, params.top_p)
        total = w.sum()
    if params.min_p > 0.0:
        keep = w >= params.min_p * w.max()
        ids, w = ids[keep], w[keep]
        total = w.sum()
    order = np.argsort(ids)
    return Dist(ids[order].astype(np.int64), w[order] / total)


def _top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest logits (fewer where fewer are finite). A partial sort of the whole
    151936-token row costs about a millisecond; the tokens within a few units of the maximum are a
    vectorised compare away, and once there are at least k of them the top k are among them, so
    only they are partitioned. A row masked by a constraint is mostly -inf, which numpy partitions
    about twenty times slower (ten milliseconds a row): only its finite tokens are partitioned, and
    where fewer than k are allowed they are the answer (a -inf token has no weight to keep)."""
    top = logits.max()
    for width in _PROBE_WIDTHS:
        ids = np.flatnonzero(logits >= top - width)
        if len(ids) >= k:
            return ids[np.argpartition(logits[ids], len(ids) - k)[len(ids) - k :]]
    ids = np.flatnonzero(logits > -np.inf)
    if len(ids) <= k:
        return ids
    return ids[np.argpartition(logits[ids], len(ids) - k)[len(ids) - k :]]


def _nucleus(ids: np.ndarray, w: np.ndarray, total: float, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (at least one).

    Any set of all tokens above a weight threshold that holds top_p of the mass contains the
    nucleus, so only such a set is sorted (thresholds widen until one qualifies)."""
    best = np.arange(len(w))
    if len(w) > _NUCLEUS_PROBE:
        for cut in _NUCLEUS_CUTS:
            above = np.flatnonzero(w >= cut)  # w is relative to the largest weight (1.0)
            if w[above].sum() >= top_p * total:
                best = above
                break
    best = best[np.argsort(-w[best], kind="stable")]
    cum = np.cumsum(w[best])
    cut = int(np.searchsorted(cum, top_p * total, side="left")) + 1
    best = best[: min(cut, len(best))]
    return ids[best], w[best]


def softmax_top(logits: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The n likeliest tokens of one row, best first, with their softmax probabilities (a greedy
    drafter's confidence in its token and in its alternatives)."""
    ids = _top_k_ids(logits, n) if n > 1 else np.array([int(np.argmax(logits))])
    ids = ids[np.argsort(-logits[ids], kind="stable")]
    best = logits[ids[0]]
    total = np.exp(logits.astype(np.float64) - best).sum()
    return [(int(i), float(np.exp(float(logits[i]) - best) / total)) for i in ids]


def verify_greedy(target_logits: np.ndarray, ids: Sequence[int], parents: Sequence[int]) -> tuple[list[int], int]:
    """Greedy verification of a draft tree (`tree.py`) against its n + 1 target rows: follow the
    target's argmax down the tree.

    Returns (path, next_id): the accepted nodes from the root down, and the target's argmax after the
    last of them, a correction where no child matched, a bonus after a leaf.
    """
    below = children(parents)
    path: list[int] = []
    row = 0
    while True:
        best = int(np.argmax(target_logits[row]))
        node = next((c for c in below[row] if ids[c] == best), None)
        if node is None:
            return path, best
        path.append(node)
        row = node + 1


def verify_sampled(
    target_logits: np.ndarray,
    ids: Sequence[int],
    parents: Sequence[int],
    dists: Sequence[Dist | None],
    params: SamplingParams,
    rng: np.random.Generator,
) -> tuple[list[int], int]:
    """Multi-draft speculative sampling down a draft tree (SpecInfer; "multi-draft speculative
    sampling"): at each accepted node its children are tried in drafting order, child x accepted
    with probability min(1, p(x) / q(x)); on rejection p becomes max(0, p - q) normalised and the
    next child is tried; when none is accepted the token comes from what is left of p. Each try is
    one step of ordinary speculative sampling, whose output follows its p exactly, so by induction
    the emitted token follows the target's p whatever the siblings are.

    `dists[i]` is the warped q node i was drawn from given the siblings drafted before it (a sibling
    drawn i.i.d. from q carries q; one drawn without replacement, q without the earlier ones), or
    None for a token chosen deterministically from what came before (q is then a point mass: an
    n-gram copy, a draft model's top-k alternative). Returns (path, next_id) as `verify_greedy`.
    """
    below = children(parents)
    path: list[int] = []
    row = 0
    while True:
        p = warp(target_logits[row], params)
        for node in below[row]:
            token, q = ids[node], dists[node]
            q_x = 1.0 if q is None else q.prob(token)
            if rng.random() * q_x < p.prob(token):  # accept with probability min(1, p_x / q_x)
                path.append(node)
                row = node + 1
                break
            p = residual(p, q, token)
        else:
            return path, p.sample(rng)


def residual(p: Dist, q: Dist | None, token: int) -> Dist:
    """max(0, p - q) normalised: what is left of p once `token`, drawn from q, was rejected."""
    if q is None:
        support = p.ids
        r = np.where(support == token, 0.0, p.probs)
    else:
        support = np.union1d(p.ids, q.ids)
        r = np.maximum(p.on(support) - q.on(support), 0.0)
    total = r.sum()
    if total <= 0.0:  # p == q up to rounding: rejection had probability ~0; p is then exact
        return p
    keep = r > 0.0
    return Dist(support[keep], r[keep] / total)


def choose(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """One token from one row: plain decoding and the target's first token after the prompt."""
    return int(np.argmax(logits)) if params.greedy else warp(logits, params).sample(rng)
