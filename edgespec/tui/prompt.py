"""The prompt box: enter sends, shift+enter or ctrl+j inserts a newline, and it grows with the text.

Most terminals send the same byte for enter and shift+enter; ctrl+j (a bare line feed) always gets
through, so both are bound to newline.
"""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import TextArea


class PromptBox(TextArea):
    class Submitted(Message):
        def __init__(self, text: str):
            super().__init__()
            self.text = text

    def __init__(self, **kwargs):
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)
        self.border_title = "message · enter send · shift+enter/ctrl+j newline"

    async def _on_key(self, event: events.Key) -> None:
        # Runs before TextArea's own handler; preventing the default stops that one.
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            if self.text.strip():
                self.post_message(self.Submitted(self.text))
        elif event.key in ("shift+enter", "ctrl+j", "newline"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
