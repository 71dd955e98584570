"""The session suite's format (`edgespec.bench.sessions`): sequences of calls read and checked
before any model loads, and each call's messages with the earlier replies put in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgespec.bench import suites
from edgespec.bench.sessions import KINDS, PARTS, SESSION_SUITE, Call, Message, ReplyOf, Session, load_sessions
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
    with pytest.raises(UsageError, match=f"^session suite {tmp_path} is a folder, not a file$"):
        load_sessions(tmp_path)
    with pytest.raises(UsageError, match="^session suite /dev/zero is not a regular file or a pipe$"):
        load_sessions(Path("/dev/zero"))  # refused unopened
    with pytest.raises(UsageError, match="does not exist$"):
        load_sessions(tmp_path / "nope.jsonl")
    with pytest.raises(UsageError, match=r":2: not JSON \("):
        load_sessions(write(tmp_path, line(), "{"))
    with pytest.raises(UsageError, match=":1: not a JSON object$"):
        load_sessions(write(tmp_path, "[]"))
    with pytest.raises(UsageError, match="has no sessions$"):
        load_sessions(write(tmp_path, "", " "))
    monkeypatch.setattr(suites, "SUITE_BYTES", len(line()))
    with pytest.raises(UsageError, match=f"is larger than {len(line())} bytes$"):
        load_sessions(write(tmp_path, line(), line(id="dev/b")))


def test_an_unknown_part_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"^no part named test in a session suite \(parts: dev, heldout\)$"):
        load_sessions(write(tmp_path, line()), parts=["dev", "test"])


# -- the shipped suite ------------------------------------------------------------------------


def texts(session: Session) -> list[str]:
    """The text a session's file gives (the replies it quotes are the model's, not the file's)."""
    return [p for c in session.calls for m in c.messages for p in m.content if isinstance(p, str)]


def test_the_shipped_suite_has_one_session_of_every_kind_in_each_part():
    shipped = load_sessions(SESSION_SUITE)
    assert sorted((s.part, s.kind) for s in shipped) == sorted((p, k) for p in PARTS for k in KINDS)
    assert all(s.id.startswith(f"{s.part}/") and 2 <= len(s.calls) <= 4 for s in shipped)
    assert [s.id for s in load_sessions(SESSION_SUITE, parts=["heldout"])] == [
        s.id for s in shipped if s.part == "heldout"
    ]


def test_each_call_of_the_shipped_suite_fits_its_budget():
    """At most ~1,600 tokens of prompt (3.5 characters a token, each quoted reply at its full
    max_tokens), and 160 to 256 tokens of reply."""
    for s in load_sessions(SESSION_SUITE):
        for i in range(len(s.calls)):
            replies = ["x" * round(3.5 * s.max_tokens(j)) for j in range(i)]
            size = sum(len(m["content"]) for m in s.messages(i, replies)) / 3.5
            assert size <= 1600 and 160 <= s.max_tokens(i) <= 256, (s.id, i, size)


def test_the_kinds_are_what_they_say():
    by_kind = {(s.part, s.kind): s for s in load_sessions(SESSION_SUITE)}
    for part in PARTS:
        regenerate = by_kind[part, "regenerate"]
        assert len({c.messages for c in regenerate.calls}) == 1
        retry, loop, quote = by_kind[part, "retry"], by_kind[part, "tool-loop"], by_kind[part, "chat-quote"]
        for session in (retry, loop, quote):  # each call repeats the last one's messages and its reply
            for i in range(1, len(session.calls)):
                before, now = session.calls[i - 1].messages, session.calls[i].messages
                assert now[: len(before)] == before
                assert now[len(before)] == Message("assistant", (ReplyOf(i - 1),))
        assert ReplyOf(0) in quote.calls[1].messages[-1].content
        # followup: one file, as `edgespec run` sends it (the file, a blank line, the instruction),
        # with three instructions; same-edit: three files
        asks = [c.messages[-1].content for c in by_kind[part, "followup"].calls]
        assert all(len(ask) == 1 and isinstance(ask[0], str) for ask in asks)
        assert len({str(ask[0]).rpartition("\n\n")[0] for ask in asks}) == 1
        assert len({str(ask[0]).rpartition("\n\n")[2] for ask in asks}) == len(asks)
        assert len({c.messages[-1].content for c in by_kind[part, "same-edit"].calls}) == 3


def test_dev_and_heldout_share_no_line():
    """The held-out part judges what was tuned on dev: no line of code or instruction longer than
    30 characters (past `if __name__ == "__main__":` and the like) is in both."""
    lines = {part: set() for part in PARTS}
    for s in load_sessions(SESSION_SUITE):
        lines[s.part] |= {line.strip() for text in texts(s) for line in text.splitlines() if len(line.strip()) > 30}
    assert lines["dev"] and lines["heldout"]
    assert lines["dev"] & lines["heldout"] == set()
