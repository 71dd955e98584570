"""What the chat's keys and command palette do (new chat, regenerate, stop, details, the toggles,
open a saved chat), as a mixin of `ChatApp`: the bindings themselves stay on the app, where Textual
reads them, and these methods work on its state (`_gen`, `conversation`, `store`, `transcript`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from textual.app import App, SystemCommand
from textual.screen import Screen

from edgespec.tui.chat_list import ChatListScreen
from edgespec.tui.chat_store import ChatStore, Conversation
from edgespec.tui.details import DetailsScreen
from edgespec.tui.prompt import PromptBox
from edgespec.util.errors import EdgespecError

if TYPE_CHECKING:
    from edgespec.engine.engine import Engine
    from edgespec.tui.generation import Generation
    from edgespec.tui.stats import ReplyFigures
    from edgespec.tui.transcript import Transcript

    _Host = App  # what the type checker reads these methods against: a Textual app
else:
    _Host = object  # at run time ChatApp brings App itself, after this mixin


class ChatActions(_Host):
    if TYPE_CHECKING:  # the state and helpers of ChatApp that these actions work on
        engine: Engine
        system: str | None
        store: ChatStore
        conversation: Conversation
        markdown: bool
        show_rejected: bool
        _gen: Generation | None
        _last_figures: ReplyFigures | None

        @property
        def transcript(self) -> Transcript: ...
        async def _show_conversation(self) -> None: ...
        def _refuse_if_busy(self) -> bool: ...
        def _start_reply(self, earlier_reply: str | None = None) -> None: ...
        def _leave_generation(self) -> None: ...

    def action_stop(self) -> None:
        if self._gen is not None and not self._gen.detached:
            self._gen.cancel.set()

    async def action_new_chat(self) -> None:
        self._leave_generation()
        self.conversation = Conversation(pair=self.engine.pair.name, system=self.system)
        await self._show_conversation()
        self.query_one(PromptBox).focus()

    async def action_regenerate(self) -> None:
        if self._refuse_if_busy():
            return
        messages = self.conversation.messages
        replaced = None  # what the new reply drafts from first, with the history off too
        if messages and messages[-1]["role"] == "assistant":
            last = messages.pop()
            replaced = last["content"]
            for view in self.transcript.replies():
                if view.message is last:
                    await view.remove()
        if not messages or messages[-1]["role"] != "user":
            self.notify("Nothing to regenerate yet.", severity="warning")
            return
        self._start_reply(replaced)

    def action_details(self) -> None:
        gen = self._gen
        figures = gen.stats.figures() if gen is not None and not gen.detached else self._last_figures
        self.push_screen(DetailsScreen(figures))

    def action_toggle_markdown(self) -> None:
        self.markdown = not self.markdown

    def action_toggle_rejected(self) -> None:
        self.show_rejected = not self.show_rejected

    def action_open_chat(self) -> None:
        if self._refuse_if_busy():
            return
        chats, unreadable = self.store.load_all()
        if unreadable:
            # listed by name so that a damaged chat is not mistaken for a lost one
            lines = [str(e) for e in unreadable[:3]]
            if len(unreadable) > 3:
                lines.append(f"… and {len(unreadable) - 3} more")
            self.notify("\n".join(lines), title="Saved chats left out of the list", severity="warning", timeout=10)
        self.push_screen(ChatListScreen(chats), self._open_chat)

    async def _open_chat(self, chat_id: str | None) -> None:
        if not chat_id:
            return
        try:
            self.conversation = self.store.load(chat_id)
        except EdgespecError as e:
            self.notify(str(e), severity="error")
            return
        await self._show_conversation()
        self.query_one(PromptBox).focus()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("New chat", "Start an empty conversation (ctrl+n)", self.action_new_chat)
        yield SystemCommand("Regenerate", "Generate the last reply again (ctrl+r)", self.action_regenerate)
        yield SystemCommand("Stop", "Stop generating; the partial reply stays (esc)", self.action_stop)
        yield SystemCommand(
            "Details", "K histogram, time split and speedup of the last reply (F2)", self.action_details
        )
        yield SystemCommand(
            "Markdown", "Toggle Markdown rendering of finished replies (F3)", self.action_toggle_markdown
        )
        yield SystemCommand(
            "Rejected drafts", "Toggle showing rejected draft tokens struck through (F4)", self.action_toggle_rejected
        )
        yield SystemCommand("Open chat", "Reopen a saved conversation (ctrl+o)", self.action_open_chat)
