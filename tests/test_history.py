"""Saved chats read back: a damaged or hand-edited file is refused in one line naming the file and the
field, before `edgespec chat --resume` loads a model; files missing keys the app does without still load.
"""

from __future__ import annotations

import copy
import io
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

import edgespec.engine.loading
from edgespec.cli import chat as command
from edgespec.tui.app import ChatApp
from edgespec.tui.chat_store import ChatStore, Conversation, HistoryError
from edgespec.tui.details import details_renderable
from edgespec.tui.stats import ReplyFigures, ReplyStats, frozen_line
from tests.scripted_chat import SIZE, FakeEngine, make_app, reply_text, script, summarize, wait_until

CHAT_ID = "20251129-163701-3f2a"


def reply_stats() -> dict:
    """A finished reply's stats, as the app saves them."""
    stats = ReplyStats()
    events = script()
    for n, event in enumerate(events):
        stats.add(n * 0.01, event)
    stats.add(1.0, summarize(events, "eos"))
    return stats.figures().to_saved()


def saved_chat() -> dict:
    """A chat as the current writer saves it."""
    return {
        "version": 1,
        "id": CHAT_ID,
        "title": "is_palindrome",
        "pair": "qwen2.5-coder-1.5b",
        "system": None,
        "created": 1732896000.0,
        "updated": 1732896060.5,
        "messages": [
            {"role": "user", "content": "Write is_palindrome"},
            {
                "role": "assistant",
                "content": "def f(): ...",
                "spans": [["draft", "def f():"], ["rejected", " x"], ["correction", " ..."]],
                "stats": reply_stats(),
                "complete": True,
            },
        ],
    }


def edited(change) -> bytes:
    d = saved_chat()
    change(d)
    return json.dumps(d).encode()


def set_path(*keys_and_value):
    """A change setting d[k1][k2]... = value."""
    *keys, value = keys_and_value

    def change(d):
        for key in keys[:-1]:
            d = d[key]
        d[keys[-1]] = value

    return change


def drop(*keys):
    def change(d):
        for key in keys[:-1]:
            d = d[key]
        del d[keys[-1]]

    return change


