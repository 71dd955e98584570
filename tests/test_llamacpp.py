"""The real llama.cpp backend on a tiny GGUF written by the tests (milliseconds to load)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.backends.llamacpp_runtime import quantize
from edgespec.decoding.backend import (
    BackendError,
    ContextOverflow,
    common_prefix,
    exact_end,
    reused_prefix,
    sync_cache,
)
from edgespec.decoding.copying.ngram import NgramDrafter
from edgespec.decoding.costs.model import CostModel
from edgespec.decoding.decoder import Reply, SpeculativeDecoder
from edgespec.decoding.events import Token
from edgespec.decoding.model_drafter import ModelDrafter
from edgespec.decoding.policy.controller import AutoK
from edgespec.decoding.policy.simple_policies import FixedK
from edgespec.decoding.sampling import SamplingParams, warp
from edgespec.decoding.tree import ROOT, chain
from edgespec.testing.tiny_gguf import FOREIGN_TOKENS, write_tiny_gguf
from tests.fakes import ArgmaxRecorder


@pytest.fixture()
def target(tiny_gguf):
    b = LlamaCppBackend(tiny_gguf, 256, threads=2, read_chunk=32)  # whole chunks fit the tiny context
    yield b
    b.close()


@pytest.fixture()
def draft(tiny_draft_gguf):
    b = LlamaCppBackend(tiny_draft_gguf, 256, threads=2)
    yield b
    b.close()


PROMPT_TEXT = "def add(a, b):\n    return a + b\n\ndef add"


def test_logits_only_where_asked_and_rollback_reproduces_them(target):
    ids = target.tokenize(PROMPT_TEXT)
    full = np.array(target.eval(ids, 3))
    assert full.shape == (3, target.n_vocab) and full.dtype == np.float32
    assert target.cached == ids
    target.truncate(len(ids) - 2)
    assert target.cached == ids[:-2]
    again = np.array(target.eval(ids[-2:], 2))
    np.testing.assert_allclose(again, full[1:], atol=5e-3)
    with pytest.raises(ContextOverflow):
        target.eval([1] * 300, 1)


def test_tokens_roundtrip_bytes_and_chat_template(target):
    text = "héllo 世界\n\tok"
    ids = target.tokenize(text, special=False)
    assert b"".join(target.token_bytes(i) for i in ids).decode() == text
    prompt = target.chat_prompt([{"role": "user", "content": "hi"}])
    assert prompt.endswith("<|im_start|>assistant\n")
    assert target.tokenize("<|im_end|>", special=True) != target.tokenize("<|im_end|>", special=False)


@pytest.mark.parametrize("mode", ["model", "ngram", "auto"])
def test_greedy_speculative_emits_the_targets_argmax_and_matches_plain(target, draft, mode):
    prompt = target.tokenize(PROMPT_TEXT)
    plain = [
        e.id
        for e in SpeculativeDecoder(target, FixedK(0, "none")).generate(prompt, 48, SamplingParams())
        if isinstance(e, Token)
    ]
    target.truncate(0)
    rec = ArgmaxRecorder(target)
    policy = AutoK("auto", CostModel()) if mode == "auto" else FixedK(4, mode)
    if mode == "auto":
        policy.costs.calibrate(target, draft)
    decoder = SpeculativeDecoder(
        rec, policy, [d for d in (ModelDrafter(draft), NgramDrafter()) if mode in ("auto", d.kind)]
    )
    events = list(decoder.generate(prompt, 48, SamplingParams()))
    emitted = [e.id for e in events if isinstance(e, Token)]
    rec.check_greedy(len(prompt), emitted)
    # Batched and single-token logits differ in the last bits; where the outputs part, it must be
    # at a near-tie of the plain run's logits.
    if emitted != plain:
        i = next(i for i, (a, b) in enumerate(zip(emitted, plain, strict=False)) if a != b)
        row = rec.rows[len(prompt) + i - 1]
        assert abs(row[emitted[i]] - row[plain[i]]) < 1e-2
    if mode == "model":
        assert events[-1].accepted > 0


@pytest.mark.heavy
def test_first_speculative_token_follows_the_target_distribution(target, draft):
    """Chi-square: the first token a speculative round emits after a fixed context is distributed
    as the target's warped p, whatever the draft proposed."""
    params = SamplingParams(temperature=1.0, top_k=12)
    prompt = target.tokenize(PROMPT_TEXT)
    p = warp(np.array(sync_cache(target, prompt, 1)[0]), params)
    decoder = SpeculativeDecoder(target, FixedK(3, "model"), [ModelDrafter(draft)])
    rng = np.random.default_rng(0)
    counts: dict[int, int] = {}
    n = 1000
    for _ in range(n):
        target.truncate(len(prompt) - 1)
        step, new_ids = decoder._round(Reply(list(prompt), len(prompt), params, rng), 3)
        counts[new_ids[0]] = counts.get(new_ids[0], 0) + 1
    assert set(counts) <= set(p.ids.tolist())
    observed = np.array([counts.get(int(t), 0) for t in p.ids])
    expected = p.probs * n
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 5:
        obs, exp = obs[:-1], exp[:-1] * obs[:-1].sum() / exp[:-1].sum()
    assert stats.chisquare(obs, exp).pvalue > 0.001


