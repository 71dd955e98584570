"""The chat app, driven with Pilot and fed by a scripted fake engine (tests/scripted_chat.py; no model needed).

The fake's stream has every token source (draft, correction, bonus, target) and rejected draft ids;
it can pause mid-reply (to test esc, saving while streaming, and a mid-reply snapshot) or fail.
A tick clock (+25 ms per reading) makes every figure on screen reproducible.

Run `python tests/test_tui.py --screenshot assets/chat.svg` to redraw the README's screenshot.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text
from textual.app import App

from edgespec.decoding.backend import Placement
from edgespec.decoding.drafters import DrafterKind
from edgespec.decoding.events import ControllerState, Source, Step, Token
from edgespec.decoding.sampling import SamplingParams
from edgespec.engine.engine import GenerateSettings
from edgespec.tui.app import ChatApp
from edgespec.tui.chat_store import COPIED, SPAN_KINDS, ChatStore, Conversation
from edgespec.tui.details import DetailsScreen, details_renderable, speedup_line
from edgespec.tui.pacing import SHARED_CPU, SPARE_CORE, Budget, UpdatePacer, update_budget
from edgespec.tui.prompt import PromptBox
from edgespec.tui.stats import ReplyFigures, ReplyStats, StatsBar, frozen_line, sparkline
from edgespec.tui.transcript import LEGEND_LABELS, REJECTED, STYLES, ReplySpans, ReplyView, UserMessage, render_spans
from tests.scripted_chat import (
    REPLY,
    SIZE,
    FakeEngine,
    TickClock,
    make_app,
    n_tokens_shown,
    reply_text,
    script,
    send,
    split_tokens,
    summarize,
    wait_for_reply,
    wait_until,
)

# Transcript and styles


@pytest.mark.asyncio
async def test_reply_shows_every_source_in_its_style(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_for_reply(pilot)
        view = app.transcript.replies()[0]
        assert view.message["content"] == REPLY
        kinds = {kind for kind, _ in view.message["spans"]}
        assert kinds == {"draft", "correction", "bonus", "target", REJECTED}
        text = view.tokens.content
        assert text.plain == REPLY  # rejected text hidden by default
        styles = {str(span.style) for span in text.spans}
        for source in ("draft", "correction", "bonus"):
            assert STYLES[source] in styles
        assert "underline" in STYLES["correction"] and "bold" in STYLES["bonus"]  # read without colour

        # F4: thrown-away draft text struck through right before each correction.
        await pilot.press("f4")
        text = view.tokens.content
        struck = [text.plain[s.start : s.end] for s in text.spans if "strike" in str(s.style)]
        assert struck and all(piece for piece in struck)
        first = next(i for i, (k, _) in enumerate(view.message["spans"]) if k == REJECTED)
        assert view.message["spans"][first + 1][0] == "correction"
        await pilot.press("f4")
        assert view.tokens.content.plain == REPLY

        # Frozen stats under the reply, from the Summary.
        stats = view.message["stats"]
        assert stats["stop_reason"] == "eos" and stats["tokens"] == len(split_tokens(REPLY))
        assert "tok/s" in view.footer.content.plain and "accept 7" in view.footer.content.plain


def test_rejected_text_lands_before_its_correction_whatever_the_step_order():
    after = {"content": "", "spans": []}
    spans = ReplySpans(after)
    spans.token(Source.DRAFT, "a")
    spans.token(Source.CORRECTION, "b")
    spans.rejected("X")  # Step after its tokens
    before = {"content": "", "spans": []}
    spans2 = ReplySpans(before)
    spans2.token(Source.DRAFT, "a")
    spans2.rejected("X")  # Step before its tokens
    spans2.token(Source.CORRECTION, "b")
    assert after["spans"] == before["spans"] == [["draft", "a"], [REJECTED, "X"], ["correction", "b"]]
    assert after["content"] == before["content"] == "ab"
    # Control bytes from a model are shown, never sent to the terminal; the saved text keeps them.
    assert render_spans([["draft", "a\x1b[2Jb\n"]], False).plain == "a␛[2Jb\n"


def test_copied_drafts_are_a_span_kind_of_their_own_and_merge_like_drafts():
    message = {"content": "", "spans": []}
    spans = ReplySpans(message)
    spans.token(Source.DRAFT, "a", copied=True)
    spans.token(Source.DRAFT, "b", copied=True)
    spans.token(Source.DRAFT, "c")
    spans.token(Source.BONUS, "d", copied=True)  # only accepted drafts are copies
    assert message["spans"] == [[COPIED, "ab"], ["draft", "c"], ["bonus", "d"]]
    assert COPIED in SPAN_KINDS and COPIED in dict(LEGEND_LABELS)


@pytest.mark.asyncio
async def test_the_status_bar_names_the_drafter_by_its_value():
    """The engine's controller reports a DrafterKind; the bar read "K 2 DrafterKind.MODEL" while it
    was a str-mixin Enum (Python 3.11 formats those by name)."""
    state = ControllerState("auto", 2, DrafterKind.MODEL, 0.5, 1.2, 1.1)
    stats = ReplyStats(sent_at=0.0)
    stats.add(0.1, Step(2, 2, (1, 2), (), 0.01, 0.02, drafter=DrafterKind.MODEL, controller=state))
    for n in range(3):
        stats.add(0.2 + n * 0.01, Token(n, "a", Source.DRAFT))

    class BarOnly(App):
        def compose(self):
            yield StatsBar()

    app = BarOnly()
    async with app.run_test():
        bar = app.query_one(StatsBar)
        bar.show(stats.figures(), generating=True)
        assert " · K 2 model " in str(bar.render())


def test_live_figures_come_from_the_tally_and_the_stamps_until_the_summary():
    events = script()
    stats = ReplyStats(sent_at=0.0)
    for n, e in enumerate(events):
        stats.add(0.1 + n * 0.01, e)
    live = stats.figures().summary
    tokens = [n for n, e in enumerate(events) if isinstance(e, Token)]
    assert live.tokens == len(tokens) and live.target_passes == sum(isinstance(e, Step) for e in events)
    assert live.ttft_s == pytest.approx(0.1) and live.decode_s == pytest.approx((tokens[-1] - tokens[0]) * 0.01)
    assert 0 < live.acceptance < 1 and live.tokens_per_pass > 1
    assert stats.figures().current_k == events[-1].controller.draft_len
    stats.add(1.0, summarize(events, "eos"))
    assert stats.figures().summary.ttft_s == 0.15 and stats.figures().summary.stop_reason == "eos"
    assert sparkline([0, 1, 2, 3], 0, 3) == "▁▃▆█"
    assert len(sparkline(list(range(100)), 0, 99, width=16)) == 16


def test_saved_figures_read_back_the_same_and_old_files_still_read():
    events = script()
    figures = ReplyFigures(summarize(events, "length"), None)
    assert ReplyFigures.from_saved(json.loads(json.dumps(figures.to_saved()))) == figures
    # the first version: figures at the top, the decoder's summary nested
    v1 = {
        "tokens_per_s": 21.0,
        "ttft_s": 0.2,
        "acceptance": 0.5,
        "tokens_per_pass": 1.5,
        "tokens": 12,
        "k_series": [4, 0],
        "acceptance_series": [0.5],
        "k_histogram": {"4": 1, "0": 1},
        "sources": {"draft": 2, "target": 1},
        "plain_passes": 1,
        "plain_s": 0.03,
        "controller": None,
        "current_k": 0,
        "stop_reason": "eos",
        "error": None,
        "summary": {
            "tokens": 12,
            "drafted": 4,
            "accepted": 2,
            "target_passes": 2,
            "prompt_tokens": 9,
            "prefill_s": 0.1,
            "decode_s": 0.5,
            "ttft_s": 0.2,
            "draft_s": 0.01,
            "verify_s": 0.05,
            "stop_reason": "eos",
            "k_histogram": {"0": 1, "4": 1},
            "decode_tokens_per_s": 22.0,
            "acceptance": 0.5,
            "tokens_per_pass": 5.5,
        },
    }
    old = ReplyFigures.from_saved(v1).summary
    assert (old.tokens, old.drafted, old.k_series, old.sources, old.k_histogram) == (
        12,
        4,
        [4, 0],
        {"draft": 2, "target": 1},
        {0: 1, 4: 1},
    )
    assert "22.0 tok/s" in frozen_line(ReplyFigures.from_saved(v1)).plain
    for bad in ({"tokens": "many"}, {"k_series": ["x"]}, {"controller": 3}, {"error": 5}, [1]):
        with pytest.raises((TypeError, ValueError)):
            ReplyFigures.from_saved(bad)


# Keys


@pytest.mark.asyncio
async def test_a_long_streaming_reply_freezes_finished_lines_and_ends_as_one_text(tmp_path):
    long_reply = "".join(f"line {i}: value = compute({i})\n" for i in range(80))
    events = script(long_reply)
    engine = FakeEngine(events, pause_after=len(events) - 5)
    app = make_app(tmp_path, engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "write many lines")
        view = app.transcript.replies()[0]

        def shown() -> str:
            return "".join(block.content.plain for block in view._blocks) + reply_text(view)

        # nothing lost or doubled at the seams, once a flush after the queue drained has run
        await wait_until(
            pilot,
            lambda: (
                engine.paused.is_set() and app._gen.queue.empty() and shown().rstrip("▍") == view.message["content"]
            ),
        )
        assert view._blocks, "finished lines should sit in frozen blocks while streaming"
        engine.resume.set()
        await wait_until(pilot, lambda: not app.generating)
        assert not view._blocks and reply_text(view) == long_reply


@pytest.mark.asyncio
async def test_a_streaming_line_that_wraps_gets_its_height(tmp_path):
    """Updates that keep the height repaint without a layout; one that wraps must still get a row."""

    class One(App):
        def compose(self):
            yield ReplyView({"role": "assistant", "content": "", "spans": []}, generating=True)

    app = One()
    async with app.run_test(size=(40, 20)) as pilot:
        view = app.query_one(ReplyView)
        heights = []
        for i in range(30):
            view.message["spans"].append(["draft", f"w{i} "])
            view.update_tokens()
            await pilot.pause()
            tokens = view.tokens
            rows = len(Text(tokens.content.plain).wrap(app.console, tokens.content_size.width))
            heights.append(tokens.content_size.height)
            assert tokens.content_size.height == rows, f"after {i + 1} words"
        assert heights[-1] > heights[0] >= 1  # the text did wrap onto new rows


def test_update_pacer_keeps_the_ui_within_its_cpu_budget():
    cpu = [0.0]
    pacer = UpdatePacer(Budget(cpu_share=0.03, min_hz=2, max_hz=30), cpu_clock=lambda: cpu[0], smoothing=1.0)
    assert pacer.restart() == pacer.after_empty_poll(0) == UpdatePacer.WAITING_POLL  # no token yet: look often
    assert pacer.after_empty_poll(1) == pacer.interval == 0.25  # then at the pace of updates: none measured yet
    cpu[0] += 0.006  # 6 ms of UI work per update: one every 0.2 s keeps it at 3% of a core
    assert pacer.next_interval() == pytest.approx(0.2 - 0.006)  # the wait is the period less the update
    cpu[0] += 0.0003  # cheap updates: capped at 30 a second
    assert pacer.next_interval() == pytest.approx(1 / 30 - 0.0003)
    cpu[0] += 0.1  # expensive ones: never fewer than 2 a second
    assert pacer.next_interval() == pytest.approx(0.5 - 0.1)
    cpu[0] += 5.0  # idle time between replies is not a cost of the next one
    pacer.restart()
    cpu[0] += 0.006
    assert pacer.next_interval() == pytest.approx(0.2 - 0.006)


def test_the_update_budget_follows_whether_decoding_leaves_a_core_free():
    assert update_budget(decoding_threads=2, cores=2) is SHARED_CPU  # llama.cpp on every core
    assert update_budget(decoding_threads=8, cores=2) is SHARED_CPU
    assert update_budget(decoding_threads=1, cores=2) is SPARE_CORE  # threads = 1 on 2 cores, or a GPU pair
    assert update_budget(decoding_threads=1, cores=1) is SHARED_CPU  # a GPU pair on one core: the loop shares it

    def rate(budget: Budget, cost: float) -> float:
        """Updates a second when each update costs the UI `cost` seconds of CPU (its wait, then itself)."""
        cpu = [0.0]
        pacer = UpdatePacer(budget, cpu_clock=lambda: cpu[0], smoothing=1.0)
        pacer.restart()
        cpu[0] += cost
        return 1 / (pacer.next_interval() + cost)

    for cost, shared_hz, spare_hz in ((0.006, 5, 30), (0.012, 2.5, 20.8), (0.05, 2, 15)):
        assert (rate(SHARED_CPU, cost), rate(SPARE_CORE, cost)) == pytest.approx((shared_hz, spare_hz), abs=0.1)
    assert SPARE_CORE.min_hz >= 15  # an update dearer than the budget still comes 15 times a second
    assert rate(SPARE_CORE, 0.1) == pytest.approx(1 / (0.1 + UpdatePacer.SHORTEST_WAIT))  # dearer than 1/15 s


@pytest.mark.parametrize("threads, cores, budget", [(2, 2, SHARED_CPU), (1, 2, SPARE_CORE), (1, 1, SHARED_CPU)])
def test_the_app_paces_by_the_engines_decoding_threads(tmp_path, monkeypatch, threads, cores, budget):
    monkeypatch.setattr("edgespec.tui.app.physical_cores", lambda: cores)
    assert make_app(tmp_path, FakeEngine(threads=threads)).pacer.budget is budget


def test_the_header_says_where_each_model_runs(tmp_path):
    from edgespec.tui.header import describe_pair

    engine = FakeEngine()
    assert describe_pair(engine) == (
        "llamacpp · cpu · qwen2.5-coder-1.5b-instruct-q4_k_m ← qwen2.5-coder-0.5b-instruct-q4_k_m"
    )
    engine.placements = lambda: {
        "target": Placement("gpu", "29/29 layers on CUDA0", 0),
        "draft": Placement("gpu", "25/25 layers on CUDA0", 0),
    }
    assert describe_pair(engine).startswith("llamacpp · gpu · ")
    engine.placements = lambda: {
        "target": Placement("gpu", "29/29 layers on CUDA0", 0),
        "draft": Placement("cpu", "2 threads", 2),
    }
    assert describe_pair(engine).startswith("llamacpp · target gpu, draft cpu · ")


@pytest.mark.asyncio
async def test_esc_cancels_and_keeps_the_partial_reply(tmp_path):
    engine = FakeEngine(pause_after=20)
    app = make_app(tmp_path, engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_until(pilot, lambda: engine.paused.is_set() and n_tokens_shown(app) > 0 and app._gen.queue.empty())
        partial = app._gen.message["content"]
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.generating)
        view = app.transcript.replies()[0]
        assert view.message["content"] == partial and partial and REPLY.startswith(partial)
        assert view.message["stats"]["stop_reason"] == "cancelled"
        assert "stopped: cancelled" in view.footer.content.plain
        # Still usable: the next message goes out with the partial reply in its history.
        engine.pause_after = None
        await send(pilot, "go on")
        await wait_until(pilot, lambda: not app.generating and len(app.transcript.replies()) == 2)
        assert engine.calls[-1][-2] == {"role": "assistant", "content": partial}


@pytest.mark.asyncio
async def test_prompt_enter_sends_and_ctrl_j_adds_a_line(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("h", "i", "ctrl+j", "y", "o")
        assert app.query_one(PromptBox).text == "hi\nyo"
        await pilot.press("enter")
        await wait_for_reply(pilot)
        assert app.conversation.messages[0] == {"role": "user", "content": "hi\nyo"}
        assert app.query_one(PromptBox).text == ""


@pytest.mark.asyncio
async def test_ctrl_n_starts_an_empty_chat(tmp_path):
    app = make_app(tmp_path, system="be brief")
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_for_reply(pilot)
        old_id = app.conversation.id
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert app.conversation.id != old_id and app.conversation.messages == []
        assert not app.transcript.query(ReplyView) and not app.transcript.query(UserMessage)
        assert app.conversation.system == "be brief"
        assert ChatStore(tmp_path / "chats").load(old_id).messages[-1]["content"] == REPLY


@pytest.mark.asyncio
async def test_ctrl_n_mid_reply_stops_it_and_keeps_it_in_the_old_chat(tmp_path):
    engine = FakeEngine(pause_after=20)
    app = make_app(tmp_path, engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_until(pilot, lambda: engine.paused.is_set() and n_tokens_shown(app) > 0)
        old_id = app.conversation.id
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: not app.generating)
        assert app.conversation.messages == [] and not app.transcript.query(ReplyView)
        old = ChatStore(tmp_path / "chats").load(old_id).messages[-1]
        assert old["stats"]["stop_reason"] == "cancelled" and REPLY.startswith(old["content"])
        engine.pause_after = None
        await send(pilot, "again")  # the engine is free again
        await wait_for_reply(pilot)


@pytest.mark.asyncio
async def test_ctrl_r_regenerates_the_last_reply(tmp_path):
    engine = FakeEngine()
    app = make_app(tmp_path, engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_for_reply(pilot)
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: len(engine.calls) == 2 and not app.generating)
        assert engine.calls[0] == engine.calls[1]  # the same prompt, without the old reply
        assert [m["role"] for m in app.conversation.messages] == ["user", "assistant"]
        assert len(app.transcript.replies()) == 1


@pytest.mark.asyncio
async def test_a_regenerate_drafts_from_the_reply_it_replaces_and_says_it_stays_exact(tmp_path):
    engine = FakeEngine()
    sampled = GenerateSettings(max_tokens=256, sampling=SamplingParams(temperature=0.8))
    app = ChatApp(engine, sampled, store=ChatStore(tmp_path / "chats"), clock=TickClock())
    async with app.run_test(size=(160, 34)) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_for_reply(pilot)
        first = app.conversation.messages[-1]["content"]
        assert "replaced" not in str(app.query_one(StatsBar).render())
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: len(engine.calls) == 2 and not app.generating)
        assert engine.settings[0].earlier_reply is None and engine.settings[1].earlier_reply == first == REPLY
        taken = app._last_figures.summary.accepted_by["replaced"]
        said = f"drafts from the replaced reply ({taken} taken) · sampled exactly"
        assert taken > 0 and said in str(app.query_one(StatsBar).render())
        assert said in str(app.transcript.replies()[0].footer.render())  # the line under the reply
        await pilot.press("f2")
        console = Console(width=400, file=io.StringIO(), record=True)
        console.print(details_renderable(app.screen.figures))
        assert said in console.export_text()


@pytest.mark.asyncio
async def test_markdown_toggle_renders_finished_replies(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_for_reply(pilot)
        view = app.transcript.replies()[0]
        await pilot.press("f3")
        await pilot.pause()
        assert view.has_class("-markdown") and view._markdown is not None
        await pilot.press("f3")
        assert not view.has_class("-markdown")


@pytest.mark.asyncio
async def test_details_panel_opens_and_closes(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_for_reply(pilot)
        await pilot.press("f2")
        assert isinstance(app.screen, DetailsScreen)
        assert app.screen.figures.summary.stop_reason == "eos"
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailsScreen)


@pytest.mark.asyncio
async def test_command_palette_lists_the_chat_actions(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE):
        titles = {c.title for c in app.get_system_commands(app.screen)}
    assert {"New chat", "Regenerate", "Stop", "Details", "Markdown", "Rejected drafts", "Open chat"} <= titles


def test_details_speedup_prefers_controller_then_plain_passes():
    summary = summarize(script(), "eos")
    assert speedup_line(ReplyFigures(summary)).plain.startswith("1.42× measured")
    summary.controller = None
    assert "plain passes" in speedup_line(ReplyFigures(summary)).plain
    summary.plain_passes = 0
    assert speedup_line(ReplyFigures(summary)).plain.startswith("≤ ")
    details_renderable(ReplyFigures(summary))  # renders with every figure present
    assert "No reply yet" in details_renderable(None).plain


# History


@pytest.mark.asyncio
async def test_history_saved_while_streaming_and_resumed(tmp_path):
    engine = FakeEngine(pause_after=30)
    store = ChatStore(tmp_path / "chats")
    app = make_app(tmp_path, engine)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "Write is_palindrome")
        await wait_until(pilot, lambda: engine.paused.is_set() and n_tokens_shown(app) > 0 and app._gen.queue.empty())
        await pilot.pause(0.1)
        # Mid-reply, the file on disk already holds what is on screen (a kill now loses nothing shown).
        saved = json.loads(store.path(app.conversation.id).read_text())
        assert saved["messages"][-1]["content"] == app._gen.message["content"] != ""
        assert saved["messages"][-1]["complete"] is False
        engine.resume.set()
        await wait_until(pilot, lambda: not app.generating)
        chat_id = app.conversation.id
    assert not list((tmp_path / "chats").glob("*.partial"))

    resumed = store.load(chat_id)
    assert resumed.messages[-1]["complete"] and resumed.messages[-1]["content"] == REPLY
    engine2 = FakeEngine()
    app2 = make_app(tmp_path, engine2, conversation=resumed)
    async with app2.run_test(size=SIZE) as pilot:
        view = app2.transcript.replies()[0]
        assert reply_text(view) == REPLY
        assert "tok/s" in view.footer.content.plain
        await send(pilot, "and in Rust?")
        await wait_until(pilot, lambda: not app2.generating and len(app2.transcript.replies()) == 2)
        assert [m["role"] for m in engine2.calls[0]] == ["user", "assistant", "user"]
    assert len(store.load(chat_id).messages) == 4
    assert [c.id for c in store.load_all()[0]] == [chat_id]


@pytest.mark.asyncio
async def test_saved_chats_list_reopens_a_chat(tmp_path):
    store = ChatStore(tmp_path / "chats")
    old = Conversation(pair="qwen2.5-coder-1.5b")
    old.add_user("an older question")
    old.messages.append(
        {
            "role": "assistant",
            "content": "an older answer",
            "spans": [["target", "an older answer"]],
            "stats": None,
            "complete": False,
        }
    )
    store.save(old)
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+o")
        await pilot.pause()
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.conversation.id == old.id)
        await pilot.pause()
        view = app.transcript.replies()[0]
        assert reply_text(view) == "an older answer"
        assert "interrupted" in view.footer.content.plain


def test_store_uses_edgespec_home(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    store = ChatStore()
    assert store.root == tmp_path / "chats"
    c = Conversation(pair="p")
    c.add_user("hello there\nsecond line")
    store.save(c)
    assert store.latest().title == "hello there"


# Snapshots (pytest-textual-snapshot; update with --snapshot-update after checking the report)


def mid_reply_app(tmp_path: Path, show_rejected: bool = True) -> tuple[ChatApp, object]:
    engine = FakeEngine(pause_after=150)
    app = make_app(tmp_path, engine, system="You are a concise coding assistant.")

    async def run_before(pilot) -> None:
        app.query_one(PromptBox).cursor_blink = False
        await send(pilot, "Write a Python function that checks whether a string is a palindrome.")
        await wait_until(pilot, lambda: engine.paused.is_set() and n_tokens_shown(app) > 0 and app._gen.queue.empty())
        if show_rejected:
            await pilot.press("f4")  # show the rejected draft tokens too
            await pilot.pause()

    return app, run_before


def test_snapshot_mid_reply(tmp_path, snap_compare):
    app, run_before = mid_reply_app(tmp_path)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_snapshot_details_panel(tmp_path, snap_compare):
    app = make_app(tmp_path)

    async def run_before(pilot) -> None:
        app.query_one(PromptBox).cursor_blink = False
        await send(pilot, "Write a Python function that checks whether a string is a palindrome.")
        await wait_for_reply(pilot)
        await pilot.press("f2")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


if __name__ == "__main__":
    # python tests/test_tui.py --screenshot assets/chat.svg
    import tempfile

    out = Path(sys.argv[sys.argv.index("--screenshot") + 1])

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            app, run_before = mid_reply_app(Path(tmp), show_rejected=False)
            async with app.run_test(size=SIZE) as pilot:
                await run_before(pilot)
                app.save_screenshot(filename=out.name, path=str(out.parent))

    asyncio.run(main())
    print(f"wrote {out}")
