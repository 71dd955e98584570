"""Saved conversations: one JSON file per chat, rewritten atomically as the reply streams in.

Where: `EDGESPEC_HOME/chats/` when EDGESPEC_HOME is set, else `platformdirs.user_data_dir("edgespec")
/chats/`. A chat that cannot be saved there (the folder is a file, the disk is read-only) is saved
in `rescued/` beside it, else in a private temporary folder (`ChatStore.rescue`), in the same
format: moved back into chats/, it resumes.

Each save writes a temporary file in the same folder and `os.replace`s it over the old one,
so a reader (or a resumed app after a crash or a kill) sees either the previous or the new version,
never half a file. The app saves on every batched UI flush, so a kill loses at most the tokens since
the last one (the flushes come 2 to 30 times a second, see pacing.py). No fsync: a process kill
is covered, a power cut may lose the last writes.

File format (version 1):

    {"version": 1, "id": "...", "title": "...", "pair": "...", "system": "..." | null,
     "created": 1732896000.0, "updated": ...,
     "messages": [{"role": "user", "content": "..."},
                  {"role": "assistant", "content": "...", "spans": [["draft", "text"], ...],
                   "stats": {...}, "complete": true}]}

`spans` are runs of consecutive tokens with one source (draft / correction / bonus / target, and
"rejected" for thrown-away draft text, which is not part of `content`); they let a resumed chat show
its colours again. `stats` is the frozen per-reply figures (`stats.ReplyFigures.to_saved`: the
decoder's Summary and the error, if any; files of the first layout are still read).

A file is checked whole when it is read (`Conversation.from_dict`): every field the app reads must
have the type the app needs (its text valid Unicode), so a hand-edited or damaged file is refused in
one line naming the file and the field, before `edgespec chat --resume` loads a model, rather than
crashing the app later.
Keys the app does without may be missing (`version`, `title`, `system`, `created`, `updated`;
a reply's `spans`, `stats`, `complete`, and any figure inside `stats`); unknown keys are ignored.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from edgespec.decoding.events import Source
from edgespec.tui.stats import ReplyFigures
from edgespec.util.atomic_file import write_text_atomic
from edgespec.util.errors import EdgespecError
from edgespec.util.home_files import Untrusted, read_home_file
from edgespec.util.paths import home, private_folder
from edgespec.util.text_check import text_problem

FORMAT_VERSION = 1
REJECTED = "rejected"  # a span kind that is not a Source: drafted text the target threw away
# a span kind that is not a Source: accepted drafts copied from earlier calls or the repository
COPIED = "copied"
SPAN_KINDS = (*(s.value for s in Source), COPIED, REJECTED)
ROLES = ("user", "assistant")
# The most bytes of a saved chat read back: thousands of long replies with their figures fit; a
# file past it is something else and is reported, never read into memory whole.
CHAT_BYTES = 64 << 20


class HistoryError(EdgespecError):
    """A saved chat that cannot be found or read."""


def chats_dir() -> Path:
    """The folder holding saved chats (not created here); an EDGESPEC_HOME that is a file is refused (`home`)."""
    base = home() if os.environ.get("EDGESPEC_HOME") else Path(platformdirs.user_data_dir("edgespec"))
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
        message: dict = {"role": "assistant", "content": "", "spans": [], "stats": None, "complete": False}
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
    def from_dict(cls, d: object) -> Conversation:
        """The conversation in a saved file's JSON; ValueError naming the first field the app could not use."""
        _check_chat(d, "")
        assert isinstance(d, dict)  # _check_chat raised ValueError for anything else
        return cls(
            id=d["id"],
            pair=d.get("pair", ""),
            system=d.get("system"),
            messages=list(d.get("messages", [])),
            title=d.get("title", ""),
            created=float(d.get("created", 0.0)),
            updated=float(d.get("updated", 0.0)),
        )


