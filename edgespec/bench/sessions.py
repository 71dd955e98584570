"""The session suite: sequences of related calls a coding user makes (follow-up edits of one file,
one edit of several files, a regenerated reply, an agent's retry, a tool-call loop, a chat that
quotes earlier code), each timed as a whole, to measure drafting from the earlier calls.

A line of the JSONL file is one sequence:

    {"id": "dev/retry-settings", "part": "dev", "kind": "retry", "calls": [CALL, ...]}
    CALL = {"messages": [MESSAGE, ...], "max_tokens": N}
    MESSAGE = {"role": "system" | "user" | "assistant", "content": TEXT | [PART, ...]}
    PART = TEXT | {"reply_of": i}

`{"reply_of": i}` stands for the reply to call i of the same sequence, an earlier one, known only
when the sequence runs (`Session.messages`). The file is read and checked whole, every line before
any model loads, as `suites.load_suite` reads a suite.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, model_validator

from edgespec.bench import suites
from edgespec.bench.jsonl import first_problem, json_objects
from edgespec.bench.suites import Prompt, Text
from edgespec.util.errors import UsageError

SESSION_SUITE = Path(str(files("edgespec") / "data" / "session_suite.jsonl"))  # shipped with edgespec

PartName = Literal["dev", "heldout"]  # heldout judges what was tuned on dev
Kind = Literal["followup", "same-edit", "regenerate", "retry", "tool-loop", "chat-quote"]
PARTS: tuple[str, ...] = get_args(PartName)
KINDS: tuple[str, ...] = get_args(Kind)
MAX_TOKENS = 4096  # the most one call may ask for


@dataclass(frozen=True)
class ReplyOf:
    """The text of the reply to call `call` (an earlier call of the same session)."""

    call: int


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: tuple[str | ReplyOf, ...]  # joined, with each ReplyOf replaced by its reply


@dataclass(frozen=True)
class Call:
    messages: tuple[Message, ...]
    max_tokens: int


@dataclass(frozen=True)
class Session:
    id: str
    part: str  # one of PARTS
    kind: str  # one of KINDS
    calls: tuple[Call, ...]

    def messages(self, call: int, replies: Sequence[str]) -> list[dict[str, str]]:
        """Call `call`'s messages in OpenAI's shape, each `reply_of` replaced by its text:
        `replies[i]` is the reply to call i. ValueError if a reply it quotes is not in `replies`."""
        out = []
        for message in self.calls[call].messages:
            texts = []
            for part in message.content:
                if isinstance(part, str):
                    texts.append(part)
                elif part.call < len(replies):
                    texts.append(replies[part.call])
                else:
                    raise ValueError(
                        f"{self.id}: call {call} quotes the reply to call {part.call}, but only "
                        f"{len(replies)} replies are given"
                    )
            out.append({"role": message.role, "content": "".join(texts)})
        return out

    def max_tokens(self, call: int) -> int:
        return self.calls[call].max_tokens


# -- the file's lines, as written -------------------------------------------------------------


class ReplyOfLine(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    reply_of: int = Field(ge=0)


def _part_tag(value: object) -> str | None:
    return "text part" if isinstance(value, str) else "reply part" if isinstance(value, dict) else None


def _content_tag(value: object) -> str | None:
    return "text content" if isinstance(value, str) else "part list" if isinstance(value, list) else None


def _not_blank_parts(parts: list[str | ReplyOfLine]) -> list[str | ReplyOfLine]:
    """Parts of only whitespace give the model nothing to answer, as a blank text content does."""
    if all(isinstance(p, str) for p in parts) and not "".join(p for p in parts if isinstance(p, str)).strip():
        raise ValueError("is empty or only whitespace")
    return parts


# The tags of the unions below: pydantic names them in an error's location, which first_problem drops.
_TAGS = ("text part", "reply part", "text content", "part list")
PartLine = Annotated[
    Annotated[Text, Tag("text part")] | Annotated[ReplyOfLine, Tag("reply part")],
    Discriminator(_part_tag, custom_error_type="part", custom_error_message='is neither text nor {"reply_of": i}'),
]
Content = Annotated[
    Annotated[Prompt, Tag("text content")]
    | Annotated[list[PartLine], Field(min_length=1), AfterValidator(_not_blank_parts), Tag("part list")],
    Discriminator(_content_tag, custom_error_type="content", custom_error_message="is neither text nor a list"),
]


class MessageLine(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: Content


class CallLine(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    messages: Annotated[list[MessageLine], Field(min_length=1)]
    max_tokens: int = Field(ge=1, le=MAX_TOKENS)


class SessionLine(BaseModel):
    """One line of the file as written: unknown keys are refused, and a number is not text (strict)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    id: Prompt
    part: PartName
    kind: Kind
    calls: Annotated[list[CallLine], Field(min_length=1)]

    @model_validator(mode="after")
    def _quotes_only_earlier_calls(self) -> SessionLine:
        for i, call in enumerate(self.calls):
            for j, message in enumerate(call.messages):
                parts = message.content if isinstance(message.content, list) else []
                for k, part in enumerate(parts):
                    if isinstance(part, ReplyOfLine) and part.reply_of >= i:
                        raise ValueError(
                            f"calls[{i}].messages[{j}].content[{k}].reply_of: {part.reply_of} is not an "
                            f"earlier call (this is call {i})"
                        )
        return self


def _session(line: SessionLine) -> Session:
    def message(m: MessageLine) -> Message:
        parts = [m.content] if isinstance(m.content, str) else m.content
        return Message(m.role, tuple(p if isinstance(p, str) else ReplyOf(p.reply_of) for p in parts))

    calls = tuple(Call(tuple(message(m) for m in c.messages), c.max_tokens) for c in line.calls)
    return Session(line.id, line.part, line.kind, calls)


def load_sessions(path: Path, parts: Collection[str] | None = None) -> list[Session]:
    """Read and check a session suite, every line before any model loads (a bad line is a one-line
    error naming the file, the line and the field), and keep the sessions of `parts` (all if None)."""
    if parts is not None and (unknown := sorted(set(parts) - set(PARTS))):
        raise UsageError(f"no part named {', '.join(unknown)} in a session suite (parts: {', '.join(PARTS)})")
    sessions: list[Session] = []
    lines: dict[str, int] = {}  # id -> the line that has it
    for n, fields in json_objects(path, suites.SUITE_BYTES, "session suite"):
        try:
            session = _session(SessionLine.model_validate(fields))
        except ValidationError as e:
            raise UsageError(f"{path}:{n}: {first_problem(e, _TAGS)}") from None
        if session.id in lines:
            raise UsageError(f"{path}:{n}: id: {session.id!r} is already the id of line {lines[session.id]}")
        lines[session.id] = n
        sessions.append(session)
    if not sessions:
        raise UsageError(f"session suite {path} has no sessions")
    return [s for s in sessions if parts is None or s.part in parts]
