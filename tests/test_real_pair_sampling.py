"""Sampled speculative decoding on the built-in pair follows the target's distribution.

At temperature 0.7 with the pair's own filters (top-k 20, top-p 0.8), at three drafted positions of
a fixed prompt, one speculative round is repeated 2,000 times from the same cache state with
different seeds, for the draft model and for n-gram drafts. The first token each round emits must
follow the target's warped distribution at that position (chi-square, expected counts under 5
pooled, p > 0.01), whatever was drafted. Positions are chosen where a verification that kept every
draft would show: where the draft model's distribution is far from the target's, and where the
n-gram copy is neither certain nor impossible under the target.

The rounds are the decoder's own (`SpeculativeDecoder._round`: the drafter samples, `verify_sampled`
accepts or resamples, the caches roll back). What makes 12,000 of them fit in well under a minute
is `MemoBackend`: a target pass or a draft step on tokens already seen from the same cache state
returns the logits computed the first time, so each distinct draft costs one real evaluation and
every other repeat runs only the sampling arithmetic.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats

from edgespec.decoding.backend import sync_cache
from edgespec.decoding.decoder import SpeculativeDecoder
from edgespec.decoding.drafters import DraftChoice, ModelDrafter
from edgespec.decoding.events import Token
from edgespec.decoding.ngram_drafter import NgramDrafter
from edgespec.decoding.plan import KSetting
from edgespec.decoding.sampling import SamplingParams, warp
from edgespec.decoding.simple_policies import FixedK
from edgespec.engine.engine import GenerateSettings

pytestmark = pytest.mark.slow

PARAMS = SamplingParams(temperature=0.7, top_k=20, top_p=0.8)
REPEATS = 2000
K = 2
PROMPT = "Write a Python function that counts the vowels in a string, then show how to call it."


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

    def eval_tree(self, pending, ids, parents):
        """The rounds here draft chains (FixedK): one memoised eval, cut back by keep_path."""
        self._path_start = len(self.cached) + 1
        return self.eval([pending, *ids], len(ids) + 1)

    def keep_path(self, path):
        del self.cached[self._path_start + len(path) :]

    def truncate(self, n):
        del self.cached[n:]


@pytest.fixture(scope="module")
def text(real_pair_engine):
    """A fixed prompt and the target's greedy continuation (the reply); and both models' warped
    distributions of each token given the text before it (one batched pass each): `p[m]` is the
    target's after `seq[:m]`. Positions in the reply are the ones tested."""
    for backend in (real_pair_engine.target, real_pair_engine.draft):
        backend.truncate(0)  # as in a new process: text an earlier module left cached would change the batches
    prompt = real_pair_engine.chat_tokens([{"role": "user", "content": PROMPT}])
    settings = GenerateSettings(max_tokens=48, draft="none", k=KSetting("fixed", 0))
    seq = prompt + [e.id for e in real_pair_engine.generate_tokens(prompt, settings) if isinstance(e, Token)]
    dists = {}
    for name, backend in (("p", real_pair_engine.target), ("q", real_pair_engine.draft)):
        backend.truncate(0)
        rows = backend.eval(seq[:-1], len(seq) - 1)
        dists[name] = [None] + [warp(rows[m - 1], PARAMS) for m in range(1, len(seq))]
    return seq, range(len(prompt) + 1, len(seq)), dists["p"], dists["q"]


def total_variation(p, q) -> float:
    ids = np.union1d(p.ids, q.ids)
    return 0.5 * float(np.abs(p.on(ids) - q.on(ids)).sum())


def repeat_round(engine, drafter, context: list[int]) -> tuple[Counter, np.ndarray, Counter]:
    """REPEATS rounds from the same cache state, seeds 0.. . Returns the first emitted token's
    counts, the target's warped distribution each round verified with (their mean, over the
    vocabulary), and how many drafted tokens were accepted per round."""
    target = MemoBackend(engine.target)
    if isinstance(drafter, ModelDrafter):
        drafter = ModelDrafter(MemoBackend(drafter.backend))
    decoder = SpeculativeDecoder(target, FixedK(K, DraftChoice(drafter.kind.value)), [drafter])
    target.eval(context[:-1], 1)  # the decoder's invariant: all but the pending token are cached
    first, accepted, verified = Counter(), Counter(), Counter()
    rows = {}
    for seed in range(REPEATS):
        target.truncate(len(context) - 1)
        step, new_ids = decoder._round(list(context), 16, PARAMS, np.random.default_rng(seed))
        assert step.k > 0  # a drafted round, not a plain step
        first[new_ids[0]] += 1
        accepted[step.accepted] += 1
        rows[id(target.last)] = target.last[0]  # the verify pass's row for the round's first token
        verified[id(target.last)] += 1
    expected = np.zeros(engine.target.n_vocab)
    for key, n in verified.items():
        p = warp(rows[key], PARAMS)
        expected[p.ids] += n * p.probs
    return first, expected, accepted


def chi_square_p(observed: Counter, expected: np.ndarray) -> float:
    """p-value of the observed first tokens against the expected counts; bins under 5 pooled."""
    outside = {t: n for t, n in observed.items() if expected[t] == 0}
    assert not outside, f"emitted tokens the target's warped distribution excludes: {outside}"
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


def check_rounds(engine, drafter, seq: list[int], where: list[int]) -> None:
    assert len(where) == 3, f"found only positions {where}"
    outcomes = Counter()
    for m in where:
        first, expected, accepted = repeat_round(engine, drafter, seq[:m])
        outcomes.update(accepted)
        pvalue = chi_square_p(first, expected)
        assert pvalue > 0.01, f"position {m}: p = {pvalue:.2g}, observed {dict(first)}"
    assert outcomes[0] and outcomes.total() > outcomes[0]  # both rejections and acceptances ran


def test_draft_model_rounds_emit_the_targets_distribution(real_engine, text):
    seq, reply, p, q = text
    # where the draft model often proposes what the target would not, yet not always
    where = [m for m in reply if len(p[m].ids) >= 2 and 0.1 <= total_variation(p[m], q[m]) <= 0.9]
    check_rounds(real_engine, ModelDrafter(real_engine.draft), seq, where[:3])


def test_ngram_rounds_emit_the_targets_distribution(real_engine, text):
    seq, reply, p, _ = text

    def copied(m):  # the token the n-gram drafter proposes first after seq[:m], or None
        draft = NgramDrafter().propose(seq[:m], K)
        return draft.ids[0] if draft.ids else None

    # Where the target is unsure and the copy is not certain to survive; first those where it may
    # (acceptance and the residual both run), then those where it never does (the residual is p).
    where = [m for m in reply if copied(m) is not None and len(p[m].ids) >= 2 and p[m].prob(copied(m)) <= 0.95]
    where.sort(key=lambda m: p[m].prob(copied(m)) == 0)
    check_rounds(real_engine, NgramDrafter(), seq, where[:3])
