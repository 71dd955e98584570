"""The reply history on disk: what one process appends another finds on opening, processes append at
once without losing a record, a damaged log is set aside in one line keeping the records before the
damage, the budget drops the oldest first, the files stay private, and the saved index is reused
while it describes the log and rebuilt once it does not."""

from __future__ import annotations

import dataclasses
import mmap
import multiprocessing
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from edgespec.engine import history_log, reply_history
from edgespec.engine.reply_history import ReplyHistory, history_budget
from edgespec.util.errors import UsageError

VOCAB = 100_000  # a tokenizer's size: every id below it is one


class Said(list):
    """The lines a history said, in order (its `say`)."""

    def __call__(self, line: str) -> None:
        self.append(line)


def replies(history, prompt):
    """The earlier replies `prompt` may draft from, without the earlier prompts' lengths."""
    return [reply for _, reply in history.earlier_replies(prompt)]


def opened(folder: Path, budget: int = 10_000) -> tuple[ReplyHistory, Said]:
    said = Said()
    return ReplyHistory.open(folder, budget, say=said, vocab=VOCAB), said


def mapped(array: np.ndarray) -> bool:
    """Whether `array` reads a file mapped into memory (a saved index loaded, not sorted here)."""
    while array is not None and not isinstance(array, mmap.mmap):
        array = array.obj if isinstance(array, memoryview) else array.base
    return array is not None


def saved_indexes(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("index-*.idx"))


def test_another_process_sees_the_appends_on_opening(tmp_path):
    first, said = opened(tmp_path)
    first.append([1, 2, 3], [4, 5, 6])
    first.append([7, 8], [9])
    second, _ = opened(tmp_path)
    assert second.size()[:2] == (2, 9)
    assert replies(second, [1, 2, 3]) == [[4, 5, 6]]
    # a prompt and its reply are one document: the reply continues the prompt's end
    draft = second.index.propose([0, 2, 3], 3)
    assert (draft.ids, draft.match_len) == ([4, 5, 6], 2)
    second.append([1, 2, 3], [4, 5, 7])
    assert replies(first, [1, 2, 3]) == [[4, 5, 6]]  # not until it opens again
    assert replies(opened(tmp_path)[0], [1, 2, 3]) == [[4, 5, 7], [4, 5, 6]]
    assert said == []


def test_earlier_replies_of_the_same_and_of_extended_prompts(tmp_path):
    history, _ = opened(tmp_path)
    history.append([1, 2, 3], [10])
    history.append([1, 2], [11])
    history.append([1, 2, 3, 4, 5], [12])
    history.append([1, 9], [13])
    history.append([1, 2, 3], [])  # no reply: nothing to give back
    assert replies(history, [1, 2, 3]) == [[11], [10]]
    assert replies(history, [1, 2, 3, 4, 5, 6]) == [[12], [11], [10]]  # a retry that goes on
    # sharing [1, 2, 3] with the prompt [1, 2, 3, 4, 5] is not repeating it
    assert replies(history, [1, 2, 3, 4, 7]) == [[11], [10]]
    assert replies(history, [5, 1, 2, 3]) == []
    for n in range(6):
        history.append([1, 2], [20 + n])
    assert replies(history, [1, 2]) == [[25], [24], [23], [22]]  # the newest few


def test_a_hash_collision_is_not_a_match(tmp_path):
    history, _ = opened(tmp_path)
    history.append([1, 2, 3], [10])
    assert replies(history, [1, 2, 3]) == [[10]]
    # the record's prompt hashed as [1, 2, 4] would be: read back and compared whole, it is not that
    other = history_log.prompt_digest(np.asarray([1, 2, 4], dtype="<i4").tobytes())
    history._records[-1] = dataclasses.replace(history._records[-1], prompt_hash=other)
    assert replies(history, [1, 2, 4]) == []


def _append_many(folder: Path, worker: int, n: int) -> None:
    history = ReplyHistory.open(folder, 1_000_000, vocab=VOCAB)
    for i in range(n):
        history.append([worker, i] * 50, [1000 + worker, i] * (20 + i))