# -- what a saved chat must look like ----------------------------------------------------------------
# A rule checks one value and raises ValueError("<where> is not <what>"). The types are those the
# app's readers need: transcript.py (content, spans, complete), stats.py and details.py (stats),
# chat_list.py (title, pair, updated) and the engine (role, content, system).

Rule = Callable[[object, str], None]


def _is_number(v: object) -> bool:
    # Not a bool (a hand-edit), and finite and sane: the renderers format it and do sums with it,
    # and NaN or 1e999 (which json reads as inf) would raise there. abs(NaN) < x is False.
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e15


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**15


def _is(test: Callable[[object], bool], what: str) -> Rule:
    def check(value: object, where: str) -> None:
        if not test(value):
            raise ValueError(f"{where} is not {what}")

    return check


def _or_null(rule: Rule) -> Rule:
    def check(value: object, where: str) -> None:
        if value is not None:
            rule(value, where)

    return check


def _object(fields: dict[str, Rule], required: tuple[str, ...] = ()) -> Rule:
    def check(value: object, where: str) -> None:
        if not isinstance(value, dict):
            raise ValueError(f"{where or 'the file'} is not a JSON object")
        for key in required:
            if key not in value:
                raise ValueError(f'{where or "the file"} has no "{key}"')
        for key, rule in fields.items():
            if key in value:
                rule(value[key], f"{where}.{key}" if where else key)

    return check


def _list_of(rule: Rule) -> Rule:
    def check(value: object, where: str) -> None:
        if not isinstance(value, list):
            raise ValueError(f"{where} is not a list")
        for i, item in enumerate(value):
            rule(item, f"{where}[{i}]")

    return check


def _text(value: object, where: str) -> None:
    # Text the engine tokenizes or the app draws: a lone surrogate (json reads "\ud800" as one)
    # would fail there, after a model loaded, instead of here.
    if not isinstance(value, str):
        raise ValueError(f"{where} is not a string")
    problem = text_problem(value)
    if problem:
        raise ValueError(f"{where} {problem}")


def _span(value: object, where: str) -> None:
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str)):
        raise ValueError(f"{where} is not a [source, text] pair")
    _text(value[1], f"{where}[1]")
    if value[0] not in SPAN_KINDS:  # a tuple: an unhashable value is compared, not hashed
        raise ValueError(f"{where} has the source {json.dumps(value[0])}, not one of {', '.join(SPAN_KINDS)}")


_NUMBER = _is(_is_number, "a number")
_COUNTS = _is(lambda v: isinstance(v, dict) and all(_is_count(n) for n in v.values()), "an object of counts")
# details.py turns the keys into ints and divides by the largest count
_K_HISTOGRAM = _is(
    lambda v: isinstance(v, dict) and all(k.isascii() and k.isdigit() and _is_count(n) and n > 0 for k, n in v.items()),
    'an object of "K": passes (> 0)',
)


