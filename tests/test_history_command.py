"""`edgespec history` on a home it does not trust: showing writes nothing and follows no link, counts
are read without the lock (a read-only history is counted), clearing removes what it can, names what
it could not and exits 1; and a live `serve` that holds the history notices a clear."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from edgespec.cli import main as cli
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.copy_sources import open_sources
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.options import EngineOptions
from edgespec.engine.reply_history import ReplyHistory
from edgespec.models.config import load_registry
from tests.edgespec_process import REPO, edgespec_env
from tests.live_server import HELLO, serving_engine, tiny_models_toml


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def keep_calls(folder: Path, n: int) -> None:
    history = ReplyHistory.open(folder, 10_000, vocab=1000)
    for i in range(n):
        history.append([1, 2, i], [3, i])


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every name under `folder` with its mode and size (links not followed): what a command changed."""
    out = {}
    for path in [folder, *folder.rglob("*")]:
        st = os.lstat(path)
        out[str(path.relative_to(folder))] = (st.st_mode, st.st_size if not stat.S_ISDIR(st.st_mode) else 0)
    return out


def history(*args: str):
    return CliRunner().invoke(cli.main, ["history", *args])


def test_showing_writes_nothing_and_follows_no_link(home, tmp_path):
    mine = home / "history" / "aaaa"
    keep_calls(mine, 3)
    (mine / "lock").unlink()
    mine.chmod(0o755)  # as an older edgespec may have left it
    elsewhere = tmp_path / "tokenizer-elsewhere"
    keep_calls(elsewhere, 2)
    (elsewhere / "lock").unlink()
    elsewhere.chmod(0o755)
    (home / "history" / "bbbb").symlink_to(elsewhere)
    (home / "history" / "cccc").symlink_to(tmp_path / "gone")  # dangling
    before, before_elsewhere = tree(home), tree(elsewhere)
    shown = history()
    assert shown.exit_code == 0, shown.stderr
    assert "aaaa: 3 calls, 15 tokens" in shown.stdout
    assert "bbbb: not a folder; not followed" in shown.stdout and "cccc: not a folder" in shown.stdout
    assert tree(home) == before and tree(elsewhere) == before_elsewhere  # no lock made, no mode changed


def test_a_name_pruned_between_listing_and_stat_is_skipped(home, monkeypatch):
    keep_calls(home / "history" / "aaaa", 1)
    listed = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda self: iter([*listed(self), self / "pruned-meanwhile"]))
    for args in [(), ("--clear",)]:
        result = history(*args)
        assert result.exit_code == 0 and "Traceback" not in result.stderr, result.stderr


def test_a_damaged_log_is_counted_to_the_damage_and_said(home):
    folder = home / "history" / "aaaa"
    keep_calls(folder, 3)
    data = bytearray((folder / "log").read_bytes())
    data[-3] ^= 0xFF
    (folder / "log").write_bytes(bytes(data))
    before = tree(home)
    shown = history()
    assert shown.exit_code == 0 and "2 calls" in shown.stdout and "damaged after 2 calls" in shown.stdout
    assert tree(home) == before  # set aside by the next run, not by showing


def test_clearing_removes_links_not_what_they_point_to(home, tmp_path):
    keep_calls(home / "history" / "aaaa", 2)
    elsewhere = tmp_path / "elsewhere"
    keep_calls(elsewhere, 2)
    (home / "history" / "bbbb").symlink_to(elsewhere)
    (home / "history" / "aaaa" / "files").mkdir()
    (home / "history" / "aaaa" / "files" / "x.tokens").symlink_to(elsewhere / "log")
    before = tree(elsewhere)
    cleared = history("--clear")
    assert cleared.exit_code == 0 and "cleared (2 tokenizers)" in cleared.stdout, cleared.stderr
    assert [p.name for p in (home / "history").iterdir()] == ["aaaa"]
    assert [p.name for p in (home / "history" / "aaaa").iterdir()] == ["lock"]
    assert tree(elsewhere) == before
    assert "empty" in history().stdout


@pytest.mark.subprocess
def test_a_read_only_history_is_counted_and_a_clear_there_names_what_stayed_and_exits_1(home, read_only):
    folder = home / "history" / "aaaa"
    keep_calls(folder, 144)
    env = edgespec_env(EDGESPEC_HOME=str(home))

    def command(*args: str) -> subprocess.CompletedProcess:
        argv = read_only(home, [sys.executable, "-m", "edgespec", "history", *args])
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False)

    shown = command()
    assert shown.returncode == 0 and "144 calls" in shown.stdout, shown.stderr
    cleared = command("--clear")
    assert cleared.returncode == 1 and "Traceback" not in cleared.stderr
    [line] = cleared.stderr.splitlines()
    assert line.startswith("edgespec: error: history partly cleared") and "log" in line
    assert (folder / "log").exists()


# -- a live server ------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_a_clear_under_a_live_serve_is_noticed_and_recording_goes_on(home, tmp_path, tiny_gguf, tiny_draft_gguf):
    """Before: `history --clear` turned the server's history off for good (it could no longer lock
    the removed folder), while it went on drafting from the cleared text it held in memory."""
    pair = load_registry(tiny_models_toml(tmp_path, tiny_gguf, tiny_draft_gguf)).pair("tiny")
    engine, _ = EngineOptions(pair=pair).check().open()
    engine.sources = open_sources(engine.target, 100_000)
    kept = engine.sources.history
    assert kept is not None
    settings = GenerateSettings(max_tokens=16, draft=DraftChoice.MODEL, policy=PolicyChoice("fixed", 3))
    asked = engine.target.tokenize(engine.target.chat_prompt(HELLO), special=True)
    other = [{"role": "user", "content": "something else entirely"}]
    try:
        with serving_engine(engine, settings) as live, httpx.Client(timeout=60) as client:

            def ask(messages: list[dict]) -> None:
                body = {"model": "tiny", "messages": messages, "max_tokens": 16, "temperature": 0}
                assert client.post(live.url + "/chat/completions", json=body).status_code == 200

            ask(HELLO)
            assert "1 calls" in history().stdout
            assert kept.index.longest_match(asked)[0] == len(asked)  # what a retry would draft from
            assert history("--clear").exit_code == 0
            ask(other)
            assert kept.index.longest_match(asked)[0] < len(asked)  # the cleared call is not drafted from
            assert kept.earlier_replies(asked) == [] and kept.size()[0] == 1
            assert "1 calls" in history().stdout  # the call after the clear was kept
    finally:
        engine.close()
