"""The transformers backend on tiny models built here from configs (edgespec/testing/tiny_hf.py):
cache bookkeeping and rollback, logits, token bytes, chat template, the GGUF conversion cache, the
vocabulary reader, the decode loop and draft trees. What it agrees to load, in what precision and
quantization: tests/test_hf_loading.py."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgespec.backends import hf  # noqa: E402
from edgespec.backends.hf import HFBackend  # noqa: E402
from edgespec.backends.hf_loading import load_hf_backend, read_hf_vocabulary  # noqa: E402
from edgespec.backends.hf_tokens import token_tables  # noqa: E402
from edgespec.decoding.backend import BackendError, ContextOverflow, sync_cache  # noqa: E402
from edgespec.decoding.tree import ROOT, chain  # noqa: E402
from edgespec.models.registry import ModelSpec  # noqa: E402
from edgespec.testing.tiny_hf import (  # noqa: E402
    ARCHS,
    build_tiny_hf,
    sentencepiece_tokenizer,
)
from tests.hf_models import ATOL, TEXTS, load, prompt_ids  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(params=ARCHS)
def backend(request, tiny_dirs) -> HFBackend:
    return load(tiny_dirs[request.param])


def cache_len(b: HFBackend) -> int:
    return b._cache.get_seq_length()


# -- logits and the cache -----------------------------------------------------------------------


def test_one_batch_equals_token_by_token(backend):
    ids = prompt_ids(backend)
    whole = backend.eval(ids, len(ids))
    assert whole.dtype == np.float32 and whole.shape == (len(ids), backend.n_vocab)
    backend.truncate(0)
    steps = np.concatenate([backend.eval([t], 1) for t in ids])
    np.testing.assert_allclose(steps, whole, atol=ATOL, rtol=0)
    assert (steps.argmax(1) == whole.argmax(1)).all()


def test_truncate_to_any_length_then_re_eval_reproduces_logits(backend):
    ids = prompt_ids(backend)[:24]
    whole = backend.eval(ids, len(ids))
    for n in range(len(ids) + 1):
        backend.truncate(n)
        assert backend.cached == ids[:n] and cache_len(backend) == n
        if n < len(ids):
            again = backend.eval(ids[n:], len(ids) - n)
            np.testing.assert_allclose(again, whole[n:], atol=ATOL, rtol=0)
        assert backend.cached == ids and cache_len(backend) == len(ids)


def test_rollback_of_rejected_drafts_then_a_different_continuation(backend):
    """The decoder's pattern: eval [pending, d1..dK], keep a prefix, continue with other tokens."""
    ids = prompt_ids(backend)
    base = ids[:12]
    backend.eval(base, 1)
    backend.eval([5, 6, 7, 8], 4)  # drafts
    backend.truncate(len(base) + 1)  # one accepted
    got = backend.eval([9, 10], 2)
    fresh = load(backend.path)
    want = fresh.eval(base + [5, 9, 10], 2)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_n_logits_rows_are_the_last_positions(backend):
    ids = prompt_ids(backend)
    whole = backend.eval(ids, len(ids))
    for k in (0, 1, 3):
        backend.truncate(0)
        rows = backend.eval(ids, k)
        assert rows.shape == (k, backend.n_vocab)
        np.testing.assert_allclose(rows, whole[len(ids) - k :], atol=ATOL, rtol=0)
    assert backend.eval([], 0).shape == (0, backend.n_vocab)


def test_long_prompts_are_evaluated_in_chunks_with_the_same_result(backend, monkeypatch):
    ids = prompt_ids(backend)
    whole = backend.eval(ids, 7)
    backend.truncate(0)
    monkeypatch.setattr(hf, "PREFILL_CHUNK", 5)
    chunked = backend.eval(ids, 7)  # the last chunk is widened to hold the 7 rows
    np.testing.assert_allclose(chunked, whole, atol=ATOL, rtol=0)
    assert backend.cached == ids and cache_len(backend) == len(ids)


def test_chunk_spans():
    assert hf._chunks(10, 1, 512) == [(0, 10)]
    assert hf._chunks(10, 1, 4) == [(0, 4), (4, 8), (8, 10)]
    assert hf._chunks(10, 3, 4) == [(0, 4), (4, 10)]
    assert hf._chunks(8, 8, 4) == [(0, 8)]


