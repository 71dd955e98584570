"""The chat app reads the next prompt while its message is written (edgespec/tui/read_while_typing.py), on
the tiny GGUF target in read chunks of 32 tokens, driven with Pilot: a pasted file and a typed
question are read ahead in whole chunks before enter, the reply then reads only the rest and is
token for token the reply of a chat that read nothing ahead, an edit behind the read point rolls
back, keystrokes are handled while the engine is busy, and the figure shows in the stats bar and F2."""

from __future__ import annotations

import io
import threading

import pytest
from rich.console import Console

from edgespec.backends.llamacpp import LlamaCppBackend
from edgespec.decoding.drafters import DraftChoice
from edgespec.decoding.events import Summary, Token
from edgespec.decoding.policy.plan import PolicyChoice
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.models.registry import ModelSpec, PairConfig
from edgespec.tui.app import ChatApp
from edgespec.tui.chat_store import ChatStore
from edgespec.tui.details import DetailsScreen, details_renderable
from edgespec.tui.prompt import PromptBox
from edgespec.tui.read_while_typing import settled_prompt
from edgespec.tui.stats import StatsBar
from tests.scripted_chat import SIZE, wait_for_reply, wait_until

CHUNK = 32  # the tiny target's read chunk: whole chunks fit its context many times over
SETTINGS = GenerateSettings(max_tokens=16, draft=DraftChoice.NGRAM, policy=PolicyChoice.parse("3"))
PASTED = "".join(f"def f{i}(a, b):\n    return a * {i} + b\n\n" for i in range(6))  # about 200 tokens
QUESTION = "What is f3(2, 1)?"
NEXT = "And f4(2, 1)?"


@pytest.fixture
def open_app(tiny_gguf, tmp_path):
    """`open_app(read_ahead=True)`: the chat app on a fresh engine over the tiny target, its engine
    calls recorded in order (`app.calls`: ("read", Reading) and ("reply", token ids, Summary))."""
    apps: list[ChatApp] = []

    def make(read_ahead: bool = True) -> ChatApp:
        pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), None, "ngram", 512)
        engine = Engine(pair, LlamaCppBackend(tiny_gguf, 512, threads=1, read_chunk=CHUNK))
        app = ChatApp(engine, SETTINGS, store=ChatStore(tmp_path / f"chats{len(apps)}"))
        app.read_ahead.enabled = read_ahead
        app.calls = record(engine)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.engine_thread.call(app.engine.close)
        app.engine_thread.shutdown()


def record(engine: Engine) -> list[tuple]:
    calls: list[tuple] = []
    read_ahead, chat = engine.read_ahead, engine.chat

    def reading(*args, **kwargs):
        calls.append(("read", read_ahead(*args, **kwargs)))
        return calls[-1][1]

    def replying(*args, **kwargs):
        ids: list[int] = []
        for event in chat(*args, **kwargs):
            if isinstance(event, Token):
                ids.append(event.id)
            elif isinstance(event, Summary):
                calls.append(("reply", ids, event))
            yield event

    engine.read_ahead, engine.chat = reading, replying
    return calls


async def caught_up(pilot) -> None:
    """Until the read ahead has read for the text in the box and nothing more is due."""
    app = pilot.app
    box = app.query_one(PromptBox)
    await pilot.pause()
    await wait_until(pilot, lambda: app.read_ahead.idle and app.read_ahead.read_for == box.text, timeout=30)


async def paste_and_type(pilot, pasted: str = PASTED, typed: str = QUESTION) -> None:
    pilot.app.query_one(PromptBox).insert(pasted)  # one change of many characters: a paste
    await pilot.press(*typed)
    if pilot.app.read_ahead.enabled:
        await caught_up(pilot)


def whole_chunks_settled(app: ChatApp) -> tuple[int, list[int]]:
    """(the whole chunks of what can no longer change, the prompt enter sends) for the box's text."""
    history, text = app.conversation.chat_messages(), app.query_one(PromptBox).text
    settled = settled_prompt(app.engine, history, text, SETTINGS.max_tokens)
    prompt = app.engine.chat_tokens([*history, {"role": "user", "content": text}])
    return len(settled) - len(settled) % CHUNK, prompt


@pytest.mark.asyncio
async def test_a_pasted_file_and_a_typed_question_are_read_ahead_and_the_reply_reads_only_the_rest(open_app):
    app, cold = open_app(), open_app(read_ahead=False)
    async with app.run_test(size=SIZE) as pilot:
        await paste_and_type(pilot)
        ready, prompt = whole_chunks_settled(app)
        reads = [r for kind, r in app.calls if kind == "read"]
        assert len(reads) >= 2 and reads[-1].ready == ready  # the paste, then the question as it was typed
        assert sum(r.read for r in reads) == ready and not any(r.stopped for r in reads)
        assert app.engine.target.cached == prompt[:ready]  # whole chunks of the prompt, nothing else
        assert ready >= len(prompt) - CHUNK - 12  # all but the last chunk's worth (the template's end, a margin)
        await pilot.press("enter")
        await wait_for_reply(pilot)
        [(_, ids, summary)] = [c for c in app.calls if c[0] == "reply"]
        assert summary.prompt_read_ahead == summary.prompt_cached == ready
        assert summary.target_read_tokens == len(prompt) - ready

        assert f"({ready} read ahead)" in str(app.query_one(StatsBar).render())
        await pilot.press("f2")
        assert isinstance(app.screen, DetailsScreen)
        panel = Console(width=200, record=True, file=io.StringIO())
        panel.print(details_renderable(app.screen.figures))
        assert f"{ready} read ahead as the message was written" in panel.export_text()
    async with cold.run_test(size=SIZE) as pilot:
        await paste_and_type(pilot)
        await pilot.press("enter")
        await wait_for_reply(pilot)
    [(_, cold_ids, cold_summary)] = cold.calls
    assert cold_summary.prompt_cached == cold_summary.prompt_read_ahead == 0
    assert ids == cold_ids and app.conversation.messages[-1]["content"] == cold.conversation.messages[-1]["content"]


