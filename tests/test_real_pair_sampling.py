"""Sampled speculative decoding on the built-in pair follows the target's distribution.

At temperature 0.7 with the pair's own filters (top-k 20, top-p 0.8), at three drafted positions of
a fixed prompt, one speculative round is repeated 2,000 times from the same cache state with
different seeds, for the draft model and for n-gram drafts. The first token each round emits must
follow the target's warped distribution at that position (chi-square, expected counts under 5
pooled, p > 0.01), whatever was drafted. Positions are chosen where a verification that kept every
draft would show: where the draft model's distribution is far from the target's, and where the
n-gram copy is neither certain nor impossible under the target.

The rounds are the decoder's own, made cheap by memoised evaluations (tests/sampled_rounds.py):
12,000 of them fit in well under a minute.
"""

from __future__ import annotations

from collections import Counter

import pytest

from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.events import Token
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams, warp
from edgespec.engine.engine import GenerateSettings
from tests.sampled_rounds import chi_square_p, repeat_round, total_variation

pytestmark = pytest.mark.slow

PARAMS = SamplingParams(temperature=0.7, top_k=20, top_p=0.8)
REPEATS = 2000
K = 2
PROMPT = "Write a Python function that counts the vowels in a string, then show how to call it."


@pytest.fixture(scope="module")
def text(real_pair_engine):
    """A fixed prompt and the target's greedy continuation (the reply); and both models' warped
    distributions of each token given the text before it (one batched pass each): `p[m]` is the
    target's after `seq[:m]`. Positions in the reply are the ones tested."""
    for backend in (real_pair_engine.target, real_pair_engine.draft):
        backend.truncate(0)  # as in a new process: text an earlier module left cached would change the batches
    prompt = real_pair_engine.chat_tokens([{"role": "user", "content": PROMPT}])
    settings = GenerateSettings(max_tokens=48, draft="none", policy=PolicyChoice("fixed", 0))
    seq = prompt + [e.id for e in real_pair_engine.generate_tokens(prompt, settings) if isinstance(e, Token)]
    dists = {}
    for name, backend in (("p", real_pair_engine.target), ("q", real_pair_engine.draft)):
        backend.truncate(0)
        rows = backend.eval(seq[:-1], len(seq) - 1)
        dists[name] = [None] + [warp(rows[m - 1], PARAMS) for m in range(1, len(seq))]
    return seq, range(len(prompt) + 1, len(seq)), dists["p"], dists["q"]


def check_rounds(engine, drafter, seq: list[int], where: list[int]) -> None:
    assert len(where) == 3, f"found only positions {where}"
    outcomes = Counter()
    for m in where:
        first, expected, accepted = repeat_round(engine, drafter, seq[:m], PARAMS, K, REPEATS)
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
