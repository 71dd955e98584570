"""The session suite's format (`edgespec.bench.sessions`): sequences of calls read and checked
before any model loads, and each call's messages with the earlier replies put in."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edgespec.bench import suites
from edgespec.bench.sessions import Call, Message, ReplyOf, Session, load_sessions
from edgespec.util.errors import UsageError

FIRST = {"messages": [{"role": "user", "content": "add type hints"}], "max_tokens": 16}
RETRY = {
    "messages": [
        {"role": "user", "content": "add type hints"},
        {"role": "assistant", "content": [{"reply_of": 0}]},
        {"role": "user", "content": ["In this code:\n", {"reply_of": 0}, "\nnow add docstrings"]},
    ],
    "max_tokens": 32,
}
GOOD = {"id": "dev/a", "part": "dev", "kind": "chat-quote", "calls": [FIRST, RETRY]}


def line(**changes: object) -> str:
    return json.dumps({**GOOD, **changes})


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "sessions.jsonl"
    path.write_text("".join(f"{text}\n" for text in lines))
    return path


def test_load_sessions_reads_a_session_and_skips_blank_lines(tmp_path):
    other = line(id="heldout/b", part="heldout", kind="regenerate", calls=[FIRST, FIRST])
    loaded = load_sessions(write(tmp_path, line(), "", "  ", other))
    assert loaded == [
        Session(
            "dev/a",
            "dev",
            "chat-quote",
            (
                Call((Message("user", ("add type hints",)),), 16),
                Call(
                    (
                        Message("user", ("add type hints",)),
                        Message("assistant", (ReplyOf(0),)),
                        Message("user", ("In this code:\n", ReplyOf(0), "\nnow add docstrings")),
                    ),
                    32,
                ),
            ),
        ),
        Session("heldout/b", "heldout", "regenerate", (Call((Message("user", ("add type hints",)),), 16),) * 2),
    ]
    assert [s.id for s in load_sessions(write(tmp_path, line(), other), parts=["heldout"])] == ["heldout/b"]


def test_messages_put_in_the_earlier_replies(tmp_path):
    session = load_sessions(write(tmp_path, line()))[0]
    assert session.messages(0, []) == [{"role": "user", "content": "add type hints"}]
    assert session.messages(1, ["def f(x: int) -> int: ..."]) == [
        {"role": "user", "content": "add type hints"},
        {"role": "assistant", "content": "def f(x: int) -> int: ..."},
        {"role": "user", "content": "In this code:\ndef f(x: int) -> int: ...\nnow add docstrings"},
    ]
    assert (session.max_tokens(0), session.max_tokens(1)) == (16, 32)
    with pytest.raises(ValueError, match="call 1 quotes the reply to call 0, but only 0 replies are given"):
        session.messages(1, [])


def calls_with(**message: object) -> list[dict]:
    return [FIRST, {"messages": [message], "max_tokens": 8}]


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (line(split="dev"), "split: Extra inputs are not permitted"),
        (line(calls=[{**FIRST, "temperature": 0}]), "calls[0].temperature: Extra inputs are not permitted"),
        (
            line(calls=calls_with(role="user", content=["x", {"reply_of": 0, "trim": True}])),
            "calls[1].messages[0].content[1].trim: Extra inputs are not permitted",
        ),
        (
            line(calls=calls_with(role="user", content=["x", {"reply_of": 1}])),
            "calls[1].messages[0].content[1].reply_of: 1 is not an earlier call (this is call 1)",
        ),
        (
            line(calls=[{"messages": [{"role": "user", "content": [{"reply_of": 0}]}], "max_tokens": 8}]),
            "calls[0].messages[0].content[0].reply_of: 0 is not an earlier call (this is call 0)",
        ),
        (
            line(calls=calls_with(role="user", content=[{"reply_of": -1}])),
            "calls[1].messages[0].content[0].reply_of: Input should be greater than or equal to 0",
        ),
        (
            line(calls=calls_with(role="user", content=[{"reply_of": True}])),
            "calls[1].messages[0].content[0].reply_of: Input should be a valid integer",
        ),
        (
            line(calls=calls_with(role="user", content=["x", 3])),
            'calls[1].messages[0].content[1]: is neither text nor {"reply_of": i}',
        ),
        (line(calls=calls_with(role="user", content=3)), "calls[1].messages[0].content: is neither text nor a list"),
        (line(calls=calls_with(role="user", content=[" ", "\n"])), "calls[1].messages[0].content: is empty"),
        (line(calls=calls_with(role="user", content="")), "calls[1].messages[0].content: is empty"),
        (
            line(calls=calls_with(role="tool", content="x")),
            "calls[1].messages[0].role: Input should be 'system', 'user' or 'assistant'",
        ),
        (line(calls=calls_with(role="user", content="x\ud800")), "calls[1].messages[0].content: is not valid Unicode"),
        (line(part="test"), "part: Input should be 'dev' or 'heldout'"),
        (line(kind="rewrite"), "kind: Input should be 'followup', 'same-edit',"),
        (line(id=7), "id: Input should be a valid string"),
        (line(calls=[]), "calls: List should have at least 1 item"),
        (line(calls=[{**FIRST, "max_tokens": 0}]), "calls[0].max_tokens: Input should be greater than or equal to 1"),
        (line(calls=[{**FIRST, "max_tokens": 4097}]), "calls[0].max_tokens: Input should be less than or equal"),
        (line(calls=[{"messages": FIRST["messages"]}]), "calls[0].max_tokens: Field required"),
    ],
)
def test_a_bad_line_is_one_line_naming_the_file_the_line_and_the_field(tmp_path, bad, problem):
    path = write(tmp_path, line(id="dev/ok"), bad)
    with pytest.raises(UsageError) as e:
        load_sessions(path)
    message = str(e.value)
    assert message.startswith(f"{path}:2: {problem}")
    assert "\n" not in message


def test_an_id_may_be_used_once(tmp_path):
    path = write(tmp_path, line(), line(id="dev/b"), line())
    with pytest.raises(UsageError, match=r"^.*:3: id: 'dev/a' is already the id of line 1$"):
        load_sessions(path)


def test_the_file_is_read_as_a_suite_is(tmp_path, monkeypatch):
    not_utf8 = tmp_path / "latin1.jsonl"
    not_utf8.write_bytes(line().encode() + b"\n" + line(id="dev/cafe").encode().replace(b"cafe", b"caf\xe9") + b"\n")
    with pytest.raises(UsageError, match=r"latin1\.jsonl:2: not UTF-8 text \(invalid byte at offset \d+\)$"):
        load_sessions(not_utf8)
    with pytest.raises(UsageError, match=f"^session suite {tmp_path} is not a regular file$"):
        load_sessions(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="is not a regular file$"):
        load_sessions(fifo)  # refused unopened: opening a pipe with no writer would wait forever
    with pytest.raises(UsageError, match="does not exist$"):
        load_sessions(tmp_path / "nope.jsonl")
    with pytest.raises(UsageError, match=r":2: not JSON \("):
        load_sessions(write(tmp_path, line(), "{"))
    with pytest.raises(UsageError, match=":1: not a JSON object$"):
        load_sessions(write(tmp_path, "[]"))
    with pytest.raises(UsageError, match="has no sessions$"):
        load_sessions(write(tmp_path, "", " "))
    monkeypatch.setattr(suites, "SUITE_BYTES", len(line()))
    with pytest.raises(UsageError, match=f"is over {len(line())} bytes; split it$"):
        load_sessions(write(tmp_path, line(), line(id="dev/b")))


def test_an_unknown_part_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"^no part named test in a session suite \(parts: dev, heldout\)$"):
        load_sessions(write(tmp_path, line()), parts=["dev", "test"])
