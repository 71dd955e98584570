"""What opening a pair does and costs (`EngineOptions.open`), and an engine forgetting what it read."""

from __future__ import annotations

import pytest

from edgespec.decoding.events import Summary
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.options import EngineOptions
from tests.fakes import fake_engine


@pytest.fixture
def config(tmp_path, monkeypatch, tiny_gguf, tiny_draft_gguf):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    path = tmp_path / "models.toml"
    path.write_text(
        f'default = "tiny"\n[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 128\n'
    )
    return path


@pytest.mark.parametrize("draft, parts", [("auto", {"check", "target", "draft"}), ("ngram", {"check", "target"})])
def test_opening_a_pair_times_each_part_of_the_load(config, draft, parts):
    engine, _ = EngineOptions(config=config, draft=draft).check().open()
    try:
        assert set(engine.load_s) == parts and all(seconds > 0 for seconds in engine.load_s.values())
        assert (engine.draft is not None) == ("draft" in parts)  # no draft model loads when none may be used
    finally:
        engine.close()


def summary_of(engine, prompt, draft="model") -> Summary:
    """A short reply's summary; a fixed K, so the draft model drafts (and reads the prompt) whatever
    the controller would make of the fake's timings."""
    return list(
        engine.generate_tokens(prompt, GenerateSettings(max_tokens=6, draft=draft, policy=PolicyChoice("fixed", 2)))
    )[-1]


def test_empty_caches_makes_the_next_generation_read_its_whole_prompt():
    engine = fake_engine()
    prompt = [1, 2, 3, 4, 5, 6]
    assert summary_of(engine, prompt).target_read_tokens == len(prompt)
    assert summary_of(engine, prompt).target_read_tokens == 1  # the prompt was still in the cache
    assert engine.target.cached and engine.draft.cached
    engine.empty_caches()
    assert engine.target.cached == [] and engine.draft.cached == []
    assert summary_of(engine, prompt).target_read_tokens == len(prompt)