def test_cached_mirrors_the_cache_and_survives_a_failed_pass(backend):
    ids = prompt_ids(backend)
    backend.eval(ids[:10], 1)
    with pytest.raises(ContextOverflow):
        backend.eval(list(range(backend.n_ctx)), 1)
    assert backend.cached == ids[:10] and cache_len(backend) == 10

    # A pass that dies after the first layer has written its keys and values (an exception, or
    # Ctrl-C) leaves layers of different lengths; the backend cuts them all back.
    layers = backend.model.model.layers
    original = layers[1].forward

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    layers[1].forward = boom
    try:
        with pytest.raises(KeyboardInterrupt):
            backend.eval(ids[10:15], 1)
    finally:
        layers[1].forward = original
    assert backend.cached == ids[:10]
    assert [layer.get_seq_length() for layer in backend._cache.layers] == [10, 10]
    got = backend.eval(ids[10:], 1)
    fresh = load(backend.path)
    np.testing.assert_allclose(got, fresh.eval(ids, 1), atol=ATOL, rtol=0)


def test_sync_cache_reuses_the_shared_prefix(backend):
    ids = prompt_ids(backend)
    sync_cache(backend, ids[:15], 1)
    calls = []
    original = backend.model.forward

    def counting(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[1])
        return original(*args, **kwargs)

    backend.model.forward = counting
    sync_cache(backend, ids[:12] + [3, 4], 1)
    assert calls == [2] and backend.cached == ids[:12] + [3, 4]


def test_context_is_capped_at_the_models_positions(tiny_dirs):
    assert load(tiny_dirs["llama"], n_ctx=100_000).n_ctx == 512
    assert load(tiny_dirs["llama"], n_ctx=64).n_ctx == 64


# -- tokens, text and chat ----------------------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_token_bytes_round_trip_utf8(backend, text):
    ids = backend.tokenize(text)
    raw = b"".join(backend.token_bytes(i) for i in ids)
    assert raw == text.encode("utf-8")
    # multi-byte characters are split across tokens somewhere: pieces are raw bytes, not text
    assert any(not _is_utf8(backend.token_bytes(i)) for i in backend.tokenize(TEXTS[1]))


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_special_and_padding_token_bytes(backend):
    """Control tokens print nothing, as llama.cpp renders them; padding ids past the tokenizer too."""
    tok = backend.tokenizer
    assert backend.token_bytes(tok.convert_tokens_to_ids("<|im_end|>")) == b""
    assert backend.vocabulary().tokens[tok.convert_tokens_to_ids("<|im_end|>")] == b"<|im_end|>"
    assert backend.n_vocab > len(tok)  # the tiny models pad their embeddings like real ones
    assert backend.token_bytes(backend.n_vocab - 1) == b""
    assert backend.token_bytes(backend.n_vocab + 5) == b""


def test_sentencepiece_spelling_gives_raw_bytes():
    tok = sentencepiece_tokenizer()
    text = "Hello world é 日本"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    assert any(p.startswith("<0x") for p in pieces) and any("\u2581" in p for p in pieces)
    spellings, raw = token_tables(tok, len(tok) + 3)
    assert b"".join(raw[i] for i in ids) == (" " + text).encode("utf-8")  # the ▁ before the first word
    assert raw[tok.convert_tokens_to_ids("<0x0A>")] == b"\n"
    assert spellings[tok.convert_tokens_to_ids("<0x0A>")] == b"<0x0A>"
    assert raw[tok.convert_tokens_to_ids("</s>")] == b"" and spellings[tok.convert_tokens_to_ids("</s>")] == b"</s>"
    assert raw[-1] == b"" == spellings[-1]


def test_tokenize_parses_special_tokens_only_when_asked(backend):
    im_end = backend.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert backend.tokenize("hi<|im_end|>")[-1] == im_end
    plain = backend.tokenize("hi<|im_end|>", special=False)
    assert im_end not in plain and b"".join(backend.token_bytes(i) for i in plain) == b"hi<|im_end|>"
    assert backend.tokenize("<|im_end|>") == [im_end]


