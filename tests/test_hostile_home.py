"""Each store under the home meets what a damaged or hostile home holds (a FIFO, a link to /dev/zero
or out of the home, a huge size, ids outside the vocabulary, a flipped bit) and sets it aside in one
line, then goes on; nothing is followed, nothing hangs (`util/home_files.py`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgespec.decoding.costs import saved
from edgespec.engine import history_index
from edgespec.engine.history_log import encode_record
from edgespec.engine.prompt_cache import PromptCache
from edgespec.engine.reply_history import ReplyHistory
from edgespec.engine.repository import RepositoryCorpus
from edgespec.models import machine_layout
from edgespec.tui.chat_store import ChatStore, HistoryError
from edgespec.util.home_files import Untrusted, read_home_file, read_home_json

VOCAB = 1000


class Hung(Exception):
    pass


@contextlib.contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail, rather than wait for ever, where the code under test blocks (a FIFO opened for reading)."""

    def hung(*_):
        raise Hung(f"still blocked after {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


class Said(list):
    def __call__(self, line: str) -> None:
        self.append(line)


def history(folder: Path) -> tuple[ReplyHistory, Said]:
    said = Said()
    return ReplyHistory.open(folder, 10_000, say=said, vocab=VOCAB), said


def with_records(folder: Path, n: int = 2) -> None:
    kept, _ = history(folder)
    for i in range(n):
        kept.append([1, 2, i], [3, 4, i])


def replies(kept: ReplyHistory, prompt: list[int]) -> list[list[int]]:
    return [reply for _, reply in kept.earlier_replies(prompt)]


def record(prompt: list[int], reply: list[int], request: bytes = b"r" * 16) -> bytes:
    """A record as appends write it, of a reply served again to `request` (a digest)."""
    return encode_record(prompt, reply, request)


# -- the opener -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "link to a file", "folder", "too large"])
def test_the_opener_takes_regular_files_only_and_bounds_their_size(tmp_path, kind):
    path = tmp_path / "entry"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "too large":
        path.write_bytes(b"x" * 101)
    else:
        target = Path("/dev/zero") if kind == "link to /dev/zero" else tmp_path / "elsewhere"
        if kind == "link to a file":
            target.write_bytes(b"secret")
        path.symlink_to(target)
    with within(5), pytest.raises(Untrusted):
        read_home_file(path, 100)
    with pytest.raises(FileNotFoundError):
        read_home_file(tmp_path / "missing", 100)
    (tmp_path / "whole").write_bytes(b"x" * 100)
    assert read_home_file(tmp_path / "whole", 100) == b"x" * 100


# -- the reply history ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "larger than the budget allows"])
def test_a_log_that_is_not_a_file_is_set_aside_and_the_history_goes_on(tmp_path, kind):
    log = tmp_path / "log"
    if kind == "fifo":
        os.mkfifo(log)
    elif kind == "link to /dev/zero":
        log.symlink_to("/dev/zero")
    else:  # a sparse file far past what 10,000 tokens make
        with open(log, "wb") as f:
            f.truncate(1 << 40)
    with within(10):
        kept, said = history(tmp_path)
        kept.append([5, 6], [7])
    assert len(said) == 1 and "set it aside" in said[0], said
    assert [p.name.startswith("log.damaged-") for p in tmp_path.glob("log.*")] == [True]
    assert replies(history(tmp_path)[0], [5, 6]) == [[7]]


def test_ids_outside_the_vocabulary_are_damage_even_with_a_valid_checksum(tmp_path):
    with_records(tmp_path)
    with open(tmp_path / "log", "ab") as f:
        f.write(record([1, 2], [2**31 - 1]))  # np.bincount would count up to it: 16 GiB
    kept, said = history(tmp_path)
    assert len(said) == 1 and "outside the vocabulary" in said[0] and "kept the 2 records" in said[0]
    assert kept.size()[:2] == (2, 12) and kept.index.propose([1, 2, 1], 2).ids == [3, 4]


def _index(folder: Path) -> Path:
    [path] = folder.glob("index-*.idx")
    return path


@pytest.mark.parametrize("where", ["corpus", "suffix array", "header"])
def test_a_flipped_bit_in_the_saved_index_is_caught_by_its_checksum(tmp_path, where):
    with_records(tmp_path, 3)
    history(tmp_path)  # sorts the log and saves its index
    path = _index(tmp_path)
    data = bytearray(path.read_bytes())
    start = len(history_index.INDEX_MAGIC) + struct.calcsize("<QII")
    at = {"corpus": start + 4 * 2 + 3, "suffix array": len(data) - 5, "header": start - 6}[where]
    data[at] ^= 0x40
    path.write_bytes(bytes(data))
    kept, said = history(tmp_path)
    assert len(said) == 1 and path.name in said[0] and "removed" in said[0]
    assert kept.index.propose([1, 2, 2], 2).ids == [3, 4]
    assert history(tmp_path)[1] == []  # sorted again and saved whole


def test_an_index_of_ids_outside_the_vocabulary_is_not_used(tmp_path):
    with_records(tmp_path)
    history(tmp_path)
    path = _index(tmp_path)
    data = bytearray(path.read_bytes())
    head = len(history_index.INDEX_MAGIC)
    n, _, sa_crc = struct.unpack_from("<QII", data, head)
    start = head + struct.calcsize("<QII")
    tokens = np.frombuffer(bytes(data[start : start + 4 * n]), "<i4").copy()
    tokens[1] = 2**31 - 1
    struct.pack_into("<QII", data, head, n, zlib.crc32(tokens.tobytes()), sa_crc)
    data[start : start + 4 * n] = tokens.tobytes()  # checksums that hold: a writer, not a flipped bit
    path.write_bytes(bytes(data))
    kept, said = history(tmp_path)
    assert len(said) == 1 and "outside the vocabulary" in said[0]
    assert kept.index.propose([1, 2, 0], 2).ids == [3, 4]


def test_fifos_under_index_names_of_either_format_never_block(tmp_path):
    with_records(tmp_path)
    generation = (tmp_path / "log").read_bytes()[25:41].hex()
    for name in (f"index-{generation}-2.npy", f"index-{generation}-2.idx"):
        os.mkfifo(tmp_path / name)
    with within(10):
        kept, said = history(tmp_path)
    assert kept.index.propose([1, 2, 1], 2).ids == [3, 4]
    assert len(said) == 1 and "FIFO" in said[0]
    assert [p.name for p in tmp_path.glob("index-*")] == [_index(tmp_path).name]  # the old format went too


def test_a_lock_that_is_a_link_is_replaced_and_its_target_left_alone(tmp_path):
    target = tmp_path / "not-yours"
    target.write_text("a file of the user's")
    target.chmod(0o644)
    folder = tmp_path / "history"
    folder.mkdir()
    (folder / "lock").symlink_to(target)
    kept, said = history(folder)
    kept.append([1], [2])
    assert stat.S_IMODE(target.stat().st_mode) == 0o644 and target.read_text() == "a file of the user's"
    assert not (folder / "lock").is_symlink() and len(said) == 1 and "link" in said[0]


def test_a_history_folder_that_is_a_link_is_not_used(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("EDGESPEC_HOME", str(home))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    elsewhere.chmod(0o755)
    (home / "history").mkdir(parents=True)
    (home / "history" / "tok").symlink_to(elsewhere)
    kept, said = history(home / "history" / "tok")
    kept.append([1], [2])
    assert len(said) == 1 and "link" in said[0] and "going on without the reply history" in said[0]
    assert list(elsewhere.iterdir()) == [] and stat.S_IMODE(elsewhere.stat().st_mode) == 0o755


def test_a_clear_by_another_process_is_noticed_and_recording_goes_on(tmp_path):
    """A long-lived process (a server) holds the history in memory: after a clear it drafts from
    none of it, and what it appends afterwards is kept."""
    server, said = history(tmp_path)
    server.append([1, 2, 3], [4, 5, 6])
    assert server.index.propose([1, 2, 3], 3).ids == [4, 5, 6]
    other, _ = history(tmp_path)
    other.clear()
    server.refresh()  # what the engine does before each call
    assert server.index.propose([1, 2, 3], 3).ids == [] and replies(server, [1, 2, 3]) == []
    assert server.size()[:2] == (0, 0)
    server.append([7, 8], [9])
    assert said == [] and replies(history(tmp_path)[0], [7, 8]) == [[9]]


def test_a_folder_removed_under_a_running_process_is_made_again(tmp_path):
    folder = tmp_path / "history"
    server, said = history(folder)
    server.append([1], [2])
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    server.append([3], [4])
    assert said == [] and replies(history(folder)[0], [3]) == [[4]] and replies(server, [1]) == []


# -- the other stores -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "ids outside the vocabulary", "cut short"])
def test_a_repository_token_file_that_is_not_one_is_removed_and_tokenized_again(tmp_path, kind, capsys):
    src = tmp_path / "src.py"
    src.write_text("abcabc")
    corpus = RepositoryCorpus(tmp_path / "cache", lambda text: [ord(c) for c in text], 256)
    corpus.build([src])
    [kept] = (tmp_path / "cache").glob("*.tokens")
    kept.unlink()
    if kind == "fifo":
        os.mkfifo(kept)
    else:
        kept.write_bytes(np.asarray([97, 2**31 - 1], "<i4").tobytes() if kind != "cut short" else b"abcde")
    with within(10):
        index = corpus.build([src])
    assert index is not None and index.propose([ord("a"), ord("b")], 2).ids == [ord("c"), ord("a")]
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert kept.is_file() and len(kept.read_bytes()) == 24  # tokenized again and kept


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_saved_chat_that_is_not_a_file_is_one_line_and_left_alone(tmp_path, kind):
    store = ChatStore(tmp_path / "chats")
    store.root.mkdir()
    path = store.root / "20251129-163701-3f2a.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        (tmp_path / "outside.json").write_text("{}")
        path.symlink_to(tmp_path / "outside.json")
    with within(10):
        chats, unreadable = store.load_all()
        with pytest.raises(HistoryError, match="not a regular file"):
            store.latest()
    assert chats == [] and len(unreadable) == 1 and os.path.lexists(path)


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "a list", "not JSON", "nested deep"])
def test_a_json_record_that_is_not_one_is_removed_in_one_line(tmp_path, kind, capsys):
    path = tmp_path / "record.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text({"a list": "[1, 2]", "not JSON": "{", "nested deep": "[" * 100_000}[kind])
    with within(10):
        assert read_home_json(path, 1 << 20, "a record") == {}
    assert not os.path.lexists(path) and len(capsys.readouterr().err.splitlines()) == 1


def test_the_calibration_and_the_machine_layout_record_never_block(tmp_path, own_calibration_file):
    os.mkfifo(own_calibration_file)
    os.mkfifo(tmp_path / machine_layout.RECORD)
    with within(10):
        assert saved.read_calibration("v5|key") is None
        saved.save_calibration("v5|key", {"costs": 1})
        assert machine_layout.read_choice(tmp_path, "0" * 64) is None
    assert json.loads(own_calibration_file.read_text()) == {"v5|key": {"costs": 1}}


def test_a_prompt_cache_folder_that_is_a_link_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path / "home"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "prompt-cache").symlink_to(elsewhere)
    said: list[str] = []
    cache = PromptCache(warn=said.append)
    assert cache._disk_entries("identity") == [] and len(said) == 1 and "link" in said[0]
