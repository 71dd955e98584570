"""Saved conversations: one JSON file per chat, rewritten atomically as the reply streams in.

Where: `EDGESPEC_HOME/chats/` when EDGESPEC_HOME is set, else `platformdirs.user_data_dir("edgespec")
/chats/`. Each save writes a temporary file in the same folder and `os.replace`s it over the old one,
so a reader (or a resumed app after a crash or a kill) sees either the previous or the new version,
never half a file. The app saves on every batched UI flush, so a kill loses at most the tokens of
the last ~1/30 s. No fsync: a process kill is covered, a power cut may lose the last writes.

File format (version 1):

    {"version": 1, "id": "...", "title": "...", "pair": "...", "system": "..." | null,
     "created": 1732896000.0, "updated": ...,
     "messages": [{"role": "user", "content": "..."},
                  {"role": "assistant", "content": "...", "spans": [["draft", "text"], ...],
                   "stats": {...}, "complete": true}]}

`spans` are runs of consecutive tokens with one source (draft / correction / bonus / target, and
"rejected" for thrown-away draft text, which is not part of `content`); they let a resumed chat show
its colours again. `stats` is the frozen per-reply figures (see `stats.ReplyStats.to_dict`).
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from edgespec.errors import EdgespecError

FORMAT_VERSION = 1


class HistoryError(EdgespecError):
    """A saved chat that cannot be found or read."""


def chats_dir() -> Path:
    """The folder holding saved chats (not created here)."""
    home = os.environ.get("EDGESPEC_HOME")
    base = Path(home) if home else Path(platformdirs.user_data_dir("edgespec"))
    return base / "chats"


def new_id() -> str:
    """Sortable by creation time, unique enough for one user: 20251129-163701-3f2a."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


@dataclass
class Conversation:
    id: str = field(default_factory=new_id)
    pair: str = ""
    system: str | None = None
    messages: list[dict] = field(default_factory=list)
    title: str = ""
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    def chat_messages(self) -> list[dict]:
        """What the engine gets: system first, then role/content pairs (no UI fields)."""
        out = [{"role": "system", "content": self.system}] if self.system else []
        out += [{"role": m["role"], "content": m["content"]} for m in self.messages]
        return out

    def add_user(self, content: str) -> dict:
        message = {"role": "user", "content": content}
        self.messages.append(message)
        if not self.title:
            self.title = _title_from(content)
        return message

    def add_assistant(self) -> dict:
        message = {"role": "assistant", "content": "", "spans": [], "stats": None, "complete": False}
        self.messages.append(message)
        return message

    def to_dict(self) -> dict:
        return {
            "version": FORMAT_VERSION,
            "id": self.id,
            "title": self.title,
            "pair": self.pair,
            "system": self.system,
            "created": self.created,
            "updated": self.updated,
            "messages": self.messages,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Conversation:
        return cls(
            id=d["id"],
            pair=d.get("pair", ""),
            system=d.get("system"),
            messages=list(d.get("messages", [])),
            title=d.get("title", ""),
            created=float(d.get("created", 0.0)),
            updated=float(d.get("updated", 0.0)),
        )


def _title_from(text: str, width: int = 60) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


class ChatStore:
    """Reads and writes conversations in one folder."""

    def __init__(self, root: Path | None = None):
        self.root = root if root is not None else chats_dir()

    def path(self, chat_id: str) -> Path:
        return self.root / f"{chat_id}.json"

    def save(self, conversation: Conversation) -> None:
        """Atomic: temp file in the same folder, then os.replace over the old file."""
        if not conversation.messages:
            return  # an empty chat is not worth a file
        conversation.updated = time.time()
        self.root.mkdir(parents=True, exist_ok=True)
        data = json.dumps(conversation.to_dict(), ensure_ascii=False, separators=(",", ":"))
        fd, tmp = tempfile.mkstemp(prefix=f".{conversation.id}.", suffix=".partial", dir=self.root)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(data)
            os.replace(tmp, self.path(conversation.id))
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def load(self, chat_id: str) -> Conversation:
        path = self.path(chat_id)
        try:
            return Conversation.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise HistoryError(f"no saved chat {chat_id!r} in {self.root}") from None
        except (ValueError, KeyError, TypeError) as e:
            raise HistoryError(f"saved chat {path} is unreadable: {e}") from None

    def latest(self) -> Conversation:
        chats = self.list()
        if not chats:
            raise HistoryError(f"no saved chats in {self.root}")
        return self.load(chats[0].id)

    def list(self) -> list[Conversation]:
        """All readable chats, most recently updated first (unreadable files are skipped)."""
        out = []
        if not self.root.is_dir():
            return out
        for path in self.root.glob("*.json"):
            try:
                out.append(Conversation.from_dict(json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        out.sort(key=lambda c: c.updated, reverse=True)
        return out