@pytest.mark.asyncio
async def test_an_edit_behind_the_read_point_rolls_back_and_the_reply_is_still_a_cold_ones(open_app):
    app, cold = open_app(), open_app(read_ahead=False)
    edit = "import math\n"
    async with app.run_test(size=SIZE) as pilot:
        await paste_and_type(pilot)
        before = app.read_ahead.last.ready
        app.query_one(PromptBox).insert(edit, location=(1, 0))  # a line early in the pasted file
        await caught_up(pilot)
        reading = app.read_ahead.last
        ready, prompt = whole_chunks_settled(app)
        assert reading.cached < before and reading.cached % CHUNK == 0  # rolled back to a chunk's start
        assert reading.ready == ready and app.engine.target.cached == prompt[:ready]
        await pilot.press("enter")
        await wait_for_reply(pilot)
        [(_, ids, summary)] = [c for c in app.calls if c[0] == "reply"]
        assert summary.prompt_cached == ready
    async with cold.run_test(size=SIZE) as pilot:
        pasted = PASTED.split("\n", 1)
        await paste_and_type(pilot, pasted[0] + "\n" + edit + pasted[1])
        await pilot.press("enter")
        await wait_for_reply(pilot)
    assert cold.conversation.messages[0] == app.conversation.messages[0]  # the same message was sent
    assert ids == cold.calls[-1][1]


@pytest.mark.asyncio
async def test_keys_are_handled_while_the_engine_is_busy_and_enter_cancels_the_read(open_app):
    app = open_app()
    gate = threading.Event()
    async with app.run_test(size=SIZE) as pilot:
        app.engine_thread.submit(gate.wait)  # the engine thread is busy (as in the middle of a chunk)
        app.query_one(PromptBox).insert(PASTED)
        await pilot.press(*QUESTION)
        await pilot.pause()
        assert app.query_one(PromptBox).text == PASTED + QUESTION  # every key handled, none waited
        assert not app.read_ahead.idle  # a read is due behind the busy engine
        await pilot.press("enter")
        gate.set()
        await wait_for_reply(pilot)
        assert [c[0] for c in app.calls] == ["reply"]  # the read queued before enter never read
        assert app.calls[0][2].prompt_read_ahead == 0


@pytest.mark.asyncio
async def test_regenerate_after_a_read_ahead_of_the_next_message_gives_the_same_reply(open_app):
    app = open_app()
    async with app.run_test(size=SIZE) as pilot:
        await paste_and_type(pilot)
        await pilot.press("enter")
        await wait_for_reply(pilot)
        done = len(app.calls)
        await paste_and_type(pilot, "", NEXT)  # the next message, read ahead after the reply
        assert sum(c[1].read for c in app.calls[done:] if c[0] == "read") >= CHUNK
        gate = threading.Event()
        app.engine_thread.submit(gate.wait)  # the engine busy, a read for more text queues behind it
        app.query_one(PromptBox).insert(" " + PASTED)
        await wait_until(pilot, lambda: app.read_ahead.queued)
        done = len(app.calls)
        await pilot.press("ctrl+r")
        gate.set()
        await wait_until(pilot, lambda: len([c for c in app.calls if c[0] == "reply"]) == 2 and not app.generating)
        assert app.calls[done][0] == "reply"  # the read queued before ctrl+r never ran before it
        first, again = (c for c in app.calls if c[0] == "reply")
        assert first[1] == again[1] and len(app.conversation.messages) == 2
        assert app.query_one(PromptBox).text == NEXT + " " + PASTED  # the message being written stays


def test_the_settled_prompt_is_a_prefix_of_the_prompt_whatever_is_typed_next(tiny_gguf):
    pair = PairConfig("tiny", "llamacpp", ModelSpec("t", "gguf"), None, "ngram", 512)
    engine = Engine(pair, LlamaCppBackend(tiny_gguf, 512, threads=1, read_chunk=CHUNK))
    try:
        history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        for draft in (PASTED + "def long_identifier", PASTED + "x = 1   ", PASTED + "    ", PASTED):
            settled = settled_prompt(engine, history, draft, 16)
            assert len(settled) > len(engine.chat_tokens([*history, {"role": "user", "content": PASTED}])) - 40
            for more in ("_name", "zz", " = 2", "\n\n", "é", "'s", "))", "\t"):
                sent = engine.chat_tokens([*history, {"role": "user", "content": draft + more}])
                assert sent[: len(settled)] == settled, (draft[-12:], more)
        assert settled_prompt(engine, history, "y" * 4000, 16) == []  # no room: enter says so
    finally:
        engine.close()