def test_chat_prompt_renders_the_models_template(tiny_dirs):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 🙂"}]
    qwen = load(tiny_dirs["qwen2"])
    assert qwen.chat_prompt(messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi 🙂<|im_end|>\n<|im_start|>assistant\n"
    )
    llama = load(tiny_dirs["llama"])
    text = llama.chat_prompt(messages)
    assert text.startswith("<|begin_of_text|><|im_start|>system")
    ids = llama.tokenize(text)
    bos = llama.tokenizer.bos_token_id
    assert ids[0] == bos and ids.count(bos) == 1  # the template's BOS, not a second one


def test_no_chat_template_is_a_clear_error(backend):
    backend.tokenizer.chat_template = None
    with pytest.raises(BackendError, match="no chat template"):
        backend.chat_prompt([{"role": "user", "content": "hi"}])


def test_end_of_generation_ids(backend):
    tok = backend.tokenizer
    assert backend.eos_ids == {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}


def test_close_twice_is_safe_and_drops_the_model_and_cache(backend):
    backend.eval(prompt_ids(backend), 1)
    backend.close()
    backend.close()
    assert backend.model is None and backend.cached == [] and cache_len(backend) == 0


# -- vocabulary ---------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_read_hf_vocabulary_matches_the_loaded_model(tiny_dirs, arch):
    read = read_hf_vocabulary(tiny_dirs[arch])
    loaded = load(tiny_dirs[arch]).vocabulary()
    assert read == loaded
    assert read.size == loaded.size > len(load(tiny_dirs[arch]).tokenizer)
    assert b"<|im_end|>" in read.tokens
    assert (read.bos_id is not None) == (arch == "llama")


def test_read_hf_vocabulary_rejects_what_is_not_a_model(tmp_path):
    with pytest.raises(BackendError):
        read_hf_vocabulary(tmp_path / "missing")


# -- GGUF through transformers' loader ----------------------------------------------------------------


def test_gguf_is_converted_once_and_then_loaded_from_the_cache(tiny_gguf, tmp_path, monkeypatch):
    from edgespec.backends import hf_convert

    cache = tmp_path / "converted"
    gguf_spec = ModelSpec(name="tiny-gguf", format="gguf", dtype="fp32")
    first = load_hf_backend(gguf_spec, tiny_gguf, n_ctx=128, device_map="cpu", cache_dir=cache)
    (folder,) = cache.iterdir()
    assert (folder / hf_convert.DONE).exists() and list(folder.glob("*.safetensors"))
    assert folder.name.startswith(tiny_gguf.stem) and folder.name.endswith("float32")

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("converted twice")

    monkeypatch.setattr(hf_convert, "convert_gguf", no_second_conversion)
    second = load_hf_backend(gguf_spec, tiny_gguf, n_ctx=128, device_map="cpu", cache_dir=cache)
    ids = second.tokenize(second.chat_prompt([{"role": "user", "content": "hello there"}]))
    np.testing.assert_array_equal(first.eval(ids, 3), second.eval(ids, 3))
    assert [p.name for p in cache.iterdir()] == [folder.name]  # no temporary directories left


def test_an_interrupted_conversion_leaves_nothing_that_looks_finished(tiny_gguf, tmp_path, monkeypatch):
    from edgespec.backends import hf_convert

    def dies(gguf, out, *, dtype):
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(hf_convert, "convert_gguf", dies)
    with pytest.raises(KeyboardInterrupt):
        hf_convert.converted_dir(tiny_gguf, tmp_path, dtype=torch.float32)
    assert list(tmp_path.iterdir()) == []


def test_gguf_through_hf_agrees_with_llama_cpp(tiny_gguf, tmp_path):
    """The same GGUF in both runtimes: same vocabulary, same stop ids, same logits (f32 weights)."""
    pytest.importorskip("llama_cpp")
    from edgespec.backends.llamacpp import LlamaCppBackend

    ours = load_hf_backend(
        ModelSpec(name="tiny-gguf", format="gguf", dtype="fp32"),
        tiny_gguf,
        n_ctx=128,
        device_map="cpu",
        cache_dir=tmp_path,
    )
    theirs = LlamaCppBackend(tiny_gguf, 128, threads=1)
    try:
        assert ours.vocabulary().tokens == theirs.vocabulary().tokens
        assert ours.eos_ids == theirs.eos_ids
        text = "hello there, the world 🙂"
        ids = theirs.tokenize(text)
        assert ours.tokenize(text) == ids
        assert [ours.token_bytes(i) for i in range(ours.n_vocab)] == [
            theirs.token_bytes(i) for i in range(theirs.n_vocab)
        ]
        a, b = ours.eval(ids, len(ids)), theirs.eval(ids, len(ids)).copy()
        np.testing.assert_allclose(a, b, atol=2e-3 * np.abs(b).max(), rtol=0)
        assert (a.argmax(1) == b.argmax(1)).all()
    finally:
        theirs.close()


