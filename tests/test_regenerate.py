"""A regenerated reply drafts from the reply it replaces (`GenerateSettings.earlier_reply`, drafter kind
"replaced"), with no history to find it in, and stays the target's: greedy, the same reply; sampled,
the same distribution. On the tiny pair of tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np
import pytest

import edgespec.decoding.decoder
from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.decoding.backend import sync_cache
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Summary, Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams, warp
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.models.registry import ModelSpec, PairConfig
from tests.distribution_fit import fit_p_value

MESSAGES = [{"role": "user", "content": "write a loop"}]


@pytest.fixture
def tiny_pair(tiny_gguf, tiny_draft_gguf) -> Iterator[Engine]:
    """The tiny pair with no history and no repository to draft from (as `--no-history`), on one
    thread it keeps (no thread policy: the replies of one seed are reproducible)."""
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), ModelSpec("d", "gguf"), "model", 512, threads=1)
    engine = Engine(pair, LlamaCppBackend(tiny_gguf, 512, threads=1), LlamaCppBackend(tiny_draft_gguf, 512, threads=1))
    yield engine
    engine.close()


def reply(engine: Engine, events: Iterator) -> tuple[tuple[int, ...], str, Summary]:
    events = list(events)
    tokens = [e for e in events if isinstance(e, Token)]
    return tuple(t.id for t in tokens), "".join(t.text for t in tokens), events[-1]


@pytest.mark.parametrize(
    "draft, choice", [(DraftChoice.NGRAM, PolicyChoice("fixed", 4)), (DraftChoice.AUTO, PolicyChoice("auto"))]
)
def test_a_greedy_regenerate_drafts_from_the_reply_it_replaces_and_equals_it(tiny_pair, draft, choice):
    settings = GenerateSettings(60, draft=draft, policy=choice)
    first_ids, first, summary = reply(tiny_pair, tiny_pair.chat(MESSAGES, settings))
    assert "replaced" not in summary.lookups and not summary.sampled
    again_ids, _, again = reply(tiny_pair, tiny_pair.chat(MESSAGES, replace(settings, earlier_reply=first)))
    assert again_ids == first_ids  # greedy: the target's own reply, however it was drafted
    assert again.lookups["replaced"] > 0 and again.accepted_by["replaced"] > 0
    # the same call without the reply it replaces: nothing else holds it (no history here)
    _, _, plain = reply(tiny_pair, tiny_pair.chat(MESSAGES, settings))
    assert "replaced" not in plain.lookups and not plain.accepted_by.get("replaced")


# Sampled: replies of N tokens, each from the target's two likeliest (small enough to enumerate,
# long enough that a round after the first token drafts from the replaced reply).
N = 4
SAMPLING = SamplingParams(temperature=1.0, top_k=2)
PROMPT = "def area(w, h):"  # its likeliest reply is valid UTF-8: as text it tokenizes back to itself


def exact_distribution(engine: Engine, prompt: list[int]) -> dict[tuple[int, ...], float]:
    """The probability of each reply of at most N tokens under the warped target."""
    target, out = engine.target, {}

    def walk(path: list[int], p: float) -> None:
        if len(path) == N:
            out[tuple(path)] = out.get(tuple(path), 0.0) + p
            return
        dist = warp(sync_cache(target, prompt + path, 1)[0], SAMPLING)
        for token, q in zip(dist.ids.tolist(), dist.probs.tolist(), strict=True):
            if token in target.eos_ids:
                out[tuple(path)] = out.get(tuple(path), 0.0) + p * q
            else:
                walk([*path, token], p * q)

    walk([], 1.0)
    return out


def sampled(engine: Engine, prompt: list[int], n: int, earlier: str | None) -> tuple[list[tuple[int, ...]], int]:
    """The replies of seeds 0..n-1 and how many drafted tokens of the replaced reply were taken."""
    replies, taken = [], 0
    for seed in range(n):
        settings = GenerateSettings(
            N, replace(SAMPLING, seed=seed), DraftChoice.NGRAM, PolicyChoice("fixed", 3), earlier_reply=earlier
        )
        ids, _, summary = reply(engine, engine.generate_tokens(list(prompt), settings))
        replies.append(ids)
        taken += summary.accepted_by.get("replaced", 0)
        assert summary.sampled
    return replies, taken


def as_keys(replies: Sequence[tuple[int, ...]]) -> list[str]:
    return [" ".join(map(str, r)) for r in replies]


@pytest.mark.heavy
def test_a_sampled_regenerate_keeps_the_targets_distribution(tiny_pair, monkeypatch):
    prompt = tiny_pair.target.tokenize(PROMPT, special=False)
    exact = exact_distribution(tiny_pair, prompt)
    assert abs(sum(exact.values()) - 1) < 1e-9
    likeliest = max(exact, key=exact.__getitem__)
    text = b"".join(tiny_pair.target.token_bytes(t) for t in likeliest).decode()
    expected = {" ".join(map(str, r)): p for r, p in exact.items()}

    without, taken = sampled(tiny_pair, prompt, 800, None)
    assert taken == 0 and fit_p_value(as_keys(without), expected) > 1e-3
    regenerated, taken = sampled(tiny_pair, prompt, 800, text)
    assert taken > 100  # the replaced reply was drafted from, often taken
    assert fit_p_value(as_keys(regenerated), expected) > 1e-3

    # the test sees a bias: verification that takes every copied token skews replies to the replaced one
    def take_every_copy(logits: np.ndarray, ids, parents, dists, params, rng):
        return list(range(len(ids))), warp(logits[len(ids)], params).sample(rng)

    monkeypatch.setattr(edgespec.decoding.decoder, "verify_sampled", take_every_copy)
    assert fit_p_value(as_keys(sampled(tiny_pair, prompt, 300, text)[0]), expected) < 1e-3