REPLY = ("messages", 1)
STATS = (*REPLY, "stats")
MALFORMED = {  # file bytes -> what the one-line error says after the file's path
    "missing content": (edited(drop(*REPLY, "content")), ' is unreadable: messages[1] has no "content"'),
    "missing role": (edited(drop("messages", 0, "role")), ' is unreadable: messages[0] has no "role"'),
    "span without text": (
        edited(set_path(*REPLY, "spans", [["draft"]])),
        " is unreadable: messages[1].spans[0] is not a [source, text] pair",
    ),
    "span text not a string": (
        edited(set_path(*REPLY, "spans", [["draft", 3]])),
        " is unreadable: messages[1].spans[0] is not a [source, text] pair",
    ),
    "unknown span source": (
        edited(set_path(*REPLY, "spans", [["drafted", "x"]])),
        ' is unreadable: messages[1].spans[0] has the source "drafted", '
        "not one of draft, correction, bonus, target, repeated, copied, rejected",
    ),
    "span source a list": (
        edited(set_path(*REPLY, "spans", [[["draft"], "x"]])),
        ' is unreadable: messages[1].spans[0] has the source ["draft"], '
        "not one of draft, correction, bonus, target, repeated, copied, rejected",
    ),
    "spans not a list": (edited(set_path(*REPLY, "spans", "draft")), " is unreadable: messages[1].spans is not a list"),
    "unknown role": (
        edited(set_path("messages", 0, "role", "system")),
        ' is unreadable: messages[0].role is not "user" or "assistant"',
    ),
    "content not a string": (
        edited(set_path("messages", 0, "content", ["hi"])),
        " is unreadable: messages[0].content is not a string",
    ),
    "message not an object": (
        edited(set_path("messages", 0, "hi")),
        " is unreadable: messages[0] is not a JSON object",
    ),
    "messages not a list": (edited(set_path("messages", {})), " is unreadable: messages is not a list"),
    "complete not a bool": (
        edited(set_path(*REPLY, "complete", "yes")),
        " is unreadable: messages[1].complete is not true or false",
    ),
    "stats not an object": (edited(set_path(*STATS, [])), " is unreadable: messages[1].stats: stats is not an object"),
    "stats figure a string": (
        edited(set_path(*STATS, "decode_s", "fast")),
        " is unreadable: messages[1].stats: decode_s is not a finite number >= 0",
    ),
    "K series with text": (
        edited(set_path(*STATS, "k_series", [3, "4"])),
        " is unreadable: messages[1].stats: k_series is not a list of whole numbers >= 0",
    ),
    "first-version summary figure a string": (
        edited(set_path(*STATS, {"tokens_per_s": 1.0, "summary": {"draft_s": "0.1"}})),
        " is unreadable: messages[1].stats: draft_s is not a finite number >= 0",
    ),
    "controller figure a string": (
        edited(set_path(*STATS, "controller", "measured_speedup", "1.4x")),
        " is unreadable: messages[1].stats: measured_speedup is not a finite number >= 0",
    ),
    "controller incomplete": (
        edited(set_path(*STATS, "controller", {"k": 2})),
        " is unreadable: messages[1].stats: controller has no policy, drafter, acceptance, "
        "predicted_speedup, measured_speedup",
    ),
    "K histogram key not a K": (
        edited(set_path(*STATS, "k_histogram", {"four": 2})),
        ' is unreadable: messages[1].stats: k_histogram is not a map of "K": passes',
    ),
    "id not a string": (edited(set_path("id", 7)), " is unreadable: id is not a string"),
    "no id": (edited(drop("id")), ' is unreadable: the file has no "id"'),
    "id not the file name": (
        edited(set_path("id", "../../elsewhere")),
        ' is unreadable: its id "../../elsewhere" is not its file name',
    ),
    "title null": (edited(set_path("title", None)), " is unreadable: title is not a string"),
    "pair a list": (edited(set_path("pair", ["qwen"])), " is unreadable: pair is not a string"),
    "system a number": (edited(set_path("system", 1)), " is unreadable: system is not a string"),
    "created a string": (edited(set_path("created", "yesterday")), " is unreadable: created is not a number"),
    "updated a bool": (edited(set_path("updated", True)), " is unreadable: updated is not a number"),
    "updated infinite": (
        edited(set_path("updated", 0)).replace(b'"updated": 0', b'"updated": 1e999'),
        " is unreadable: updated is not a number",
    ),
    # json reads "\ud800" as a lone surrogate, which no tokenizer or terminal takes
    "content a lone surrogate": (
        edited(set_path("messages", 0, "content", "is_pal\ud800")),
        " is unreadable: messages[0].content is not valid Unicode (a lone surrogate U+D800 at character 6)",
    ),
    "system a lone surrogate": (
        edited(set_path("system", "\udfff")),
        " is unreadable: system is not valid Unicode (a lone surrogate U+DFFF at character 0)",
    ),
    "span text a lone surrogate": (
        edited(set_path(*REPLY, "spans", [["draft", "x\ud83d"]])),
        " is unreadable: messages[1].spans[0][1] is not valid Unicode (a lone surrogate U+D83D at character 1)",
    ),
    "NaN figure": (
        edited(set_path(*STATS, "ttft_s", float("nan"))),
        " is unreadable: messages[1].stats: ttft_s is not a finite number >= 0",
    ),
    "newer format": (
        edited(set_path("version", 2)),
        " is unreadable: version is not 1 (the only format this edgespec reads; a newer edgespec wrote it?)",
    ),
    "not an object": (b"[]", " is unreadable: the file is not a JSON object"),
    "invalid JSON": (b'{"id": ', " is not valid JSON: Expecting value: line 1 column 8 (char 7)"),
    "empty file": (b"", " is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    "invalid UTF-8": (b'{"id": "\xff"}', " is not UTF-8 text (at byte 8)"),
    "nested too deeply": (b"[" * 100_000, " is nested too deeply to be a chat"),
}


@pytest.fixture
def chats(tmp_path, monkeypatch) -> Path:
    """EDGESPEC_HOME's chat folder, where `edgespec chat` looks."""
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    folder = tmp_path / "chats"
    folder.mkdir()
    return folder


def write(folder: Path, chat_id: str, data: bytes, mtime: float | None = None) -> Path:
    path = folder / f"{chat_id}.json"
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def chat_cli(monkeypatch):
    """Invoke `edgespec chat` with no model and no terminal. -> (invoke, loads, apps): models loaded, apps run."""
    loads, apps = [], []
    monkeypatch.setattr(edgespec.engine.loading, "load_engine", lambda *args: loads.append(args) or FakeEngine())
    monkeypatch.setattr(command, "_reopen_terminal", lambda: None)
    monkeypatch.setattr(command, "_require_terminal", lambda: None)
    monkeypatch.setattr(ChatApp, "run", lambda self: apps.append(self))
    return (lambda *args: CliRunner().invoke(command.chat, list(args))), loads, apps


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_chat_is_refused_in_one_line_before_the_model_loads(case, chats, chat_cli):
    data, why = MALFORMED[case]
    path = write(chats, CHAT_ID, data)
    with pytest.raises(HistoryError) as e:
        ChatStore(chats).load(CHAT_ID)
    assert str(e.value) == f"saved chat {path}{why}"

    invoke, loads, apps = chat_cli
    older = "20251128-090000-aaaa"
    write(chats, older, edited(set_path("id", older)), mtime=1.0e9)  # a valid chat, not the newest
    for args in (["--resume", CHAT_ID], ["--resume"]):
        result = invoke(*args)
        assert (result.exit_code, result.output) == (1, f"edgespec: error: saved chat {path}{why}\n"), args
    assert loads == [] and apps == []


def test_the_only_chat_unreadable_is_named_not_reported_missing(chats):
    path = write(chats, CHAT_ID, b"{")
    with pytest.raises(HistoryError, match=f"^saved chat {path} is not valid JSON"):
        ChatStore(chats).latest()
    (chats / f"{CHAT_ID}.json").unlink()
    with pytest.raises(HistoryError, match=f"^no saved chats in {chats}$"):
        ChatStore(chats).latest()


def test_newest_means_the_file_written_last(chats):
    store = ChatStore(chats)
    # an older file may carry a later "updated" (edited by hand, or copied): the file written last wins
    write(chats, "a", edited(lambda d: d.update(id="a", updated=2e9)), mtime=1.0e9)
    write(chats, "b", edited(lambda d: d.update(id="b", updated=1e9)), mtime=1.1e9)
    assert store.latest().id == "b"
    listed, unreadable = store.load_all()
    assert [c.id for c in listed] == ["b", "a"] and unreadable == []


def test_the_list_leaves_unreadable_chats_out_and_names_them(chats):
    write(chats, "good", edited(set_path("id", "good")))
    bad = write(chats, "bad", edited(drop(*REPLY, "content")).replace(CHAT_ID.encode(), b"bad"))
    listed, unreadable = ChatStore(chats).load_all()
    assert [c.id for c in listed] == ["good"]
    assert [str(e) for e in unreadable] == [f'saved chat {bad} is unreadable: messages[1] has no "content"']


def old_chat() -> dict:
    """Only the keys the app cannot do without: an id and messages with role and content."""
    return {"id": CHAT_ID, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def test_a_chat_without_the_optional_keys_resumes(chats, chat_cli):
    write(chats, CHAT_ID, json.dumps(old_chat()).encode())
    loaded = ChatStore(chats).load(CHAT_ID)
    assert (loaded.title, loaded.pair, loaded.system, loaded.chat_messages()) == (
        "",
        "",
        None,
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    )
    invoke, loads, apps = chat_cli
    result = invoke("--resume")
    assert result.exit_code == 0, result.output
    assert len(loads) == 1 and apps[0].conversation.messages == old_chat()["messages"]


@pytest.mark.asyncio
async def test_a_chat_without_the_optional_keys_is_shown(chats, tmp_path):
    write(chats, CHAT_ID, json.dumps(old_chat()).encode())
    app = make_app(tmp_path, conversation=ChatStore(chats).load(CHAT_ID))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert reply_text(app.transcript.replies()[0]) == "hello"


def test_a_reply_renders_with_any_stats_figure_missing():
    """What the loader lets through, the frozen line and the details panel can show."""
    full = reply_stats()
    for key in [(k,) for k in full] + [("controller", k) for k in full["controller"]]:
        d = copy.deepcopy(full)
        drop(*key)(d)
        try:
            figures = ReplyFigures.from_saved(d)
        except TypeError:
            assert key[0] == "controller"  # a controller state is whole or refused
            continue
        Console(file=io.StringIO()).print(frozen_line(figures), details_renderable(figures))


@pytest.mark.asyncio
async def test_ctrl_o_names_the_chats_it_cannot_list(chats, tmp_path):
    store = ChatStore(chats)
    good = Conversation(pair="p")
    good.add_user("a question")
    store.save(good)
    bad = write(chats, "bad", b"\xff")
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+o")
        await wait_until(pilot, lambda: app._notifications)
        (note,) = list(app._notifications)
        assert note.message == f"saved chat {bad} is not UTF-8 text (at byte 0)"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.conversation.id == good.id)