def test_bad_file_is_a_one_line_error(tmp_path):
    from edgespec.decoding.backend import BackendError

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(BackendError, match="could not load"):
        LlamaCppBackend(bad, 128)


def test_quantize_writes_a_file_that_loads_and_predicts_like_the_original(tmp_path, tiny_gguf):
    """llama.cpp's quantizer behind one call (benchmarks/gpu_check.py writes its Q4_K_M models with it)."""
    out = quantize(tiny_gguf, tmp_path / "tiny-q8_0.gguf", "Q8_0", threads=1)
    assert out.stat().st_size < tiny_gguf.stat().st_size / 3  # f32 to 8.5 bits a weight, the norms kept
    prompt = list(range(97, 117))
    rows = []
    for path in (tiny_gguf, out):
        backend = LlamaCppBackend(path, 64, threads=1)
        try:
            rows.append(np.array(backend.eval(prompt, 4)))
        finally:
            backend.close()
    assert (rows[0].argmax(axis=1) == rows[1].argmax(axis=1)).all()
    with pytest.raises(BackendError, match=r"^llama.cpp has no file type 'Q3_Z' \(e.g. Q4_K_M, Q4_0, Q8_0\)$"):
        quantize(tiny_gguf, tmp_path / "x.gguf", "Q3_Z")


def test_quantize_of_a_file_that_is_not_a_gguf_says_why_llama_cpp_refused(tmp_path):
    """A failed quantization is a BackendError naming the cause llama.cpp logged."""
    bad = tmp_path / "notes.gguf"
    bad.write_text("not a model")
    with pytest.raises(BackendError, match=r"^llama.cpp could not quantize .*notes.gguf to Q8_0: .*magic"):
        quantize(bad, tmp_path / "x.gguf", "Q8_0", threads=1)


# -- llama.cpp's log in our errors ----------------------------------------------------------------


def test_a_failure_quotes_the_first_error_of_its_own_operation(tmp_path, tiny_gguf):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(tiny_gguf.read_bytes()[:200_000])
    with pytest.raises(BackendError) as load:
        LlamaCppBackend(broken, 256)
    assert "not within the file bounds" in str(load.value)  # the cause, not "failed to load model"
    backend = LlamaCppBackend(tiny_gguf, 256, threads=2)
    try:
        with pytest.raises(BackendError) as decode:
            backend.eval([10**6], 1)
    finally:
        backend.close()
    assert "invalid token" in str(decode.value) and "file bounds" not in str(decode.value)


def test_warnings_are_never_quoted_as_the_cause(tmp_path):
    """llama.cpp warns about this file's tokens, then refuses it for its weights' shape."""
    path = write_tiny_gguf(tmp_path / "foreign.gguf", tokens=FOREIGN_TOKENS)
    with pytest.raises(BackendError) as e:
        LlamaCppBackend(path, 256)
    assert "wrong shape" in str(e.value)
    assert "control-looking" not in str(e.value) and "special_eos_id" not in str(e.value)


# -- draft trees: one batch, one sequence per branch -------------------------------------------------

TREE_IDS = [104, 101, 108, 119, 111, 32]  # "h" "e" "l" under it; "w" "o" under that; " "
TREE = [ROOT, 0, 1, ROOT, 3, ROOT]  # branches: 0-1-2, 3-4, 5