@pytest.mark.subprocess
def test_processes_append_at_once_and_every_record_survives(tmp_path):
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_append_many, args=(tmp_path, w, 50)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=60)
        assert p.exitcode == 0
    history, said = opened(tmp_path, 1_000_000)
    assert said == [] and history.size()[0] == 200
    for w in range(4):
        for i in range(50):
            assert replies(history, [w, i] * 50) == [[1000 + w, i] * (20 + i)]


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_log_is_set_aside_in_one_line_keeping_the_records_before(tmp_path, damage):
    history, _ = opened(tmp_path)
    for n in range(3):
        history.append([n, n], [n + 10] * 5)
    log = tmp_path / "log"
    data = bytearray(log.read_bytes())
    if damage == "truncated":
        del data[-3:]  # the third record loses its end
    else:
        data[-10] ^= 0xFF  # in the third record's payload
    log.write_bytes(bytes(data))
    reopened, said = opened(tmp_path)
    assert len(said) == 1 and "damaged" in said[0] and "kept the 2 records" in said[0]
    assert [p.name.startswith("log.damaged-") for p in tmp_path.glob("log.*")] == [True]
    assert reopened.size()[:2] == (2, 14)
    assert replies(reopened, [1, 1]) == [[11] * 5] and replies(reopened, [2, 2]) == []
    reopened.append([2, 2], [12])
    again, said_again = opened(tmp_path)
    assert said_again == [] and again.size()[0] == 3


def test_a_log_that_is_not_one_is_set_aside(tmp_path):
    (tmp_path / "log").write_bytes(b"something else entirely")
    history, said = opened(tmp_path)
    assert len(said) == 1 and "kept the 0 records" in said[0]
    history.append([1], [2])
    assert replies(opened(tmp_path)[0], [1]) == [[2]]


def test_the_budget_drops_the_oldest_first(tmp_path):
    history, _ = opened(tmp_path, budget=100)
    for n in range(4):  # 30 tokens each: the fourth passes 100, and the log keeps 75 at most
        history.append([n] * 10, [n + 50] * 20)
    assert history.size()[:2] == (2, 60)
    assert replies(history, [0] * 10) == [] and replies(history, [1] * 10) == []
    assert replies(history, [3] * 10) == [[53] * 20]
    assert history.index.longest_match([0] * 10)[0] == 0  # dropped from the index too
    reopened, _ = opened(tmp_path, budget=100)
    assert reopened.size()[:2] == (2, 60) and replies(reopened, [2] * 10) == [[52] * 20]
    reopened.append([9], [9] * 200)  # larger than the whole budget: not kept
    assert reopened.size()[:2] == (2, 60)


def test_a_smaller_budget_trims_on_opening(tmp_path):
    history, _ = opened(tmp_path)
    for n in range(10):
        history.append([n] * 10, [n] * 10)
    assert opened(tmp_path, budget=50)[0].size()[:2] == (1, 20)


def test_files_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0o002)
    try:
        folder = tmp_path / "home" / "history" / "tok"
        history, _ = opened(folder)
        history.append([1, 2], [3])
        opened(folder)  # saves an index
    finally:
        os.umask(old)
    for path in [folder, folder.parent, folder.parent.parent]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    names = {p.name for p in folder.iterdir()}
    assert {"log", "lock"} <= names and saved_indexes(folder)
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_clear_removes_everything_kept(tmp_path):
    history, _ = opened(tmp_path)
    history.append([1, 2], [3])
    opened(tmp_path)
    history.clear()
    assert history.size()[:2] == (0, 0) and replies(history, [1, 2]) == []
    assert history.index.longest_match([2])[0] == 0
    assert {p.name for p in tmp_path.iterdir()} == {"lock"}
    assert opened(tmp_path)[0].size()[:2] == (0, 0)
    history.append([4], [5])  # a new log
    assert replies(opened(tmp_path)[0], [4]) == [[5]]