# -- with the decode loop -------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_speculative_equals_transformers_generate(tiny_dirs, tmp_path, arch):
    """End to end on the real runtime: greedy speculative output is exactly transformers' own greedy
    generate (fp32 tiny models have no near-ties), with a draft that is right only part of the time."""
    decoder_mod = pytest.importorskip("edgespec.decoding.decoder")
    from edgespec.decoding.events import Step, Token
    from edgespec.decoding.model_drafter import ModelDrafter
    from edgespec.decoding.policy.simple_policies import FixedK
    from edgespec.decoding.sampling import SamplingParams

    target = load(tiny_dirs[arch])
    draft = load(build_tiny_hf(tmp_path / "draft", arch, seed=7, like=0, similarity=0.9))
    prompt = target.tokenize(target.chat_prompt([{"role": "user", "content": "def fibonacci(n):"}]))
    n = 40
    ref = list(prompt)
    with torch.inference_mode():  # the plainest greedy reference: the whole sequence each step, no cache
        for _ in range(n):
            ref.append(int(target.model(torch.tensor([ref])).logits[0, -1].argmax()))
    ref = ref[len(prompt) :]
    target.eos_ids = frozenset()  # compare all 40 tokens
    decoder = decoder_mod.SpeculativeDecoder(target, FixedK(4, "model"), [ModelDrafter(draft)])
    events = list(decoder.generate(prompt, n, SamplingParams()))
    got = [e.id for e in events if isinstance(e, Token)]
    steps = [e for e in events if isinstance(e, Step)]
    assert got == ref
    assert 0 < sum(s.accepted for s in steps) < sum(s.drafted for s in steps)  # both outcomes exercised
    assert target.cached == (prompt + got)[: len(target.cached)]


def test_same_event_stream_as_llama_cpp_for_the_same_gguf_pair(tiny_gguf_factory, tmp_path):
    """One pair of tiny GGUFs decoded through each runtime: the same tokens, texts, sources and
    draft/accept pattern (f32 weights on both sides, so the models agree to rounding)."""
    pytest.importorskip("llama_cpp")
    from edgespec.backends.llamacpp import LlamaCppBackend
    from edgespec.decoding.decoder import SpeculativeDecoder
    from edgespec.decoding.events import Step, Token
    from edgespec.decoding.model_drafter import ModelDrafter
    from edgespec.decoding.policy.simple_policies import FixedK
    from edgespec.decoding.sampling import SamplingParams

    target_file = tiny_gguf_factory(seed=0)
    draft_file = tiny_gguf_factory(seed=1, like=0, similarity=0.9)

    def stream(make):
        target, draft = make(target_file), make(draft_file)
        try:
            prompt = target.tokenize(target.chat_prompt([{"role": "user", "content": "hello there"}]))
            decoder = SpeculativeDecoder(target, FixedK(3, "model"), [ModelDrafter(draft)])
            events = list(decoder.generate(prompt, 40, SamplingParams()))
        finally:
            if hasattr(target, "close"):
                target.close()
                draft.close()
        return (
            [(e.id, e.text, e.source) for e in events if isinstance(e, Token)],
            [(e.drafted, e.accepted, e.drafted_ids) for e in events if isinstance(e, Step)],
        )

    gguf = lambda f: ModelSpec(name=f.stem, format="gguf", dtype="fp32")  # noqa: E731
    ours = stream(lambda f: load_hf_backend(gguf(f), f, n_ctx=256, device_map="cpu", cache_dir=tmp_path))
    theirs = stream(lambda f: LlamaCppBackend(f, 256, threads=1))
    assert ours[0] == theirs[0]
    assert ours[1] == theirs[1]
    assert 0 < sum(a for _, a, _ in ours[1]) < sum(k for k, _, _ in ours[1])


