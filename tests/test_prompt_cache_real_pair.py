"""The prompt cache and a kept KV cache on the built-in pair: a warm read computes the cold read's
logits bit for bit, whatever was read before and wherever the shared prefix ends, so a warm reply
equals the cold one token for token (the same drafts make the same passes), and reads only the
rest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgespec.cli import main as cli
from edgespec.decoding.backend import sync_cache
from edgespec.decoding.events import Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.prompt_cache import PromptCache
from edgespec.engine.prompt_cache_files import read_entry
from edgespec.models.store import Store

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1] / "edgespec"
SOURCE = (ROOT / "decoding" / "tree.py").read_text()[:2400]
# lines 1-22 of util/atomic_file.py: where a warm `run` once opened its reply with other words
SMALL = "".join((ROOT / "util" / "atomic_file.py").read_text().splitlines(keepends=True)[:22])


def _prompts(engine) -> list[list[int]]:
    """Chat prompts of a few hundred tokens: a file and an instruction, as an editor sends them."""
    files = [SMALL, SOURCE]
    asks = ["Rename the function to something better.", "Add type hints."]
    return [engine.chat_tokens([{"role": "user", "content": f"{f}\n\n{a}"}]) for f, a in zip(files, asks, strict=True)]


def test_a_warm_read_computes_the_cold_reads_logits_bit_for_bit(real_engine, tmp_path):
    """Against a read from an empty cache: the same prompt after an earlier prompt that shares a
    prefix of it ending anywhere (in a chunk or on its edge) and after that prompt's reply (read
    token by token, as decoding does), kept in process or saved and loaded by the prompt cache."""
    target, cache = real_engine.target, PromptCache(tmp_path / "cache")
    for prompt in _prompts(real_engine):
        target.truncate(0)
        cold = sync_cache(target, prompt, 1).copy()
        chunk = target.read_chunk
        assert len(prompt) > chunk + 6
        for cut in (chunk + 5, (chunk + len(prompt)) // 2, len(prompt) - 1):
            target.truncate(0)
            sync_cache(target, prompt[:cut] + [13] * (cut < len(prompt) - 1), 1)  # parts at `cut`
            for t in target.tokenize(" return None  # a reply"):
                target.eval([t], 1)
            kept = len(target.cached)
            cache.save(target)  # what is saved is what a later read keeps: the whole chunks
            assert len(target.cached) < kept
            assert np.array_equal(sync_cache(target, prompt, 1), cold), ("kept", len(prompt), cut)
            target.truncate(0)
            assert cache.warm(target, prompt) > 0
            assert np.array_equal(sync_cache(target, prompt, 1), cold), ("loaded", len(prompt), cut)


def test_a_warm_reply_of_the_real_pair_equals_the_cold_one(real_engine, tmp_path):
    cache = real_engine.cache = PromptCache(tmp_path / "cache")
    settings = GenerateSettings(max_tokens=16, draft="model", policy=PolicyChoice("fixed", 3))

    def reply(instruction: str):
        for backend in (real_engine.target, real_engine.draft):
            backend.truncate(0)  # as a new process would start
        messages = [{"role": "user", "content": f"{SOURCE}\n\n{instruction}"}]
        events = list(real_engine.chat(messages, settings))
        return [e.id for e in events if isinstance(e, Token)], events[-1]

    reply("What does subtree return?")
    saved = [read_entry(p, with_state=False, limit=1 << 40) for p in cache.folder.glob("*.kv")]
    assert len(saved) == 2  # target and draft
    warm_ids, warm = reply("Add type hints to first_branch.")
    real_engine.cache = None
    cold_ids, cold = reply("Add type hints to first_branch.")
    assert cold.prompt_cached == 0
    # all but the instruction, the template's end, and what the last whole read chunk leaves
    assert warm.prompt_tokens - warm.prompt_cached < 32 + real_engine.target.read_chunk
    assert warm_ids == cold_ids


def test_a_chats_next_turn_replies_alike_kept_resumed_and_cold(real_engine, tmp_path):
    """`chat`'s next turn reuses what the process read; `chat --resume` in a new process loads the
    prompt cache; a cold process reads it all. The three replies are one."""
    settings = GenerateSettings(max_tokens=24, draft="model", policy=PolicyChoice("fixed", 3))
    real_engine.cache = PromptCache(tmp_path / "cache")
    messages = [{"role": "user", "content": f"{SMALL}\n\nWhat does this do?"}]
    first = [e for e in real_engine.chat(messages, settings) if isinstance(e, Token)]
    messages += [
        {"role": "assistant", "content": "".join(t.text for t in first)},
        {"role": "user", "content": "Rename the function to something better."},
    ]

    def turn(new_process: bool, cache: PromptCache | None) -> list[int]:
        if new_process:
            for backend in (real_engine.target, real_engine.draft):
                backend.truncate(0)
        real_engine.cache = cache
        return [e.id for e in real_engine.chat(messages, settings) if isinstance(e, Token)]

    cache = real_engine.cache
    kept = turn(False, cache)
    resumed = turn(True, cache)
    cold = turn(True, None)
    assert kept == resumed == cold


@pytest.fixture
def real_cli(real_pair, tmp_path, monkeypatch):
    """`edgespec run` on the built-in pair's files in a fresh home (an empty prompt cache)."""
    store = Store()
    config = tmp_path / "models.toml"
    config.write_text(
        f'default = "real"\n[models.t]\nformat = "gguf"\npath = "{store.path_for(real_pair.target)}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{store.path_for(real_pair.draft)}"\n'
        '[pairs.real]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 4096\n'
    )
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))

    def run(stdin: str, instruction: str, *flags: str) -> tuple[str, int]:
        stats = tmp_path / "stats.json"
        argv = ["run", instruction, "--temperature", "0", "--max-tokens", "12", "--draft", "model", "--k", "3"]
        r = CliRunner().invoke(cli.main, [*argv, "--stats-json", str(stats), *flags], input=stdin)
        assert r.exit_code == 0, r.stderr
        return r.stdout, json.loads(stats.read_text())["prompt_cached"]

    return run


def test_run_replies_alike_cold_and_warm(real_cli):
    """The same request again, and another instruction on the same file: from the cache as cold."""
    first, _ = real_cli(SMALL, "Rename the function to something better.")
    again, cached = real_cli(SMALL, "Rename the function to something better.")
    assert cached > 0 and again == first
    cold, _ = real_cli(SMALL, "Add a docstring.", "--no-cache")
    warm, cached = real_cli(SMALL, "Add a docstring.")
    assert cached > 0 and warm == cold