def _reply_figures(value: object, where: str) -> None:
    try:
        ReplyFigures.from_saved(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None


_MESSAGE = _object(
    {
        "role": _is(lambda v: v in ROLES, " or ".join(f'"{r}"' for r in ROLES)),
        "content": _text,
        "spans": _list_of(_span),
        "stats": _or_null(_reply_figures),
        "complete": _is(lambda v: isinstance(v, bool), "true or false"),
    },
    required=("role", "content"),
)

_check_chat = _object(
    {
        "version": _is(
            lambda v: v == FORMAT_VERSION,
            f"{FORMAT_VERSION} (the only format this edgespec reads; a newer edgespec wrote it?)",
        ),
        "id": _text,
        "title": _text,
        "pair": _text,
        "system": _or_null(_text),
        "created": _NUMBER,
        "updated": _NUMBER,
        "messages": _list_of(_MESSAGE),
    },
    required=("id",),
)


def _title_from(text: str, width: int = 60) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


class ChatStore:
    """Reads and writes conversations in one folder."""

    def __init__(self, root: Path | None = None):
        self.root = root if root is not None else chats_dir()
        self.rescue_root = self.root.parent / "rescued"
        self._spare: Path | None = None  # the temporary folder of the last resort, made once

    def path(self, chat_id: str) -> Path:
        return self.root / f"{chat_id}.json"

    def save(self, conversation: Conversation) -> None:
        """Atomic (see atomic_file): a reader sees the previous save or this one. OSError when the
        chats folder cannot take it (then `rescue`)."""
        if not conversation.messages:
            return  # an empty chat is not worth a file
        conversation.updated = time.time()
        _write(self.root, conversation)

    def rescue(self, conversation: Conversation) -> Path:
        """Save a chat that `save` could not: in `rescued/` beside the chats folder, else in a
        private temporary folder. Returns the file; OSError only when neither takes it."""
        try:
            return _write(self.rescue_root, conversation)
        except OSError:
            if self._spare is None:
                self._spare = Path(tempfile.mkdtemp(prefix="edgespec-rescued-"))
            return _write(self._spare, conversation)

    def load(self, chat_id: str) -> Conversation:
        path = self.path(chat_id)
        if not path.exists():
            raise HistoryError(f"no saved chat {chat_id!r} in {self.root}")
        return _read(path)

    def latest(self) -> Conversation:
        """The chat whose file was written last; HistoryError naming that file if it cannot be read.

        An unreadable newest file is reported rather than skipped: opening an older chat instead
        would look like the last one was lost.
        """
        paths = self._paths()
        if not paths:
            raise HistoryError(f"no saved chats in {self.root}")
        return _read(paths[0])

    def load_all(self) -> tuple[list[Conversation], list[HistoryError]]:
        """All chats, the file written last first, as (readable chats, one error per unreadable file)."""
        chats, unreadable = [], []
        for path in self._paths():
            try:
                chats.append(_read(path))
            except HistoryError as e:
                unreadable.append(e)
        return chats, unreadable

    def _paths(self) -> list[Path]:
        """Chat files, newest first by modification time: each save rewrites the file, so that is the last save."""
        if not self.root.is_dir():
            return []
        stamped = []
        for path in self.root.glob("*.json"):
            try:
                stamped.append((os.lstat(path).st_mtime_ns, path.name, path))
            except OSError:
                continue  # deleted since the folder was listed
        return [path for *_, path in sorted(stamped, reverse=True)]


def _write(folder: Path, conversation: Conversation) -> Path:
    private_folder(folder)
    path = folder / f"{conversation.id}.json"
    write_text_atomic(path, json.dumps(conversation.to_dict(), ensure_ascii=False, separators=(",", ":")))
    return path


def _read(path: Path) -> Conversation:
    """The checked conversation in `path`, or one HistoryError line naming the file and what is wrong."""
    try:  # a chat is the user's: what is wrong is said, and the file left as it is
        data = read_home_file(path, CHAT_BYTES)
    except Untrusted as e:
        raise HistoryError(f"saved chat {path} is {e}") from None
    except OSError as e:
        why = "it does not exist" if isinstance(e, FileNotFoundError) else e.strerror or str(e)
        raise HistoryError(f"saved chat {path}: cannot read: {why}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HistoryError(f"saved chat {path} is not UTF-8 text (at byte {e.start})") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise HistoryError(f"saved chat {path} is not valid JSON: {e}") from None
    except RecursionError:
        raise HistoryError(f"saved chat {path} is nested too deeply to be a chat") from None
    try:
        conversation = Conversation.from_dict(data)
    except ValueError as e:
        raise HistoryError(f"saved chat {path} is unreadable: {e}") from None
    if conversation.id != path.stem:
        # saves go to <id>.json: another id would write elsewhere (or, with "../", outside this folder)
        raise HistoryError(f'saved chat {path} is unreadable: its id "{conversation.id}" is not its file name')
    return conversation