def test_the_saved_index_is_reused_while_it_describes_the_log(tmp_path, monkeypatch):
    first, _ = opened(tmp_path)
    first.append([1, 2, 3], [4, 5])
    first.append([6, 7], [8, 9])
    assert saved_indexes(tmp_path) == []  # appends are indexed in memory only
    second, _ = opened(tmp_path)  # nothing saved: sorts the log, saves it
    [saved] = saved_indexes(tmp_path)
    assert saved.endswith("-2.idx") and not mapped(second.index.parts[0].sa)
    second.append([1, 2, 3], [4, 6])
    third, _ = opened(tmp_path)  # the saved index, and the record after it in memory
    assert saved_indexes(tmp_path) == [saved] and mapped(third.index.parts[0].sa)
    assert third.index.propose([9, 1, 2, 3], 2).ids == [4, 6, 5]  # both continuations of [1, 2, 3]
    # too many records since it was saved: sorted again
    monkeypatch.setattr(reply_history, "REBUILD_TOKENS", 3)
    fourth, _ = opened(tmp_path)
    assert saved_indexes(tmp_path) == [saved.replace("-2.idx", "-3.idx")] and not mapped(fourth.index.parts[0].sa)


def test_an_index_of_a_rewritten_log_is_not_used(tmp_path):
    first, _ = opened(tmp_path, budget=20)
    first.append([1, 2], [3, 4])
    first.append([5, 6], [7, 8])
    opened(tmp_path, budget=20)
    [old] = saved_indexes(tmp_path)
    kept = (tmp_path / old).read_bytes()
    for n in range(4):  # another process trims the log: a new generation
        first.append([10 + n] * 2, [20 + n] * 3)
    # ... and is killed before it saves the new log's index
    for name in saved_indexes(tmp_path):
        (tmp_path / name).unlink()
    (tmp_path / old).write_bytes(kept)
    reopened, _ = opened(tmp_path, budget=20)
    assert not mapped(reopened.index.parts[0].sa)
    [new] = saved_indexes(tmp_path)
    assert new != old and new.endswith("-4.idx")
    assert reopened.index.longest_match([1, 2])[0] == 0
    assert reopened.index.propose([12, 12], 1).ids == [22]


def test_a_damaged_index_is_removed_in_one_line_and_sorted_again(tmp_path):
    history, _ = opened(tmp_path)
    history.append([1, 2], [3])
    opened(tmp_path)
    [saved] = saved_indexes(tmp_path)
    (tmp_path / saved).write_bytes(b"garbage")
    reopened, said = opened(tmp_path)
    assert len(said) == 1 and saved in said[0] and "removed" in said[0]
    assert reopened.index.propose([2], 1).ids == [3]
    assert saved_indexes(tmp_path) == [saved] and opened(tmp_path)[0].index.propose([2], 1).ids == [3]


def test_an_unusable_folder_turns_the_history_off_in_one_line(tmp_path):
    folder = tmp_path / "history"
    folder.write_text("a file where the folder should be")
    history, said = opened(folder)
    history.append([1], [2])
    assert len(said) == 1 and "going on without the reply history" in said[0]
    assert replies(history, [1]) == [] and history.size()[:2] == (0, 0)
    assert folder.read_text() == "a file where the folder should be"


def test_token_ids_out_of_range_are_refused(tmp_path):
    history, _ = opened(tmp_path)
    with pytest.raises(ValueError):
        history.append([1, -1], [2])
    with pytest.raises(ValueError):
        history.append([1], [2**31])
    assert history.size()[:2] == (0, 0)


def test_the_budget_setting(monkeypatch):
    monkeypatch.delenv("EDGESPEC_HISTORY_BUDGET", raising=False)
    assert history_budget(None) == 4_000_000 and history_budget(123) == 123
    monkeypatch.setenv("EDGESPEC_HISTORY_BUDGET", "2M")
    assert history_budget(123) == 2_000_000
    monkeypatch.setenv("EDGESPEC_HISTORY_BUDGET", "lots")
    with pytest.raises(UsageError, match="EDGESPEC_HISTORY_BUDGET"):
        history_budget(None)


@pytest.mark.parametrize("value", ['"lots"', "-1", "true"])
def test_a_bad_history_budget_in_models_toml_is_one_line(tmp_path, value):
    from edgespec.models.config import load_registry
    from edgespec.models.registry import ConfigError

    config = tmp_path / "models.toml"
    config.write_text(f"[history]\nbudget = {value}\n")
    with pytest.raises(ConfigError, match=r'key "history.budget": .* is not a number of tokens'):
        load_registry(config)
    config.write_text('[history]\nbudget = "2M"\n')
    assert load_registry(config).history_budget == 2_000_000
