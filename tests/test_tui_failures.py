"""The chat app when something fails: an engine error, a full context, a chat that cannot be saved
where it belongs, a long chat trimmed to fit; and the real engine on tiny models behind the app."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import GenerateSettings
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.tui.app import ChatApp
from edgespec.tui.chat_store import ChatStore, Conversation
from edgespec.tui.stats import ReplyFigures, frozen_line
from edgespec.tui.transcript import REJECTED, Notice
from tests.scripted_chat import REPLY, SIZE, FakeEngine, TickClock, make_app, script, send, wait_for_reply, wait_until


@pytest.mark.asyncio
async def test_engine_error_shows_a_notification_and_app_recovers(tmp_path):
    engine = FakeEngine(fail_after=0)
    app = make_app(tmp_path, engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        # the empty reply is dropped (its view's removal completes a message-loop turn later)...
        await wait_until(pilot, lambda: not app.generating and app._notifications and not app.transcript.replies())
        notes = list(app._notifications)
        assert notes[-1].severity == "error" and "llama_decode" in notes[-1].message
        assert app.conversation.messages[-1]["role"] == "user"
        engine.fail_after = None
        await pilot.press("ctrl+r")  # ...so regenerate retries the same message
        await wait_for_reply(pilot)
        assert app.conversation.messages[-1]["content"] == REPLY


@pytest.mark.asyncio
async def test_a_reply_cut_by_the_full_context_says_so(tmp_path):
    app = make_app(tmp_path, FakeEngine(stop_reason="context"))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_for_reply(pilot)
        await wait_until(pilot, lambda: app._notifications)
        assert [n.title for n in app._notifications] == ["Context full"]
        assert "stopped: context" in frozen_line(ReplyFigures.from_saved(app.conversation.messages[-1]["stats"])).plain


@pytest.mark.asyncio
async def test_a_chat_with_nowhere_beside_it_to_go_is_rescued_in_a_temporary_folder(tmp_path):
    """Neither chats/ nor rescued/ can be made (their parent is a file): a private temporary folder
    takes the chat, said once however many times the reply is saved while it streams."""
    (tmp_path / "not-a-folder").write_text("")
    app = ChatApp(
        FakeEngine(), GenerateSettings(), store=ChatStore(tmp_path / "not-a-folder" / "chats"), clock=TickClock()
    )
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_for_reply(pilot)
        assert [n.title for n in app._notifications] == ["Saved elsewhere"]
        assert app.conversation.messages[-1]["content"] == REPLY
    [line] = app.unsaved_lines
    rescued = Path(line.rsplit(" it was saved to ", 1)[1])
    try:
        assert rescued.name == f"{app.conversation.id}.json" and rescued.parent.name.startswith("edgespec-rescued-")
        assert json.loads(rescued.read_text())["messages"][-1]["content"] == REPLY
    finally:
        rescued.unlink()
        rescued.parent.rmdir()


@pytest.mark.asyncio
async def test_what_the_engine_cannot_save_is_a_notification_while_the_app_is_on_screen(tmp_path):
    """A read-only home: the calibration the engine thread cannot save is said in the app (stderr
    would tear the screen), and on stderr again once the app has gone."""
    from edgespec.util import unsaved

    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        error = OSError(30, "Read-only file system")
        await asyncio.to_thread(unsaved.cannot_save, "speed calibration", tmp_path, error)  # as the engine thread
        await wait_until(pilot, lambda: app._notifications)
        [note] = app._notifications
        assert note.title == "Not saved" and "speed calibration" in note.message and "Read-only" in note.message
    assert unsaved.say is unsaved._to_stderr


@pytest.mark.asyncio
async def test_a_chat_that_cannot_be_saved_anywhere_says_so(tmp_path, monkeypatch):
    import tempfile

    def no_temporary_folder(prefix):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", no_temporary_folder)
    (tmp_path / "not-a-folder").write_text("")
    app = ChatApp(
        FakeEngine(), GenerateSettings(), store=ChatStore(tmp_path / "not-a-folder" / "chats"), clock=TickClock()
    )
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_for_reply(pilot)
        assert [n.title for n in app._notifications] == ["Not saved"]
    [line] = app.unsaved_lines
    assert "nor in" in line and "a temporary folder (Permission denied)" in line


@pytest.mark.asyncio
async def test_long_chats_are_trimmed_from_the_oldest_turn(tmp_path):
    engine = FakeEngine(events=script("ok."), n_ctx=512)
    app = make_app(tmp_path, engine, system="sys")
    async with app.run_test(size=SIZE) as pilot:
        for n in range(3):
            await send(pilot, f"question {n} " + "x" * 400)
            await wait_until(pilot, lambda n=n: not app.generating and len(app.transcript.replies()) == n + 1)
        sent = engine.calls[-1]
        assert sent[0]["role"] == "system" and sent[-1]["content"].startswith("question 2")
        assert not any(m["content"].startswith("question 0") for m in sent)
        assert app.transcript.query(Notice)
        assert len(app.conversation.messages) == 6  # trimmed from the prompt, not from the chat
        # A message that cannot fit even alone is refused with a notification.
        await send(pilot, "y" * 4000)
        await pilot.pause()
        assert list(app._notifications)[-1].title == "Context full"
        assert not app.generating


@pytest.mark.asyncio
async def test_end_to_end_with_the_tiny_gguf_pair(tmp_path, tiny_gguf, tiny_draft_gguf):
    """The real engine (llama.cpp, tiny random models) behind the app: tokens, steps, summary, save."""
    pytest.importorskip("llama_cpp")
    from edgespec.backends.llamacpp import LlamaCppBackend
    from edgespec.engine.engine import Engine

    pair = PairConfig(
        name="tiny",
        backend="llamacpp",
        target=ModelSpec("tiny", "gguf", path=tiny_gguf),
        draft=ModelSpec("tiny-draft", "gguf", path=tiny_draft_gguf),
        drafter="model",
        context=256,
    )
    engine = Engine(pair, LlamaCppBackend(tiny_gguf, 256, threads=1), LlamaCppBackend(tiny_draft_gguf, 256, threads=1))
    app = ChatApp(
        engine,
        GenerateSettings(max_tokens=32, policy=PolicyChoice("fixed", 3), draft="model"),
        store=ChatStore(tmp_path / "chats"),
    )
    try:
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "the weather")
            await wait_until(pilot, lambda: not app.generating and app.transcript.replies(), timeout=60)
            message = app.conversation.messages[-1]
            stats = message["stats"]
            assert stats["error"] is None and stats["stop_reason"] in ("eos", "length")
            assert stats["tokens"] > 0 and stats["target_passes"] > 0
            assert "".join(t for kind, t in message["spans"] if kind != REJECTED) == message["content"]
            assert {kind for kind, _ in message["spans"]} & {"draft", "correction", "bonus"}
            await pilot.press("f4")  # rejected drafts come back as text through engine.token_text
            assert ChatStore(tmp_path / "chats").load(app.conversation.id).messages[-1]["complete"]
    finally:
        engine.close()


@pytest.mark.asyncio
async def test_markdown_set_before_the_app_runs_shows_the_resumed_replies_in_it(tmp_path):
    """A toggle set before `run` has no transcript to change yet: the replies shown at mount follow
    it (the watcher's guard used to be a method, always true, and the query failed with no screen)."""
    chat = Conversation(pair="tiny", system=None)
    chat.add_user("Write is_palindrome")
    reply = chat.add_assistant()
    reply.update(content=REPLY, spans=[["draft", REPLY]], complete=True)
    app = make_app(tmp_path, conversation=chat)
    app.markdown = True
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        views = app.transcript.replies()
        assert views and all(view.has_class("-markdown") for view in views)
