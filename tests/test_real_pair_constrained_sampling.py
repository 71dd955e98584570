"""Sampled speculative decoding on the built-in pair under a JSON schema follows the target's
distribution restricted to the schema, and does not when verification drops the mask.

The schema asks for a fruit's colour, shape, taste and origin, each one of a few words that the
prompts do not suggest for a ripe banana, most spelt in more than one token (so that a draft of
K = 2 tokens drafts into the word). At temperature 0.7 with the pair's filters (top-k 20, top-p
0.8), at three drafted positions of the target's greedy replies under the schema, one speculative
round is repeated 2,000 times from the same cache state (tests/sampled_rounds.py), with the
matcher where the reply left it, drafted by the draft model under the mask and by n-gram copies
of the example in one prompt. The first token each round emits must follow the target's warped
distribution there, masked by the schema (chi-square, p > 0.01).

The positions are where the mask matters, so that the test cannot pass vacuously: the unmasked
target puts at least a fifth of its mass on tokens the schema forbids (a banana is yellow), the
draft model would propose forbidden tokens too, and the masked drafts are often rejected (or the
copy is not certain to survive). Dropping the mask from verification (`_masked_rows` made the
identity, as tests/test_constraints.py does on the tiny model), the same rounds emit tokens the
schema forbids: p = 0 at every position.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from edgespec.constraints.guidance import ConstraintSpec, GuidanceMatcher
from edgespec.decoding.constraint import masked
from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.decoder import SpeculativeDecoder
from edgespec.decoding.drafters import DraftChoice, Drafter
from edgespec.decoding.events import Token
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import Dist, SamplingParams, warp
from edgespec.engine.engine import Engine, GenerateSettings
from tests.sampled_rounds import chi_square_p, repeat_round, total_variation

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

PARAMS = SamplingParams(temperature=0.7, top_k=20, top_p=0.8)
REPEATS = 2000
REPEATS_UNMASKED = 200  # a fifth of the mass or more is forbidden there: enough to emit some of it
K = 2
FRUIT = {
    "type": "object",
    "properties": {
        "colour": {"enum": ["chartreuse", "maroon", "periwinkle", "teal"]},
        "shape": {"enum": ["hexagonal", "spherical", "cuboid"]},
        "taste": {"enum": ["bitter", "salty", "umami", "metallic"]},
        "origin": {"enum": ["Iceland", "Mongolia", "Greenland"]},
    },
    "required": ["colour", "shape", "taste", "origin"],
    "additionalProperties": False,
}
SPEC = ConstraintSpec.json_schema(FRUIT)
PROMPTS = (
    "Describe a ripe banana as JSON: its colour, shape, taste and origin.",
    # an example for the n-gram drafter to copy from
    'A plum is {"colour": "maroon", "shape": "spherical", "taste": "bitter", "origin": "Mongolia"}. '
    "Describe a ripe banana the same way.",
)
MATTERS = 0.2  # the least mass on forbidden tokens where the mask is said to matter


@dataclass(frozen=True)
class Position:
    """A drafted position of a reply: the text before it (`context`, the reply from `start` on),
    what the schema allows there, and the warped distributions of the target (`p`) and the draft
    model (`q`) there, masked and `free` (unmasked); `copied`: the masked target's probability of
    the n-gram drafter's first token there, under the schema (None: it copies nothing)."""

    context: list[int]
    start: int
    allowed: np.ndarray
    p: Dist
    p_free: Dist
    q: Dist
    q_free: Dist
    copied: float | None

    def forbidden(self, dist: Dist) -> float:
        return float(dist.probs[~self.allowed[dist.ids]].sum())

    def matcher(self, engine: Engine) -> GuidanceMatcher:
        """A matcher of the schema that has consumed the reply so far."""
        matcher = engine.constraint(SPEC)
        assert all(matcher.advance(t) for t in self.context[self.start :])
        return matcher


