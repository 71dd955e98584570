"""A call's Summary is built once from the decoder's figures and those gathered around it
(`engine/call_figures.py`): each reply's Summary holds its own history append, lookups and warm
read, never an earlier reply's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.constraints.guidance import ConstraintSpec
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Summary, Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.copy_sources import DraftSources
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.reply_history import ReplyHistory
from edgespec.models.registry import ModelSpec, PairConfig

SETTINGS = GenerateSettings(24, draft=DraftChoice.NGRAM, policy=PolicyChoice.parse("3"))


@pytest.fixture
def engine(tmp_path, tiny_gguf) -> Iterator[Engine]:
    """The tiny target, drafting by n-grams, with a history of its own."""
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), None, "ngram", 256, threads=1)
    target = LlamaCppBackend(tiny_gguf, 256, threads=1)
    history = ReplyHistory.open(tmp_path / "history", vocab=target.n_vocab)
    engine = Engine(pair, target, sources=DraftSources(history=history))
    yield engine
    engine.close()


def reply(engine: Engine, text: str, settings: GenerateSettings = SETTINGS) -> tuple[list[int], Summary]:
    events = list(engine.generate_tokens(engine.target.tokenize(text), settings))
    assert isinstance(events[-1], Summary) and sum(isinstance(e, Summary) for e in events) == 1
    return [e.id for e in events if isinstance(e, Token)], events[-1]


def test_a_reply_holds_its_own_history_append_not_the_last_ones(engine):
    ids, first = reply(engine, "def add(a, b):")
    assert ids and first.history_append_s > 0 and first.lookups["history"] > 0
    # a constraint that allows only the end: an empty reply, which adds nothing to the history
    ids, empty = reply(engine, "def sub(a, b):", GenerateSettings(24, constraint=ConstraintSpec("regex", "")))
    assert ids == [] and empty.stop_reason == "eos"
    assert empty.history_append_s == 0.0 and empty.lookups == {"history": 0}  # nothing drafted, nothing kept
