"""The built-in Qwen2.5-Coder pair end to end (pulled by `make test` before the suite runs).

Greedy losslessness on a real quantized model is tested the honest way (docs/design.md, "One round"):
every emitted token is the target's argmax of the logits it was verified with, and where the
output parts from plain decoding it is at a near-tie of the logits, because a batch of n tokens does
not give bit-identical logits to n single steps. How near is the target's measured noise floor
(edgespec/quality/noise_floor.py), not a constant.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from edgespec.bench import modes, suites
from edgespec.decoding.events import Summary, Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.quality.divergence import TIE, explain_parting, verdict
from tests.fakes import ArgmaxRecorder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def floor(real_pair_engine) -> float:
    """The target's noise floor, measured for this session (about 13 s; conftest keeps the user's
    saved one out of the tests)."""
    return real_pair_engine.noise_floor().max


def generate(engine: Engine, ids, settings) -> tuple[list[int], Summary]:
    events = list(engine.generate_tokens(ids, settings))
    return [e.id for e in events if isinstance(e, Token)], events[-1]


@pytest.mark.parametrize("prompt", suites.select(suites.load_suite(suites.DEV_SET), 1, None), ids=lambda p: p.id)
def test_greedy_speculation_is_the_targets_argmax_and_matches_plain(real_engine, floor, prompt):
    ids = modes.prompt_ids(real_engine, prompt)
    real_target = real_engine.target
    recorder = ArgmaxRecorder(real_target)
    real_engine.target = recorder
    try:
        plain, _ = generate(
            real_engine, ids, GenerateSettings(max_tokens=48, draft="none", policy=PolicyChoice("fixed", 0))
        )
        plain_rows = dict(recorder.rows)  # the single steps plain decoding chose from
        for draft, choice in (
            ("model", PolicyChoice("fixed", 3)),
            ("ngram", PolicyChoice("fixed", 6)),
            ("auto", PolicyChoice("auto")),
        ):
            recorder.argmax_after.clear()
            recorder.rows.clear()
            real_target.truncate(0)  # every position is evaluated (and recorded) afresh
            out, summary = generate(real_engine, ids, GenerateSettings(max_tokens=48, draft=draft, policy=choice))
            recorder.check_greedy(len(ids), out)
            if draft == "model":
                assert summary.drafted > 0 and summary.accepted > 0
            if out != plain:
                i = next((i for i, (a, b) in enumerate(zip(out, plain, strict=False)) if a != b), None)
                assert i is not None, "one output is a prefix of the other but they differ in length"
                verified, single = recorder.rows[len(ids) + i - 1], plain_rows[len(ids) + i - 1]
                gaps = [float(row[out[i]] - row[plain[i]]) for row in (verified, single)]
                assert verdict(*gaps, floor) == TIE, f"{draft}: parted at token {i}: gaps {gaps}, floor {floor}"
    finally:
        real_engine.target = real_target


def test_the_bench_replays_the_verify_pass_bit_for_bit(real_engine, floor):
    """A parting is explained with the logits the decoder really verified with: the replay of a
    round (same tokens, same batch size, the run's own cache) gives them exactly, here where batch
    sizes 4 and up run other kernels than single steps."""
    prompt = suites.select(suites.load_suite(suites.DEV_SET), 1, "code-edit")[0]
    ids = modes.prompt_ids(real_engine, prompt)
    real_target = real_engine.target
    recorder = real_engine.target = ArgmaxRecorder(real_target)
    try:
        settings = GenerateSettings(max_tokens=32, draft="model", policy=PolicyChoice("fixed", 5))
        _, out, rounds = modes.generate(real_engine, replace(prompt, max_tokens=32), settings)
    finally:
        real_engine.target = real_target
    # tokens from a row past the first of a pass of 4 or more tokens
    ends = [r.start for r in rounds[1:]] + [len(out)]
    inside = [i for r, end in zip(rounds, ends, strict=False) if len(r.drafted) >= 3 for i in range(r.start + 1, end)]
    assert len(inside) >= 3
    for i in sorted(inside[-3:], reverse=True):  # latest first: a replay keeps the run's cache before its round
        verified = recorder.rows[len(ids) + i - 1]
        runner_up = int(np.argsort(verified)[-2])
        parting = explain_parting(real_target, ids, out[:i] + [runner_up], out, rounds, floor)
        assert parting.gap_batched == float(verified[out[i]] - verified[runner_up])


def test_sampled_output_is_reproducible_with_a_seed(real_engine):
    """Same seed, same cache state (as in two `edgespec run` calls) -> the same text. The caches are
    cleared because a reused prompt prefix changes batch shapes, hence the logits' last bits."""
    settings = GenerateSettings(
        max_tokens=40,
        draft="model",
        policy=PolicyChoice("fixed", 3),
        sampling=SamplingParams(temperature=0.7, top_k=20, top_p=0.8, seed=7),
    )
    ids = real_engine.chat_tokens([{"role": "user", "content": "Name three sorting algorithms."}])

    def fresh(settings):
        real_engine.target.truncate(0)
        real_engine.draft.truncate(0)
        return generate(real_engine, ids, settings)

    first, _ = fresh(settings)
    second, _ = fresh(settings)
    assert first == second
    other, _ = fresh(GenerateSettings(**{**settings.__dict__, "sampling": SamplingParams(0.7, 20, 0.8, seed=8)}))
    assert other != first or len(first) < 5
