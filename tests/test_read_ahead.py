"""Reading a prompt before it is asked (`Engine.read_ahead`) on the tiny pair: only whole read
chunks at fixed positions are read, a cancel stops it between chunks keeping what it read, an edit
behind the read point rolls back to the common prefix, and the reply that follows reads only the
rest and equals a cold one. Bit for bit on the real pair: tests/test_read_ahead_real_pair.py."""

from __future__ import annotations

import threading

import pytest

from edgespec.decoding.backend import ContextOverflow
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.prompt_cache import PromptCache
from edgespec.models.registry import ModelSpec, PairConfig
from tests.cached_prompts import FILE, LONGER, load

SETTINGS = GenerateSettings(max_tokens=16, draft=DraftChoice.NGRAM, policy=PolicyChoice.parse("3"))


@pytest.fixture
def open_engine(tiny_gguf):
    engines = []
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), None, "ngram", 256)

    def make(cache: PromptCache | None = None) -> Engine:
        engines.append(Engine(pair, load(tiny_gguf), cache=cache))
        return engines[-1]

    yield make
    for engine in engines:
        engine.close()


def reads_of(engine: Engine) -> list[tuple[int, int]]:
    """(position, tokens) of every read the target makes from now on."""
    reads: list[tuple[int, int]] = []
    evaluate = engine.target.eval

    def eval(tokens, n_logits):
        reads.append((len(engine.target.cached), len(tokens)))
        return evaluate(tokens, n_logits)

    engine.target.eval = eval
    return reads


def reply(engine: Engine, prompt: list[int]):
    events = list(engine.generate_tokens(prompt, SETTINGS))
    return [e.id for e in events if isinstance(e, Token)], events[-1]


def test_whole_chunks_are_read_at_fixed_positions_and_the_reply_reads_only_the_rest(open_engine):
    engine = open_engine()
    prompt = engine.target.tokenize(LONGER + "\n\nExplain g0.")
    chunk = engine.target.read_chunk
    reads = reads_of(engine)
    reading = engine.read_ahead(prompt)
    whole = len(prompt) - len(prompt) % chunk
    assert (reading.cached, reading.read, reading.stopped) == (0, whole, False)
    assert reads == [(p, chunk) for p in range(0, whole, chunk)]
    assert engine.read_ahead(prompt).read == 0  # nothing new: nothing read again

    ids, summary = reply(engine, prompt)
    assert summary.prompt_cached == whole
    cold_ids, cold = reply(open_engine(), prompt)
    assert cold.prompt_cached == 0 and ids == cold_ids


def test_an_edit_behind_the_read_point_rolls_back_to_the_common_prefix(open_engine):
    engine = open_engine()
    chunk = engine.target.read_chunk
    before = engine.target.tokenize(LONGER + "\n\nExplain g0.")
    engine.read_ahead(before)
    edited = before[:40] + engine.target.tokenize("# another line\n") + before[40:]
    reads = reads_of(engine)
    reading = engine.read_ahead(edited)
    assert reading.cached == 40 - 40 % chunk  # the chunk holding the edit and all after it go
    assert reads[0][0] == reading.cached
    assert engine.target.cached == edited[: reading.ready]
    ids, _ = reply(engine, edited)
    assert ids == reply(open_engine(), edited)[0]


def test_a_cancel_stops_between_chunks_and_keeps_what_was_read(open_engine):
    engine = open_engine()
    prompt = engine.target.tokenize(LONGER)  # 5 whole chunks of the tiny models' 32
    chunk = engine.target.read_chunk
    cancel = threading.Event()
    evaluate = engine.target.eval

    def eval(tokens, n_logits):  # the user presses enter while the second chunk is read
        if len(engine.target.cached) == chunk:
            cancel.set()
        return evaluate(tokens, n_logits)

    engine.target.eval = eval
    reading = engine.read_ahead(prompt, cancel)
    assert reading.stopped and reading.read == 2 * chunk
    assert engine.target.exact == 2 * chunk


def test_a_prompt_shorter_than_a_chunk_reads_nothing_and_one_too_long_is_refused(open_engine):
    engine = open_engine()
    short = engine.target.tokenize("def f(a):")
    assert len(short) < engine.target.read_chunk
    assert engine.read_ahead(short).read == 0 and engine.target.cached == []
    with pytest.raises(ContextOverflow):
        engine.read_ahead(engine.target.tokenize(FILE * 4))


def test_a_read_saved_in_the_prompt_cache_warms_a_new_process(open_engine, tmp_path):
    cache = PromptCache(tmp_path / "cache")
    first = open_engine(cache)
    prompt = first.target.tokenize(LONGER + "\n\nAdd type hints.")
    reading = first.read_ahead(prompt)
    assert len(list(cache.folder.glob("*.kv"))) == 1
    later = open_engine(cache)
    again = later.read_ahead(prompt)
    assert (again.cached, again.read) == (reading.read, 0)
    ids, summary = reply(later, prompt)
    assert summary.prompt_cached == reading.read
    assert ids == reply(open_engine(), prompt)[0]


def test_a_reply_counts_the_prompt_tokens_it_kept_that_were_read_ahead(open_engine):
    engine = open_engine()
    chunk = engine.target.read_chunk
    asked = engine.target.tokenize(FILE)
    assert reply(engine, asked)[1].prompt_read_ahead == 0  # its prompt was read when asked
    following = engine.target.tokenize(LONGER + "\n\nExplain g0.")
    reading = engine.read_ahead(following)
    assert reading.cached == len(asked) - len(asked) % chunk and reading.read >= chunk  # the last reply's chunks kept
    edited = following[:40] + engine.target.tokenize("# another line\n") + following[40:]
    again = engine.read_ahead(edited)
    assert again.cached == 40 - 40 % chunk < reading.cached
    ids, summary = reply(engine, edited)
    assert summary.prompt_cached == again.ready and summary.prompt_read_ahead == again.ready - again.cached
    assert ids == reply(open_engine(), edited)[0]
    assert reply(engine, edited)[1].prompt_read_ahead == 0  # read ahead for one reply only
