"""One speculative round repeated from the same cache state, cheaply, for the real pair's statistical
tests (tests/test_real_pair_sampling.py, tests/test_real_pair_constrained_sampling.py): the first
token each round emits must follow the target's warped distribution there (masked, under a
constraint), whatever was drafted.

The rounds are the decoder's own (`SpeculativeDecoder._round`: the drafter samples, `verify_sampled`
accepts or resamples, the caches roll back). What makes thousands of them fit in well under a
minute is `MemoBackend`: a target pass or a draft step on tokens already seen from the same cache
state returns the logits computed the first time, so each distinct draft costs one real evaluation
and every other repeat runs only the sampling arithmetic.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from scipy import stats

from edgespec.decoding.backend import sync_cache
from edgespec.decoding.constraint import Constraint, masked
from edgespec.decoding.decoder import Reply, SpeculativeDecoder
from edgespec.decoding.drafters import DraftChoice, Drafter
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.simple_policies import FixedK
from edgespec.decoding.sampling import Dist, SamplingParams, warp
from edgespec.engine.engine import Engine


class MemoBackend:
    """A backend that answers an evaluation it has seen (same cache contents, same tokens) from
    memory; the real backend runs only on what is new. `last` is the latest logits returned."""

    def __init__(self, backend):
        self._b = backend
        self.cached: list[int] = []
        self._memo: dict[tuple, np.ndarray] = {}
        self.last: np.ndarray | None = None

    def __getattr__(self, name):
        return getattr(self._b, name)

    def eval(self, tokens, n_logits):
        key = (tuple(self.cached), tuple(tokens), n_logits)
        if key not in self._memo:  # the real backend reuses what it holds of this text
            self._memo[key] = np.array(sync_cache(self._b, self.cached + list(tokens), n_logits))
        self.cached.extend(tokens)
        self.last = self._memo[key]
        return self.last

    def eval_tree(self, pending, ids, parents, need=None):
        """The rounds here draft chains (FixedK): one memoised eval, cut back by keep_path."""
        self._path_start = len(self.cached) + 1
        return self.eval([pending, *ids], len(ids) + 1)

    def keep_path(self, path):
        del self.cached[self._path_start + len(path) :]

    def truncate(self, n):
        del self.cached[n:]


class Rewinding:
    """A constraint that counts what it consumed, so that a test can bring it back to where a round
    began. A round verified without the mask may emit tokens the matcher refuses (and does not
    consume): counting its own advances is the only honest way back."""

    def __init__(self, constraint: Constraint):
        self._c = constraint
        self.consumed = 0

    def __getattr__(self, name):
        return getattr(self._c, name)

    def advance(self, token_id: int) -> bool:
        ok = self._c.advance(token_id)
        self.consumed += ok
        return ok

    def rollback(self, n: int) -> None:
        self._c.rollback(n)
        self.consumed -= n

    def rewind(self) -> None:
        self.rollback(self.consumed)


def repeat_round(
    engine: Engine,
    drafter: Drafter,
    context: list[int],
    params: SamplingParams,
    k: int,
    repeats: int,
    constraint: Constraint | None = None,
) -> tuple[Counter, np.ndarray, Counter]:
    """`repeats` rounds drafting k tokens after `context` from the same cache state, seeds 0.. .
    `constraint`: a matcher that has consumed the reply in `context`; it is back there after each
    round. Returns the first emitted token's counts, the target's warped distribution each round
    verified with (masked by `constraint` there; summed over the rounds, over the vocabulary), and
    how many drafted tokens were accepted per round."""
    target = MemoBackend(engine.target)
    if isinstance(drafter, ModelDrafter):
        drafter = ModelDrafter(MemoBackend(drafter.backend))
    decoder = SpeculativeDecoder(target, FixedK(k, DraftChoice(drafter.kind.value)), [drafter])
    rewinding = Rewinding(constraint) if constraint is not None else None
    allowed = constraint.allowed().copy() if constraint is not None else None
    target.eval(context[:-1], 1)  # the decoder's invariant: all but the pending token are cached
    first: Counter[int] = Counter()
    accepted: Counter[int] = Counter()
    verified: Counter[int] = Counter()
    rows = {}
    for seed in range(repeats):
        target.truncate(len(context) - 1)
        reply = Reply(list(context), len(context), params, np.random.default_rng(seed), rewinding)
        step, new_ids = decoder._round(reply, 16)
        if rewinding is not None:
            rewinding.rewind()
        assert step.drafted > 0 and target.last is not None  # a drafted round, not a plain step
        first[new_ids[0]] += 1
        accepted[step.accepted] += 1
        rows[id(target.last)] = target.last[0]  # the verify pass's row for the round's first token
        verified[id(target.last)] += 1
    expected = np.zeros(engine.target.n_vocab)
    for key, n in verified.items():
        p = warp(rows[key] if allowed is None else masked(rows[key], allowed), params)
        expected[p.ids] += n * p.probs
    return first, expected, accepted


def total_variation(p: Dist, q: Dist) -> float:
    ids = np.union1d(p.ids, q.ids)
    return 0.5 * float(np.abs(p.on(ids) - q.on(ids)).sum())


def chi_square_p(observed: Counter, expected: np.ndarray) -> float:
    """p-value of the observed first tokens against the expected counts; bins under 5 pooled. 0
    when a token outside the expected support was emitted (which a chi-square test cannot see)."""
    if any(expected[t] == 0 for t in observed):
        return 0.0
    support = np.flatnonzero(expected)
    exp = expected[support]
    obs = np.array([observed[int(t)] for t in support], dtype=float)
    small = exp < 5
    if small.any():
        exp = np.append(exp[~small], exp[small].sum())
        obs = np.append(obs[~small], obs[small].sum())
        if exp[-1] < 5 and len(exp) > 2:  # the pool itself too small: merge it into the smallest bin
            i = int(np.argmin(exp[:-1]))
            exp[i] += exp[-1]
            obs[i] += obs[-1]
            exp, obs = exp[:-1], obs[:-1]
    if len(exp) < 2:
        return 1.0  # a point mass: the support check above is the whole test
    return float(stats.chisquare(obs, exp).pvalue)