def _fresh_rows(path, tokens: list[int], n_logits: int) -> np.ndarray:
    b = LlamaCppBackend(path, 256, threads=2)
    try:
        return np.array(b.eval(tokens, n_logits))
    finally:
        b.close()


def test_a_tree_pass_gives_each_node_the_logits_of_its_own_branch(target, tiny_gguf):
    ids = target.tokenize(PROMPT_TEXT)
    target.eval(ids[:-1], 1)
    rows = np.array(target.eval_tree(ids[-1], TREE_IDS, TREE))
    assert rows.shape == (len(TREE) + 1, target.n_vocab) and target.cached == ids
    for branch in ([0, 1, 2], [3, 4], [5]):
        want = _fresh_rows(tiny_gguf, ids + [TREE_IDS[n] for n in branch], len(branch) + 1)
        np.testing.assert_allclose(rows[[0, *(n + 1 for n in branch)]], want, atol=5e-3)
    target.keep_path([])
    assert target.cached == ids


@pytest.mark.parametrize("need", [[False, True, True, False, True, False, False], [False] * 7])
def test_rows_not_needed_come_back_zero_and_the_others_unchanged(target, need):
    """Rows `need` leaves out skip llama.cpp's output layer: zero here, the rest as a pass with every
    row's logits gives them, and the cache is the same."""
    ids = target.tokenize(PROMPT_TEXT)
    target.eval(ids[:-1], 1)
    every = np.array(target.eval_tree(ids[-1], TREE_IDS, TREE))
    target.keep_path([])
    target.truncate(len(ids) - 1)
    rows = np.array(target.eval_tree(ids[-1], TREE_IDS, TREE, need))
    target.keep_path([3, 4])
    assert target.cached == ids + [TREE_IDS[3], TREE_IDS[4]]
    wanted = np.array(need)
    assert not rows[~wanted].any()
    np.testing.assert_allclose(rows[wanted], every[wanted], atol=5e-3)


@pytest.mark.parametrize("path", [[3, 4], [5], [0, 1], []])
def test_after_a_branch_wins_the_cache_holds_exactly_the_committed_text(target, tiny_gguf, path):
    """The next pass reads the committed text and the accepted path only: it gives a fresh
    evaluation's logits (within the batch noise), and bit for bit the same whatever the rejected
    branches held."""
    ids = target.tokenize(PROMPT_TEXT)
    committed = ids + [TREE_IDS[n] for n in path]
    after = []
    for other in (0, 7):  # the same accepted path, different rejected branches
        target.truncate(0)
        target.eval(ids[:-1], 1)
        tree_ids = [t if n in path else t + other for n, t in enumerate(TREE_IDS)]
        target.eval_tree(ids[-1], tree_ids, TREE)
        target.keep_path(path)
        assert target.cached == committed
        after.append(np.array(target.eval([97, 98], 2)))
    np.testing.assert_array_equal(after[0], after[1])
    np.testing.assert_allclose(after[0], _fresh_rows(tiny_gguf, committed + [97, 98], 2), atol=5e-3)
    target.truncate(len(ids))  # and rolling back within the kept path works as for any text
    np.testing.assert_allclose(target.eval([97], 1), _fresh_rows(tiny_gguf, ids + [97], 1), atol=5e-3)


def test_a_chain_is_verified_by_the_same_batch_as_eval(target):
    ids = target.tokenize(PROMPT_TEXT)
    target.eval(ids[:-1], 1)
    rows = np.array(target.eval_tree(ids[-1], TREE_IDS[:3], chain(3)))
    target.keep_path([0, 1, 2])
    target.truncate(len(ids) - 1)
    np.testing.assert_array_equal(rows, target.eval([ids[-1], *TREE_IDS[:3]], 4))


