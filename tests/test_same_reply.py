"""A greedy request asked again is answered with its earlier reply, served from the history
(`engine/same_reply.py`): byte for byte, with no target pass, and a Summary that says so. Another
request (max_tokens, constraint, model, sampling), --decode-again, --no-history, a reply cut short
and a damaged record each decode again; a version-1 log is read as before."""

from __future__ import annotations

import json
import threading
import zlib

import click
import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from edgespec.cli import main as cli
from edgespec.decoding.events import Summary, Token
from edgespec.engine.engine_thread import EngineThread
from edgespec.engine.history_log import LOG_MAGIC, RECORD, RECORD_MAGIC
from edgespec.engine.options import EngineOptions
from edgespec.engine.reply_history import ReplyHistory
from edgespec.server.engine_worker import EngineWorker
from tests.live_server import serving_app

PROMPT = "write a loop"
REQUEST = b"q" * 16  # a request's digest, as the engine makes one
VOCAB = 1000


@pytest.fixture
def env(tmp_path, monkeypatch, tiny_gguf, tiny_draft_gguf, tiny_gguf_factory):
    """The tiny pair ("tiny"), the same with another target over the same vocabulary ("other"), a
    home of its own, and the history on (the test suite turns it off elsewhere)."""
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EDGESPEC_NO_HISTORY")
    config = tmp_path / "models.toml"
    config.write_text(
        f'default = "tiny"\n[models.t]\nformat = "gguf"\npath = "{tiny_gguf}"\n'
        f'[models.o]\nformat = "gguf"\npath = "{tiny_gguf_factory(seed=7)}"\n'
        f'[models.d]\nformat = "gguf"\npath = "{tiny_draft_gguf}"\n'
        '[pairs.tiny]\nbackend = "llamacpp"\ntarget = "t"\ndrafter = "d"\ncontext = 256\n'
        '[pairs.other]\nbackend = "llamacpp"\ntarget = "o"\ndrafter = "d"\ncontext = 256\n'
    )
    monkeypatch.setenv("EDGESPEC_CONFIG", str(config))
    return tmp_path


def run(env, *args: str, max_tokens: int = 40) -> tuple[str, dict, str]:
    """`edgespec run PROMPT args`: its stdout, its --stats-json and its stderr (the --stats line).
    Under --json the tiny model's document may be cut by --max-tokens: exit 1, the stats written."""
    stats = env / "stats.json"
    argv = ["run", PROMPT, *args, "--max-tokens", str(max_tokens), "--stats", "--stats-json", str(stats)]
    r = CliRunner().invoke(cli.main, argv)
    assert r.exit_code == 0 or ("--json" in args and "incomplete" in r.stderr), r.stderr
    return r.stdout, json.loads(stats.read_text()), r.stderr


def served(stats: dict) -> bool:
    """Whether a reply was served again, and then with no pass and every token repeated."""
    if stats["served_again"]:
        assert stats["target_passes"] == 0 and stats["drafted"] == 0 and stats["decode_tokens_per_s"] == 0
        assert stats["sources"] == {"repeated": stats["tokens"]}
    return stats["served_again"]


def test_the_same_greedy_request_again_is_served_its_reply_byte_for_byte(env):
    first, stats, _ = run(env)
    assert not served(stats) and stats["target_passes"] > 0
    for _ in range(2):
        again, stats, said = run(env)
        assert again == first and served(stats) and stats["tokens"] > 0
        assert "served again" in said and "no target pass" in said
    coloured = CliRunner().invoke(cli.main, ["run", PROMPT, "--max-tokens", "40", "--color", "always"])
    assert click.unstyle(coloured.stdout) == first and "\x1b[35m" in coloured.stdout  # repeated: magenta
    shown = CliRunner().invoke(cli.main, ["history"])
    assert "1 call" in shown.stdout  # served again: not kept twice


@pytest.mark.parametrize(
    "other",
    [
        ["--max-tokens", "30"],
        ["--json"],
        ["--pair", "other"],
        ["--temperature", "0.8", "--seed", "1"],
        ["--decode-again"],
        ["--no-history"],
    ],
    ids=["max_tokens", "constraint", "model", "sampled", "decode-again", "no-history"],
)
def test_another_request_or_decode_again_or_no_history_decodes_again(env, other):
    first, _, _ = run(env)
    max_tokens = int(other[1]) if other[0] == "--max-tokens" else 40
    again, stats, _ = run(env, *[a for a in other if other[0] != "--max-tokens"], max_tokens=max_tokens)
    assert not served(stats) and stats["target_passes"] > 0
    if other == ["--decode-again"]:  # drafted from the earlier reply, and the same reply here
        assert stats["lookups"]["retry"] > 0 and again == first
    if other == ["--no-history"]:
        assert not stats["lookups"]


def test_a_sampled_reply_is_never_served_again(env):
    run(env, "--temperature", "0.8", "--seed", "1")
    _, stats, _ = run(env, "--temperature", "0.8", "--seed", "1")
    assert not served(stats)