# -- the real built-in model (slow) ---------------------------------------------------------------

REAL_MODEL = "qwen2.5-coder-1.5b-instruct-q4_k_m"


def _real_model():
    """The built-in target's spec and its GGUF in the store, or None where it is not pulled."""
    from edgespec.models.config import load_registry
    from edgespec.models.store import Store

    spec = load_registry().models[REAL_MODEL]
    path = Store().path_for(spec)
    return (spec, path) if path.exists() else None


@pytest.mark.slow
def test_real_qwen_gguf_through_transformers():
    """The built-in 1.5B through transformers' GGUF loader and the conversion cache the engine uses
    (converted once, about a minute here, then loaded in seconds)."""
    from edgespec.models.vocab import read_gguf_vocabulary
    from edgespec.util.paths import home

    found = _real_model()
    if found is None:
        pytest.skip(f"{REAL_MODEL} is not pulled")
    spec, path = found
    b = load_hf_backend(spec, path, n_ctx=512, device_map="auto", cache_dir=home() / "converted")
    assert b.n_vocab == 151936 and 151645 in b.eos_ids
    gguf_vocab = read_gguf_vocabulary(path)
    assert b.vocabulary().tokens[: len(b.tokenizer)] == gguf_vocab.tokens[: len(b.tokenizer)]
    prompt = b.chat_prompt([{"role": "user", "content": "Reverse a string in Python. Ünïcödé ok?"}])
    assert prompt.endswith("<|im_start|>assistant\n")
    ids = b.tokenize(prompt)
    shown = b"".join(b.token_bytes(i) for i in ids).decode("utf-8")
    assert shown == prompt.replace("<|im_start|>", "").replace("<|im_end|>", "")  # control tokens print nothing
    rows = b.eval(ids, 1)
    assert b.token_bytes(int(rows[0].argmax()))  # a real token, not padding or a control token


# -- draft trees: one forward with a 4D mask, then the accepted path moved into place -------------

TREE = [ROOT, 0, 1, ROOT, 3, ROOT]  # branches: 0-1-2, 3-4, 5


def test_a_tree_pass_gives_each_node_the_logits_of_its_own_branch(backend):
    ids = prompt_ids(backend)[:16]
    nodes = prompt_ids(backend)[16:22]
    backend.eval(ids[:-1], 1)
    rows = backend.eval_tree(ids[-1], nodes, TREE)
    assert rows.shape == (len(TREE) + 1, backend.n_vocab) and backend.cached == ids
    fresh = load(backend.path)
    for branch in ([0, 1, 2], [3, 4], [5]):
        fresh.truncate(0)
        want = fresh.eval(ids + [nodes[n] for n in branch], len(branch) + 1)
        np.testing.assert_allclose(rows[[0, *(n + 1 for n in branch)]], want, atol=ATOL, rtol=0)
    backend.keep_path([])
    assert backend.cached == ids and cache_len(backend) == len(ids)


@pytest.mark.parametrize("path", [[3, 4], [5], [0, 1], []])
def test_after_a_branch_wins_the_cache_holds_exactly_the_committed_text(backend, path):
    """A path that is not the first nodes is moved up behind the pending token: the next pass gives
    a fresh evaluation's logits."""
    ids = prompt_ids(backend)[:16]
    nodes = prompt_ids(backend)[16:22]
    committed = ids + [nodes[n] for n in path]
    backend.eval(ids[:-1], 1)
    backend.eval_tree(ids[-1], nodes, TREE)
    backend.keep_path(path)
    assert backend.cached == committed and cache_len(backend) == len(committed)
    got = backend.eval([5, 6], 2)
    want = load(backend.path).eval(committed + [5, 6], 2)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_a_chain_is_verified_as_eval_verifies_it(backend):
    ids = prompt_ids(backend)[:16]
    backend.eval(ids[:-1], 1)
    rows = backend.eval_tree(ids[-1], [7, 8, 9], chain(3))
    backend.keep_path([0, 1])
    assert backend.cached == ids + [7, 8] and cache_len(backend) == len(ids) + 2
    backend.truncate(len(ids) - 1)
    np.testing.assert_array_equal(rows, backend.eval([ids[-1], 7, 8, 9], 4))