def test_reads_are_cut_at_fixed_chunks_and_only_whole_chunks_from_the_start_are_kept(target):
    chunk = target.read_chunk
    text = [int(t) for t in np.random.default_rng(0).integers(3, 200, size=3 * chunk + 10)]
    sync_cache(target, text[: 2 * chunk + 5], 1)
    assert target.exact == 2 * chunk  # the last, partial chunk is not what a longer read forms
    for t in text[2 * chunk + 5 : 2 * chunk + 9]:  # a reply: single-token passes
        target.eval([t], 1)
    assert target.exact == 2 * chunk
    # another prompt sharing all of it keeps only the whole chunks, and reads on from their end
    sync_cache(target, text, 1)
    assert target.cached == text and target.exact == 3 * chunk
    target.truncate(chunk + 3)
    assert target.exact == chunk
    with pytest.raises(ValueError, match="exact"):
        target.save_state()  # only an exact cache is saved: a loaded state counts as exact
    target.truncate(0)  # rows asked across chunks come back whole
    many = target.eval(text, chunk + 10)
    assert many.shape == (chunk + 10, target.n_vocab)
    target.truncate(len(text) - chunk - 10)
    assert np.allclose(many, target.eval(text[-chunk - 10 :], chunk + 10), atol=1e-3)
    target.truncate(chunk)
    state = target.save_state()
    target.load_state(state, text[:chunk])
    assert target.exact == chunk == len(target.cached)


def test_a_resumed_read_computes_the_cold_reads_logits_bit_for_bit(target):
    """Whatever was read before and however (another prompt, a reply token by token, a cut), a read
    of a prompt gives the logits a read from an empty cache gives."""
    rng = np.random.default_rng(1)
    prompt = [int(t) for t in rng.integers(3, 200, size=3 * target.read_chunk + 7)]
    target.truncate(0)
    cold = sync_cache(target, prompt, 1).copy()
    for cut in (1, target.read_chunk - 1, target.read_chunk + 1, 2 * target.read_chunk, len(prompt) - 2):
        target.truncate(0)
        sync_cache(target, prompt[:cut], 1)
        for t in rng.integers(3, 200, size=5):  # an earlier reply after that prefix
            target.eval([int(t)], 1)
        assert np.array_equal(sync_cache(target, prompt, 1), cold), cut


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_a_prompt_changed_near_its_end_keeps_its_tail_chunks_and_reads_as_a_cold_read(target, data):
    """An editor's keystroke: the next prompt shares all but the end of the last one. The read keeps
    the tail chunks before the change when both prompts end in the same read chunk (only the whole
    chunks otherwise), and gives a cold read's logits bit for bit."""
    chunk, tail = target.read_chunk, target.tail_chunk
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    first = [int(t) for t in rng.integers(3, 200, size=data.draw(st.integers(chunk + 1, 3 * chunk)))]
    at = data.draw(st.integers(1, len(first) - 1))
    second = first[:at] + [int(t) for t in rng.integers(3, 200, size=data.draw(st.integers(0, 2 * tail)))]
    second += first[at + data.draw(st.integers(0, 3)) :]
    target.truncate(0)
    cold = sync_cache(target, second, 2).copy()
    target.truncate(0)
    sync_cache(target, first, 1)
    assert target.exact == len(first) - len(first) % chunk
    assert target.exact_tail == (len(first) - target.exact) - (len(first) - target.exact) % tail
    for t in rng.integers(3, 200, size=3):  # the reply to the first
        target.eval([int(t)], 1)
    shared = min(common_prefix(first, second), len(second) - 2)
    same_last_chunk = len(first) // chunk == len(second) // chunk
    if same_last_chunk and shared >= target.exact:
        expected = min(shared - shared % tail, target.exact + target.exact_tail)
    else:
        expected = min(shared - shared % chunk, target.exact)
    assert reused_prefix(target, second, 2) == expected
    assert np.array_equal(sync_cache(target, second, 2), cold)


def test_a_saved_state_ending_in_tail_chunks_loads_them_as_exact(target):
    chunk, tail = target.read_chunk, target.tail_chunk
    text = [int(t) for t in np.random.default_rng(2).integers(3, 200, size=chunk + 2 * tail + 3)]
    target.truncate(0)
    sync_cache(target, text, 1)
    target.truncate(exact_end(target))
    assert len(target.cached) == chunk + 2 * tail
    state = target.save_state()
    target.truncate(0)
    target.load_state(state, text[: chunk + 2 * tail])
    assert (target.exact, target.exact_tail) == (chunk, 2 * tail)
    target.truncate(chunk + tail + 1)
    assert (target.exact, target.exact_tail) == (chunk, tail)