def generate(engine, settings, cancel_after: int | None = None) -> tuple[list[int], Summary]:
    cancel = threading.Event()
    ids: list[int] = []
    summary = None
    for event in engine.generate_tokens(engine.chat_tokens([{"role": "user", "content": PROMPT}]), settings, cancel):
        if isinstance(event, Token):
            ids.append(event.id)
            if cancel_after is not None and len(ids) >= cancel_after:
                cancel.set()
        elif isinstance(event, Summary):
            summary = event
    assert summary is not None
    return ids, summary


def test_a_reply_cut_short_by_cancel_is_never_served_again(env):
    engine, settings = EngineOptions(config=env / "models.toml", history=True, max_tokens=40).check().open()
    try:
        cut, summary = generate(engine, settings, cancel_after=3)
        assert summary.stop_reason == "cancelled" and not summary.served_again
        whole, summary = generate(engine, settings)
        assert not summary.served_again and summary.target_passes > 0 and whole[: len(cut)] == cut
        again, summary = generate(engine, settings)
        assert summary.served_again and again == whole
    finally:
        engine.close()


def test_serve_serves_a_greedy_request_again_unless_the_request_asks_to_decode_again(env):
    thread = EngineThread()
    engine, settings = thread.call(
        lambda: EngineOptions(config=env / "models.toml", history=True, max_tokens=40).check().open()
    )
    body = {"model": "tiny", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 24, "temperature": 0}

    def ask(client: httpx.Client, **edgespec) -> dict:
        r = client.post("/chat/completions", json={**body, "edgespec": {"sources": True, **edgespec}})
        assert r.status_code == 200, r.text
        return r.json()

    worker = EngineWorker(engine, thread, 4)
    try:
        with serving_app(worker, settings) as live, httpx.Client(base_url=live.url, timeout=60) as client:
            first = ask(client)
            again = ask(client)
            decoded = ask(client, decode_again=True)
    finally:
        worker.close()
    text = first["choices"][0]["message"]["content"]
    assert again["choices"][0]["message"]["content"] == text
    assert {t["source"] for t in again["edgespec"]["tokens"]} == {"repeated"}
    assert again["usage"]["completion_tokens"] == first["usage"]["completion_tokens"]
    assert again["metrics"]["speculative_decoding"]["target_passes"] == 0
    assert "repeated" not in {t["source"] for t in decoded["edgespec"]["tokens"]}
    assert decoded["metrics"]["speculative_decoding"]["target_passes"] > 0


# -- the log's records ----------------------------------------------------------------------------


def version_1_log(records: list[tuple[list[int], list[int]]]) -> bytes:
    """A log as the first version wrote it: no request digest in its records."""
    data = LOG_MAGIC + bytes(16)
    for prompt, reply in records:
        payload = np.asarray([*prompt, *reply], "<i4").tobytes()
        data += RECORD.pack(RECORD_MAGIC, 1, 0, len(prompt), len(reply), zlib.crc32(payload)) + payload
    return data


def opened(folder) -> tuple[ReplyHistory, list[str]]:
    said: list[str] = []
    return ReplyHistory.open(folder, 10_000, say=said.append, vocab=VOCAB), said


def test_a_version_1_log_is_read_as_before_and_its_replies_are_never_served_again(tmp_path):
    (tmp_path / "log").write_bytes(version_1_log([([1, 2], [3, 4]), ([5], [6])]))
    old, said = opened(tmp_path)
    assert said == [] and old.size()[:2] == (2, 6)
    assert [reply for _, reply in old.earlier_replies([1, 2])] == [[3, 4]]
    assert old.same_reply([1, 2], REQUEST) is None
    old.append([1, 2], [3, 9], REQUEST)  # a whole reply, after the old records in the same log
    old.append([5], [7])  # a reply never served again
    again, said = opened(tmp_path)
    assert said == [] and again.size()[:2] == (4, 12)
    assert again.same_reply([1, 2], REQUEST) == [3, 9]
    assert again.same_reply([1, 2], b"p" * 16) is None and again.same_reply([5], REQUEST) is None
    assert again.same_reply([1], REQUEST) is None and again.same_reply([1, 2, 3], REQUEST) is None


def test_a_record_whose_request_digest_was_changed_is_set_aside(tmp_path):
    kept, _ = opened(tmp_path)
    kept.append([1, 2], [3, 4], REQUEST)
    kept.append([5, 6], [7, 8], REQUEST)
    log = tmp_path / "log"
    data = bytearray(log.read_bytes())
    second = data.rindex(RECORD_MAGIC)
    data[second + RECORD.size] ^= 1  # the digest, under the record's checksum
    log.write_bytes(bytes(data))
    again, said = opened(tmp_path)
    assert len(said) == 1 and "set it aside" in said[0] and "checksum" in said[0], said
    assert again.same_reply([1, 2], REQUEST) == [3, 4]  # the record before the damage is kept
    assert again.same_reply([5, 6], REQUEST) is None
