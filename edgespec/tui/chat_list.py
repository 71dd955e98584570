"""ctrl+o: the saved chats, most recent first; enter reopens one, esc closes the list."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from edgespec.tui.chat_store import Conversation


def _label(c: Conversation) -> Text:
    t = Text(c.title or "(untitled)", style="bold")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated))
    turns = sum(1 for m in c.messages if m.get("role") == "user")
    t.append(f"\n{when} · {turns} message{'s' if turns != 1 else ''} · {c.pair} · {c.id}", style="dim")
    return t


class ChatListScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "dismiss(None)", "Close")]

    def __init__(self, chats: list[Conversation]):
        super().__init__()
        self.chats = chats

    def compose(self) -> ComposeResult:
        with Vertical(id="chat-list"):
            if self.chats:
                yield OptionList(*(Option(_label(c), id=c.id) for c in self.chats))
            else:
                yield Static("No saved chats yet.", classes="empty")

    def on_mount(self) -> None:
        box = self.query_one("#chat-list")
        box.border_title = "saved chats"
        box.border_subtitle = "enter open · esc close"

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
