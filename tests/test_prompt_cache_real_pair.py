"""The prompt cache on the built-in pair: a warm reply equals the cold one (greedy, a short reply,
where batch-boundary noise has had little room to flip a near-tie) and reads only the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgespec.decoding.events import Token
from edgespec.decoding.plan import KSetting
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.prompt_cache import PromptCache, _read

pytestmark = pytest.mark.slow

SOURCE = (Path(__file__).resolve().parents[1] / "edgespec" / "decoding" / "tree.py").read_text()[:2400]


def test_a_warm_reply_of_the_real_pair_equals_the_cold_one(real_engine, tmp_path):
    cache = real_engine.cache = PromptCache(tmp_path / "cache")
    settings = GenerateSettings(max_tokens=16, draft="model", k=KSetting("fixed", 3))

    def reply(instruction: str):
        for backend in (real_engine.target, real_engine.draft):
            backend.truncate(0)  # as a new process would start
        messages = [{"role": "user", "content": f"{SOURCE}\n\n{instruction}"}]
        events = list(real_engine.chat(messages, settings))
        return [e.id for e in events if isinstance(e, Token)], events[-1]

    reply("What does subtree return?")
    saved = [_read(p, with_state=False) for p in cache.folder.glob("*.kv")]
    assert len(saved) == 2  # target and draft
    warm_ids, warm = reply("Add type hints to first_branch.")
    real_engine.cache = None
    cold_ids, cold = reply("Add type hints to first_branch.")
    assert cold.prompt_cached == 0
    assert warm.prompt_cached > 0.9 * warm.prompt_tokens
    assert warm_ids == cold_ids