@pytest.fixture(scope="module")
def positions(real_pair_engine) -> list[Position]:
    """Each prompt's greedy reply under the schema, and its positions where the schema leaves a
    choice (a round at a forced one verifies the forced text, drafting nothing)."""
    engine, out = real_pair_engine, []
    for text in PROMPTS:
        for backend in (engine.target, engine.draft):
            backend.truncate(0)  # as in a new process: text cached earlier would change the batches
        prompt = engine.chat_tokens([{"role": "user", "content": text}])
        # greedy; the n-gram drafter present lets a round verify the schema's forced text at once
        settings = GenerateSettings(
            max_tokens=64, draft=DraftChoice.NGRAM, policy=PolicyChoice("fixed", 4), constraint=SPEC
        )
        seq = prompt + [e.id for e in engine.generate_tokens(prompt, settings) if isinstance(e, Token)]
        rows = {}
        for name, backend in (("p", engine.target), ("q", engine.draft)):
            backend.truncate(0)
            rows[name] = backend.eval(seq[:-1], len(seq) - 1)  # row m - 1: the distribution of seq[m]
        matcher = engine.constraint(SPEC)
        for m in range(len(prompt), len(seq)):
            if m > len(prompt) and not matcher.forced():
                allowed = matcher.allowed().copy()
                p_row, q_row = rows["p"][m - 1], rows["q"][m - 1]
                p = warp(masked(p_row, allowed), PARAMS)
                q = warp(masked(q_row, allowed), PARAMS)
                copy = NgramDrafter().propose(seq[:m], K, constraint=matcher).ids[:1]
                copied = p.prob(copy[0]) if copy else None
                out.append(
                    Position(seq[:m], len(prompt), allowed, p, warp(p_row, PARAMS), q, warp(q_row, PARAMS), copied)
                )
            assert matcher.advance(seq[m])
    return out


def model_positions(positions: list[Position]) -> list[Position]:
    """Where the mask matters to the target and to the draft model, and the masked drafts are
    often rejected."""
    return [
        x
        for x in positions
        if len(x.p.ids) >= 2
        and x.forbidden(x.p_free) >= MATTERS
        and x.forbidden(x.q_free) >= MATTERS
        and total_variation(x.p, x.q) >= 0.1
    ]


def ngram_positions(positions: list[Position]) -> list[Position]:
    """Where the mask matters to the target and there is a copy not certain to survive; first those
    where it may (acceptance and the residual both run), then those where it never does."""
    where = [
        x
        for x in positions
        if x.copied is not None and x.copied <= 0.95 and len(x.p.ids) >= 2 and x.forbidden(x.p_free) >= MATTERS
    ]
    return sorted(where, key=lambda x: x.copied == 0)


def first_tokens(engine: Engine, drafter: Drafter, x: Position, repeats: int) -> tuple[float, int, Counter]:
    """`repeats` rounds at `x` under the schema: the chi-square p-value of their first tokens against
    the masked target, how many of those tokens the schema forbids, and how many drafted tokens the
    rounds accepted."""
    first, expected, accepted = repeat_round(engine, drafter, x.context, PARAMS, K, repeats, x.matcher(engine))
    return chi_square_p(first, expected), sum(n for t, n in first.items() if not x.allowed[t]), accepted


@pytest.mark.parametrize("kind", ["model", "ngram"])
def test_rounds_under_a_schema_emit_the_masked_target_and_do_not_without_the_mask(
    real_engine, positions, kind, monkeypatch
):
    if kind == "model":
        drafter: Drafter = ModelDrafter(real_engine.draft)
        where = model_positions(positions)[:3]
    else:
        drafter, where = NgramDrafter(), ngram_positions(positions)[:3]
    assert len(where) == 3, f"found only {len(where)} positions"
    outcomes: Counter = Counter()
    for x in where:
        pvalue, forbidden, accepted = first_tokens(real_engine, drafter, x, REPEATS)
        assert pvalue > 0.01 and forbidden == 0, f"position {len(x.context)}: p = {pvalue:.2g}"
        outcomes.update(accepted)
        # verification without the mask (the drafts still under it), from the same cache state
        with monkeypatch.context() as patch:
            patch.setattr(SpeculativeDecoder, "_masked_rows", staticmethod(lambda logits, masks: logits))
            pvalue, forbidden, _ = first_tokens(real_engine, drafter, x, REPEATS_UNMASKED)
        assert pvalue < 1e-3 and forbidden > 0, f"position {len(x.context)} unmasked: p = {pvalue:.2g}"
    assert outcomes[0] and outcomes.total() > outcomes[0]  # both rejections and acceptances ran
