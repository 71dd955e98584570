"""The chat app: one conversation on screen, the engine in a thread worker, events batched into the UI.

Flow of one reply: `send` adds the user message, trims the oldest turns if the prompt would not fit
the context window (`generation.fit_context`), and starts `Generation.run` in a thread worker,
which only iterates `engine.chat(...)` and queues the events, so decoding never waits for the UI.
A timer drains the queue as often as `UpdatePacer` allows (see pacing.py; its budget is larger when
decoding leaves a core free): it folds the events into the reply's spans and stats, repaints the
reply and the stats bar once, and saves the conversation (atomic write), so a crash loses at most
the last flush's tokens. The worker's last item ends the reply; that flush freezes the reply's stats.

The app talks to the engine through `edgespec.engine.engine.Engine` plus one optional method,
`token_text(id) -> str` (text of a single token, for showing rejected draft tokens); an engine
without it shows rejected tokens as their ids.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from functools import partial

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.reactive import var
from textual.timer import Timer
from textual.widgets import Footer, Header, Static, TextArea

from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.engine_thread import EngineThread
from edgespec.tui.actions import ChatActions
from edgespec.tui.chat_store import ChatStore, Conversation
from edgespec.tui.generation import Generation, fit_context
from edgespec.tui.header import describe_pair
from edgespec.tui.pacing import UpdatePacer, update_budget
from edgespec.tui.prompt import PromptBox
from edgespec.tui.read_while_typing import ReadAhead
from edgespec.tui.stats import ReplyFigures, StatsBar, context_gauge
from edgespec.tui.transcript import (
    Notice,
    ReplyView,
    SystemMessage,
    Transcript,
    UserMessage,
    legend,
)
from edgespec.util import unsaved
from edgespec.util.errors import EdgespecError
from edgespec.util.hardware import physical_cores

SWITCH_INTERVAL_S = 0.0005


class ChatApp(ChatActions, App):
    CSS_PATH = "chat.tcss"
    TITLE = "edgespec"
    BINDINGS = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+r", "regenerate", "Regenerate"),
        Binding("f2", "details", "Details"),
        Binding("f3", "toggle_markdown", "Markdown"),
        Binding("f4", "toggle_rejected", "Rejected"),
        Binding("ctrl+o", "open_chat", "Chats"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    markdown = var(False)
    show_rejected = var(False)

    def __init__(
        self,
        engine: Engine,
        settings: GenerateSettings,
        *,
        system: str | None = None,
        conversation: Conversation | None = None,
        first_message: str | None = None,
        store: ChatStore | None = None,
        clock: Callable[[], float] = time.perf_counter,
        engine_thread: EngineThread | None = None,
        read_ahead: bool = True,
    ):
        super().__init__()
        self.engine = engine
        # every generation runs on the thread that loaded the engine (see EngineThread)
        self.engine_thread = engine_thread or EngineThread()
        self.settings = settings  # each reply's, as the chat command's flags made them
        self.system = system
        self.store = store or ChatStore()
        self.clock = clock
        if conversation is not None and system is not None:
            conversation.system = system
        self.conversation = conversation or Conversation(pair=engine.pair.name, system=system)
        self._first_message = first_message
        self._gen: Generation | None = None
        self._last_figures: ReplyFigures | None = None
        self._context_used: int | None = None
        self._unsaved: dict[str, str] = {}  # chat id -> where it went instead of the chats folder, for the quit
        self._say_before = unsaved.say
        # how often the reply is updated while it streams: more often when decoding leaves a core free
        self.pacer = UpdatePacer(update_budget(engine.decoding_threads(), physical_cores()))
        self._drain_timer: Timer | None = None
        say = partial(self.notify, title="Read ahead", severity="warning")  # a read that failed
        self.read_ahead = ReadAhead(
            engine, self.engine_thread, self.settings.max_tokens, self._next_prompt, self.set_timer, say, read_ahead
        )

    # Layout

    def compose(self) -> ComposeResult:
        yield Header(icon="◆")
        yield Static(legend(), id="legend")
        yield Transcript(id="transcript")
        yield StatsBar(id="stats")
        yield PromptBox(id="prompt")
        yield Footer()

    async def on_mount(self) -> None:
        # The engine's worker thread needs the GIL for a moment between target passes; by default
        # it may wait up to 5 ms for the UI thread to yield it, several times a token. A short
        # switch interval keeps the UI from slowing decoding.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        # notes from the engine thread, written on stderr, would tear the screen
        if (cache := getattr(self.engine, "cache", None)) is not None:  # a scripted engine may have none
            cache.warn = lambda message: self._engine_note(message, "Prompt cache")
        unsaved.say = lambda message: self._engine_note(message, "Not saved")
        self.engine.notice = lambda message: self._engine_note(message, "Speed", "information")
        self.sub_title = describe_pair(self.engine, self.settings.constraint)
        await self._show_conversation()
        self.query_one(PromptBox).focus()
        if self._first_message:
            self.send(self._first_message)

    def _engine_note(self, message: str, title: str, severity: SeverityLevel = "warning") -> None:
        """What the engine thread says once: a problem (a prompt cache entry, a file it cannot
        save), or what a reply waits for (measuring the machine's speed)."""
        self.call_from_thread(self.notify, message, title=title, severity=severity)

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    @property
    def generating(self) -> bool:
        return self._gen is not None

    async def _show_conversation(self) -> None:
        """Rebuild the transcript from `self.conversation` (start, resume, new chat, open chat)."""
        transcript = self.transcript
        await transcript.remove_children()
        widgets: list = []
        if self.conversation.system:
            widgets.append(SystemMessage(self.conversation.system))
        self._last_figures = None
        for m in self.conversation.messages:
            if m["role"] == "user":
                widgets.append(UserMessage(m["content"]))
            elif m["role"] == "assistant":
                widgets.append(ReplyView(m, show_rejected=self.show_rejected))
                if m.get("stats"):
                    self._last_figures = ReplyFigures.from_saved(m["stats"])
        await transcript.mount_all(widgets)
        if self.markdown:
            for view in transcript.replies():
                view.set_markdown(True)
        transcript.anchor()
        self._update_context()
        self._show_stats()
        self.read_ahead.restart()  # the message in the box now follows this chat

    def _update_context(self) -> None:
        if self._gen is not None:
            self._context_used = None  # a worker still holds the engine (a detached reply winding down)
            return  # _finish counts again
        messages = self.conversation.chat_messages()
        try:
            self._context_used = self.engine.count_tokens(messages) if messages else 0
        except EdgespecError:
            self._context_used = None

    def _show_stats(self) -> None:
        gen = self._gen
        bar = self.query_one(StatsBar)
        used = self._context_used
        if gen is not None and not gen.detached:
            bar.show(gen.stats.figures(), True)
            used = gen.prompt_tokens + gen.stats.tokens
        else:
            bar.show(self._last_figures, False)
        self.query_one(PromptBox).border_subtitle = context_gauge(used, self.engine.n_ctx)

    # Sending and generating

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        self.read_ahead.changed(event.text_area.text)

    def _next_prompt(self) -> tuple[list[dict], str] | None:
        """What enter would send now: the chat so far and the message; None while a reply runs."""
        boxes = list(self.screen_stack[0].query(PromptBox)) if self.screen_stack else []  # F2 may be over it
        text = boxes[0].text if boxes else ""
        return None if self._gen is not None or not text.strip() else (self.conversation.chat_messages(), text)

    def on_prompt_box_submitted(self, event: PromptBox.Submitted) -> None:
        if self.send(event.text):
            self.query_one(PromptBox).clear()

    def send(self, text: str) -> bool:
        """Add a user message and start the reply; False (and a notification) when busy."""
        if self._refuse_if_busy():
            return False
        self.conversation.add_user(text)
        self.transcript.mount(UserMessage(text))
        self.transcript.anchor()
        self._save(self.conversation)
        self._start_reply()
        return True

    def _save(self, conversation: Conversation) -> None:
        """Save; a chat the chats folder cannot take (disk full, no permission, a file in its place)
        is saved in a rescue folder instead (`ChatStore.rescue`) and the app says where: at once,
        once per chat and place rather than on every flush, and again on quit (`unsaved_lines`)."""
        try:
            self.store.save(conversation)
        except OSError as e:
            why = f"{e.strerror or e}"
        else:
            self._unsaved.pop(conversation.id, None)
            return
        severity: SeverityLevel
        try:
            line = (
                f"chat {conversation.id} could not be saved in {self.store.root} ({why}); "
                f"it was saved to {self.store.rescue(conversation)}"
            )
            title, severity = "Saved elsewhere", "warning"
        except OSError as e:
            line = (
                f"chat {conversation.id} could not be saved in {self.store.root} ({why}), "
                f"nor in {self.store.rescue_root} or a temporary folder ({e.strerror or e})"
            )
            title, severity = "Not saved", "error"
        if self._unsaved.get(conversation.id) != line:
            self._unsaved[conversation.id] = line
            self.notify(line, title=title, severity=severity, timeout=10)

    @property
    def unsaved_lines(self) -> list[str]:
        """What the chats folder could not take and where it went, one line per chat (the command
        prints them on stderr after the app has left the screen)."""
        return list(self._unsaved.values())

    def _refuse_if_busy(self) -> bool:
        if self._gen is None:
            return False
        if self._gen.detached:
            self.notify("Still stopping the previous reply; try again in a moment.", severity="warning")
        else:
            self.notify("A reply is being generated: esc stops it.", severity="warning")
        return True

    def _start_reply(self, earlier_reply: str | None = None) -> None:
        """Send the chat as it is; `earlier_reply`: the reply a regenerate replaces, drafted from."""
        self.read_ahead.stop()  # it stops within a chunk; the reply queues behind it on the engine thread
        try:
            messages, dropped, used = fit_context(
                self.engine, self.conversation.chat_messages(), self.settings.max_tokens
            )
        except EdgespecError as e:
            self.notify(str(e), title="Context full", severity="error", timeout=8)
            return
        if dropped:
            note = (
                f"✂ {dropped} oldest turn{'s' if dropped > 1 else ''} left out of the prompt to fit the "
                f"{self.engine.n_ctx}-token context window (still saved in this chat)"
            )
            self.transcript.mount(Notice(note))
            self.notify(note, severity="warning")
        message = self.conversation.add_assistant()
        view = ReplyView(message, show_rejected=self.show_rejected, generating=True)
        self.transcript.mount(view)
        self.transcript.anchor()
        gen = Generation(self.conversation, message, view, self.clock(), used, self.settings, earlier_reply)
        self._gen = gen
        self._show_stats()
        self.query_one(PromptBox).cursor_blink = False  # a blinking cursor repaints the screen twice a second
        self._drain_timer = self.set_timer(self.pacer.restart(), self._drain_events)
        self.run_worker(
            lambda: self.engine_thread.call(gen.run, self.engine, messages, self.clock),
            thread=True,
            group="generate",
            exit_on_error=False,
            description="engine.chat",
        )

    def _drain_events(self) -> None:
        """Timer: fold everything queued since the last tick into the reply, repaint once, save,
        and set the next tick."""
        gen = self._gen
        if gen is None or not self.is_running:
            return  # between replies, or shutting down (on_unmount saves the reply)
        changed, finished = self._fold_queued(gen)
        if finished:
            self._finish(gen)
            return
        if changed:
            if not gen.detached:
                gen.view.update_tokens()
                self._show_stats()
            self._save(gen.conversation)
        wait = self.pacer.next_interval() if changed else self.pacer.after_empty_poll(gen.stats.tokens)
        self._drain_timer = self.set_timer(wait, self._drain_events)

    def _fold_queued(self, gen: Generation) -> tuple[bool, bool]:
        """Move queued events into the reply; an engine failure is shown once. -> (anything new, worker done)."""

        def failed(message: str) -> None:
            if not gen.detached:
                self.notify(message, title="Engine error", severity="error", timeout=10)

        return gen.fold(failed)

    def _finish(self, gen: Generation) -> None:
        self._gen = None
        for box in self.query(PromptBox):  # none while the app is shutting down
            box.cursor_blink = True
        gen.spans.finish()
        stats = gen.stats
        conversation, message = gen.conversation, gen.message
        if stats.error and not message["content"]:
            # Nothing came out: drop the empty reply so that ctrl+r (or a new message) retries cleanly.
            conversation.messages.remove(message)
            if not gen.detached:
                gen.view.remove()
        else:
            figures = stats.figures()
            message["stats"] = figures.to_saved()
            message["complete"] = True
            if not gen.detached:
                gen.view.finish(figures)
                if self.markdown:
                    gen.view.set_markdown(True)
                self._last_figures = figures
        self._save(conversation)
        if not self.is_running:
            return
        if not gen.detached and stats.summary is not None and stats.summary.stop_reason == "context":
            self.notify(
                "The context window is full: the reply was cut. ctrl+n starts a new chat; "
                "otherwise the oldest turns are left out of the next prompt.",
                title="Context full",
                severity="warning",
                timeout=10,
            )
        self._update_context()  # now that the worker is done, the engine is free to count
        self._show_stats()
        self.read_ahead.resume()  # what was typed while the reply ran

    def _leave_generation(self) -> None:
        if self._gen is not None:
            self._gen.cancel.set()
            self._gen.detached = True

    # Reactive settings (their keys and commands are in ChatActions)

    def watch_markdown(self, on: bool) -> None:
        if self.screen_stack:  # a toggle set before the app runs has no transcript to change yet
            for view in self.transcript.replies():
                view.set_markdown(on)

    def watch_show_rejected(self, on: bool) -> None:
        if self.screen_stack:
            for view in self.transcript.replies():
                view.set_show_rejected(on)

    async def on_unmount(self) -> None:
        """Quitting mid-reply counts as esc: cancel, let the worker end (up to 2 s), save the reply."""
        unsaved.say = self._say_before  # the screen is going: stderr can be read again
        self.read_ahead.close()
        gen = self._gen
        if gen is None:
            return
        gen.cancel.set()
        gen.detached = True
        if self._drain_timer is not None:
            self._drain_timer.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2.0
        finished = False
        while not finished and loop.time() < deadline:
            _, finished = self._fold_queued(gen)
            if not finished:
                await asyncio.sleep(0.01)
        if finished:
            self._finish(gen)
        else:
            gen.spans.finish()
            self._save(gen.conversation)
