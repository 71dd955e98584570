"""Telling a greedy output's parting from plain decoding at a near-tie from a bug: the noise floor,
the replay of the verify pass, and the verdict, on fakes whose batches carry a known noise and on
a tiny llama.cpp model."""

from __future__ import annotations

import json

import numpy as np
import pytest

import edgespec.engine.engine
from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.bench import modes, report, suites
from edgespec.decoding import decoder
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.quality.divergence import DIFF, TIE, explain_parting, first_divergence, verdict
from edgespec.quality.noise_floor import SIZES, calibration_tokens, measure_noise_floor
from tests.fakes import ArgmaxRecorder, MarkovBackend, fake_engine

GREEDY = SamplingParams()
TEXTS = [
    "def add(a, b):\n    return a + b\n\ndef add(",
    "for i in range(10): print(i)\nfor i in (",
    "hello world, hello",
    "abcabcabcabc",
]
PROMPTS = [suites.BenchPrompt(f"c/{i}", "code", "completion", 40, prompt=text) for i, text in enumerate(TEXTS)]


def accept_every_draft(logits, draft_ids, parents):
    """A broken greedy verification: every drafted token of a chain is kept."""
    return list(range(len(draft_ids))), int(np.argmax(logits[len(draft_ids)]))


# -- the rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gap_batched, gap_single, expected",
    [
        (0.2, -0.1, TIE),  # each evaluation prefers the token its own mode emitted, within the noise
        (0.0, 0.0, TIE),  # an exact tie
        (-0.4, -1.0, TIE),  # both prefer plain decoding's token, the verify pass by less than the floor
        (0.3, 0.4, TIE),  # both prefer the speculative token, the single step by less than the floor
        (-0.6, -1.0, DIFF),  # the verify pass preferred plain decoding's token beyond the noise: a bad accept
        (1.0, 0.7, DIFF),  # the single step cannot explain plain decoding's token
        (0.9, -0.3, DIFF),  # the two evaluations differ by more than noise can move a gap (2 x 0.5)
        (5.0, -5.0, DIFF),
    ],
)
def test_verdict(gap_batched, gap_single, expected):
    assert verdict(gap_batched, gap_single, 0.5) == expected


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 9, 3], [1, 2, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence([], [1]) == 0


# -- the noise floor -----------------------------------------------------------------------------


def test_the_noise_floor_is_what_batches_add_and_nothing_else():
    noisy = MarkovBackend(batch_noise=0.3)
    floor = measure_noise_floor(noisy, calibration_tokens(noisy))
    assert set(floor.largest) == set(floor.mean) == set(SIZES)
    assert floor.largest[2] == floor.largest[3] == 0.0  # the fake adds its noise to batches of 4 or more
    assert all(0.25 < floor.largest[n] <= 0.3 + 1e-6 for n in SIZES if n >= 4)
    assert all(0 < floor.mean[n] < floor.largest[n] for n in SIZES if n >= 4)
    assert floor.max == max(floor.largest.values()) and noisy.cached == []
    exact = MarkovBackend()
    assert measure_noise_floor(exact, calibration_tokens(exact)).max == 0.0


def test_the_noise_floor_of_a_tiny_llama_cpp_model(tiny_gguf):
    backend = LlamaCppBackend(tiny_gguf, 256, threads=2)
    try:
        floor = measure_noise_floor(backend, calibration_tokens(backend))
        assert backend.cached == []
    finally:
        backend.close()
    assert set(floor.largest) == set(SIZES)
    # f32 weights: batched kernels move the logits by a few thousandths at most (tiny_gguf's docstring)
    assert all(0.0 <= floor.mean[n] <= floor.largest[n] < 0.05 for n in SIZES)


def test_the_engine_measures_the_noise_floor_once_and_keeps_it(own_calibration_file, monkeypatch):
    measured = []

    def counting(backend, tokens):
        measured.append(len(tokens))
        return measure_noise_floor(backend, tokens)

    monkeypatch.setattr(edgespec.engine.engine, "measure_noise_floor", counting)
    engine = fake_engine(batch_noise=0.3)
    assert engine.saved_noise_floor() is None
    first = engine.noise_floor()
    assert engine.noise_floor() is first and len(measured) == 1
    saved = own_calibration_file.with_name("noise_floor.json")
    ((key, value),) = json.loads(saved.read_text()).items()
    assert key.startswith("floor-v2|") and value["4"]["max"] == pytest.approx(first.largest[4])

    again = fake_engine(batch_noise=0.3)
    assert again.noise_floor() == first and len(measured) == 1  # read back, not measured

    saved.write_text(json.dumps({key: {"4": {"max": "much"}}}))
    damaged = fake_engine(batch_noise=0.3)
    assert damaged.saved_noise_floor() is None
    assert damaged.noise_floor() == first and len(measured) == 2


# -- partings in the bench -----------------------------------------------------------------------


def test_partings_on_a_target_with_noisy_batches_are_ties():
    engine = fake_engine(batch_noise=0.3, noise=0.3)
    rows = modes.run_bench([engine], PROMPTS, modes.parse_modes("ar,k3,k6,auto", "model"), GREEDY)
    ar = {r.id: r.output_ids for r in rows if r.mode == "ar"}
    parted = [r for r in rows if r.mode != "ar" and r.vs_ar != "exact"]
    assert parted and all(r.vs_ar == TIE for r in parted)
    for r in parted:
        p = r.parting
        assert p.position == r.first_divergence and r.output_ids[: p.position] == ar[r.id][: p.position]
        assert (p.token, p.ar_token) == (r.output_ids[p.position], ar[r.id][p.position])
        # the replayed pass is the one that emitted the token, and the fake's single steps are plain decoding's
        assert p.gap_batched >= 0 >= p.gap_single and p.floor == engine.noise_floor().max
        round_ = max((x for x in r.rounds if x.start <= p.position), key=lambda x: x.start)
        assert p.batch == len(round_.drafted) + 1
    assert all(r.vs_ar == "exact" for r in rows if r.mode != "ar" and r not in parted)
    counts = {s["mode"]: s["vs_ar"] for s in report.summarize(rows)}
    assert counts["ar"] is None
    assert sum(counts[m][TIE] for m in ("k3", "k6", "auto")) == len(parted)
    assert modes.strict_failure(rows) is None


def test_a_broken_verification_is_a_DIFF(monkeypatch):
    monkeypatch.setattr(decoder, "verify_greedy", accept_every_draft)
    engine = fake_engine(batch_noise=0.3)
    rows = modes.run_bench([engine], PROMPTS, modes.parse_modes("ar,k3", "model"), GREEDY)
    diffs = [r for r in rows if r.vs_ar == DIFF]
    assert diffs
    for r in diffs:
        assert r.parting.gap_batched < -r.parting.floor  # the target's own pass preferred plain decoding's token
    failure = modes.strict_failure(rows)
    assert failure is not None and "\n" not in str(failure)
    assert f"{len(diffs)} greedy output(s)" in str(failure) and f"{diffs[0].id} k3 at token" in str(failure)


def test_sampled_and_peer_outputs_that_part_are_left_unchecked():
    engine = fake_engine(noise=0.5)
    rows = modes.run_bench([engine], PROMPTS[:1], modes.parse_modes("ar,k3", "model"), SamplingParams(1.0, seed=1))
    k3 = rows[1]
    assert k3.vs_ar == modes.UNCHECKED and k3.parting is None
    assert report.summarize(rows)[1]["vs_ar"] == {"exact": 0, "tie": 0, "DIFF": 0, "unchecked": 1}


# -- the replay on a real runtime ----------------------------------------------------------------


@pytest.mark.heavy
def test_the_replay_reproduces_the_verify_pass_of_llama_cpp(tiny_gguf, tiny_draft_gguf):
    """The bench's replay of a round gives the very logits the decoder verified with; and a token
    that plain decoding could not have emitted is a DIFF."""
    target, draft = LlamaCppBackend(tiny_gguf, 256, threads=2), LlamaCppBackend(tiny_draft_gguf, 256, threads=2)
    engine = Engine(
        PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), ModelSpec("d", "gguf"), "d", 256), target, draft
    )
    try:
        prompt = suites.BenchPrompt("p", "s", "completion", 40, prompt="def add(a, b):\n    return a + b\n\ndef add")
        prompt_ids = modes.prompt_ids(engine, prompt)
        floor = measure_noise_floor(target, calibration_tokens(target)).max
        recorder = engine.target = ArgmaxRecorder(target)
        _, ids, rounds = modes.generate(engine, prompt, GenerateSettings(40, GREEDY, "model", PolicyChoice("fixed", 4)))
        engine.target = target
        ends = [r.start for r in rounds[1:]] + [len(ids)]
        inside = [i for r, end in zip(rounds, ends, strict=False) for i in range(r.start + 1, end)]
        assert len(inside) >= 3  # tokens from rows past the first of their pass
        # Latest first: a replay leaves the cache as the run left it before the replayed round.
        for i in sorted(inside[-3:] + [rounds[0].start], reverse=True):
            recorded = recorder.rows[len(prompt_ids) + i - 1]
            runner_up = int(np.argsort(recorded)[-2])
            assert runner_up != ids[i]
            p = explain_parting(target, prompt_ids, ids[:i] + [runner_up], ids, rounds, floor)
            assert p.gap_batched == float(recorded[ids[i]] - recorded[runner_up])
            worst = int(np.argmin(recorded))
            assert explain_parting(target, prompt_ids, ids[:i] + [worst], ids, rounds, floor).verdict == DIFF
    finally:
        engine.close()
