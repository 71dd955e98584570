"""Tool calls read out of a reply's text as it streams, in the pair's tool-call format.

The model writes a call in its format's markup (Hermes: `<tool_call>\\n{"name": "get_weather",
"arguments": {"city": "Paris"}}\\n</tool_call>`); the client must see OpenAI's shapes instead:
content deltas for the text around calls, and for each call a first delta naming it (index, id,
type, name, arguments "") followed by deltas carrying pieces of its arguments. The markup never
reaches the client as content. As the stop-string cut does (edgespec.server.stop_strings), text
that may be the start of the markup is held back until the next text shows whether it is, and so
is whitespace before it (a call's own layout), so a reply that calls at once sends no content.

A call is taken as one once its head is read, `{"name": NAME, "arguments":` with NAME one of the
request's tools; its arguments then stream as they come, up to the `}` and the closing tag that
end the markup. Markup whose head is not that (prose after the tag, a name not offered) is a
malformed call: its text goes to the client as content, as it was written, because an agent can
show or retry a reply it can read, and a call edgespec made up from a guess could act wrongly
(what follows such a tag is read again as text, calls included). A head in another order
(`{"arguments": ..., "name": ...}`) is read once the whole call is there. Under `tool_choice`
"auto" the arguments follow the model alone, as OpenAI's non-strict calls do; "required" and a
named tool constrain decoding (edgespec.constraints.tool_calls), so the calls they produce always
parse and validate.

Under "auto" a call may also come as plain JSON without the markup, in a fenced block or as the
whole reply (edgespec.server.json_calls says which and why); such a block is held until it closes,
and its calls' arguments come in one delta.

Without `parallel_tool_calls` the reply holds at most one call: what follows the first is dropped.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field

from edgespec.constraints.tool_calls import ToolFormat
from edgespec.server.json_calls import FENCE, Openings, call_of, fence_close, json_calls, json_value
from edgespec.server.schemas import ChatMessage, Delta, FinishReason, FunctionDelta, ToolCallDelta
from edgespec.server.tool_schemas import CalledFunction, ToolCall
from edgespec.util import json_depth

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]*)"\s*,\s*"arguments"\s*:\s*(?=\S)')


@dataclass
class _Call:
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of `text` that is the beginning of `marker` (not all of it)."""
    return next((k for k in range(min(len(marker) - 1, len(text)), 0, -1) if text.endswith(marker[:k])), 0)


class ToolCallParser:
    """Feed it the reply's text as it comes (`feed`), then `end`; each returns the deltas to send.
    `message` and `finish_reason` give the whole reply's view of the same reading. `names` are
    the tools a call in the markup may name, `plain` those a call in plain JSON may."""

    def __init__(self, fmt: ToolFormat, names: Collection[str], parallel: bool, plain: Collection[str] = ()):
        self._fmt, self._names, self._parallel = fmt, frozenset(names), parallel
        self._plain, self._openings = frozenset(plain), Openings(sorted(plain))
        self._held = ""  # text read but not yet classified
        self._gap = ""  # whitespace dropped before the markup, given back if the markup is no call
        # "text", "head" (after the opening tag), "arguments", "fenced" / "bare" (a call in plain
        # JSON, held whole), "done"
        self._state = "text"
        self._line_start = True  # the held text starts a line
        self._body_from = self._scan = 0  # in a fenced block: where its JSON starts, where to look for its end
        self.content: list[str] = []
        self.calls: list[_Call] = []

    def feed(self, text: str) -> list[Delta]:
        self._held += text
        out: list[Delta] = []
        while self._step(out, final=False):
            pass
        return _merged(out)

    def end(self) -> list[Delta]:
        """The reply is over: release or settle what is held."""
        out: list[Delta] = []
        while self._step(out, final=True):
            pass
        if self._state == "arguments":
            self._arguments(out, self._last_arguments(self._held))
        elif self._state == "text":  # whitespace after the last call is the markup's layout
            self._content(out, self._held.rstrip() if self.calls else self._held)
        self._held, self._state = "", "done"
        return _merged(out)

    def message(self) -> ChatMessage:
        text = "".join(self.content)
        calls = [
            ToolCall(id=c.id, function=CalledFunction(name=c.name, arguments="".join(c.arguments))) for c in self.calls
        ]
        return ChatMessage(content=text if text or not calls else None, tool_calls=calls or None)

    def finish_reason(self, reason: FinishReason) -> FinishReason:
        """ "tool_calls" for a reply that ended with calls made; a cut reply stays "length"."""
        return "tool_calls" if self.calls and reason == "stop" else reason

    # -- reading -------------------------------------------------------------------------------

    def _step(self, out: list[Delta], final: bool) -> bool:
        """Read as far as the held text allows; True when the state changed (read on)."""
        if self._state == "done":
            self._held = ""
            return False
        if self._state == "text":
            return self._text(out, final)
        if self._state == "head":
            return self._head(out, final)
        if self._state == "fenced":
            return self._fenced(out, final)
        if self._state == "bare":  # taken only as the whole reply
            return final and self._plain_calls(out, self._held, self._held, rest="")
        return self._arguments_step(out)

    def _text(self, out: list[Delta], final: bool) -> bool:
        held, tag = self._held, self._fmt.open
        start = held.find(tag)
        plain = self._openings.find(held, self._line_start, bare=not self.content and not self.calls)
        if plain is not None and plain.end is not None and (start < 0 or plain.start < start):
            self._up_to(out, plain.start)
            self._held, self._state = held[plain.start :], "fenced" if plain.fenced else "bare"
            self._body_from, self._scan = self._held.find("\n") + 1, plain.end - plain.start
            return True
        if start >= 0:
            self._up_to(out, start)
            self._held, self._state = held[start + len(tag) :], "head"
            return True
        if not final:  # keep what may begin the markup or a call in JSON, and the whitespace before it
            keep = len(held) - _partial_suffix(held, tag)
            keep = len(held[: min(keep, plain.start) if plain is not None else keep].rstrip())
            self._content(out, held[:keep])
            self._held = held[keep:]
        return False

    def _up_to(self, out: list[Delta], start: int) -> None:
        """Send the held text before `start`, where markup begins, but the whitespace before it."""
        before = self._held[:start]
        self._content(out, before.rstrip())
        self._gap = before[len(before.rstrip()) :]

    def _fenced(self, out: list[Delta], final: bool) -> bool:
        held = self._held
        close = fence_close(held, self._scan, self._body_from)
        if close is not None:
            return self._plain_calls(
                out, held[: close + len(FENCE)], held[self._body_from : close], held[close + len(FENCE) :]
            )
        if final:  # never closed: no call
            return self._given_back(out, held)
        self._scan = max(self._scan, len(held) - len(FENCE) + 1)  # FENCEs before this were not the end
        return False

    def _plain_calls(self, out: list[Delta], block: str, body: str, rest: str) -> bool:
        """Settle a block of plain JSON: its calls, or its text as content."""
        calls = json_calls(body, self._plain)
        if calls is None:
            return self._given_back(out, block, rest)
        for name, arguments in calls if self._parallel else calls[:1]:
            self._open_call(out, name)
            self._arguments(out, arguments)
        self._held = rest
        self._closed()
        return True

    def _head(self, out: list[Delta], final: bool) -> bool:
        held, close = self._held, self._fmt.close
        head = _HEAD.match(held)
        if head is not None:
            if head.group(1) not in self._names:
                return self._malformed(out)
            self._open_call(out, head.group(1))
            self._held, self._state = held[head.end() :], "arguments"
            return True
        end = held.find(close)
        if end >= 0:
            whole = call_of(json_value(held[:end]), self._names)
            if whole is None:
                return self._malformed(out)
            self._open_call(out, whole[0])
            self._arguments(out, whole[1])
            self._held = held[end + len(close) :]
            self._closed()
            return True
        if final or (held.strip() and not held.lstrip().startswith("{")):
            return self._malformed(out)
        return False

    def _arguments_step(self, out: list[Delta]) -> bool:
        held, close = self._held, self._fmt.close
        end = held.find(close)
        if end >= 0:
            self._arguments(out, self._last_arguments(held[:end]))
            self._held = held[end + len(close) :]
            self._closed()
            return True
        # hold what may be the end of the markup: the wrapper's `}`, whitespace, the closing tag's start
        body = held[: len(held) - _partial_suffix(held, close)].rstrip()
        keep = len(body) - 1 if body.endswith("}") else len(body)
        self._arguments(out, held[:keep])
        self._held = held[keep:]
        return False

    def _last_arguments(self, tail: str) -> str:
        """The arguments' last piece from what was held at the end of the markup (or of the
        reply): without the `}` that closes the call's object where one does."""
        tail = tail.rstrip()
        sent = "".join(self.calls[-1].arguments)
        if tail.endswith("}") and (_parses(sent + tail[:-1]) or not _parses(sent + tail)):
            return tail[:-1].rstrip()
        return tail

    def _closed(self) -> None:
        """A call ended. Whitespace after it stays held with what follows: the layout before a
        next call, dropped, or the break before text, kept however the text was cut."""
        self._gap, self._line_start = "", True
        self._state = "text" if self._parallel else "done"

    def _malformed(self, out: list[Delta]) -> bool:
        """The opening tag began no call: it is content, and what follows it is read again as
        text (however the reply was cut, the same text then reaches the same verdict)."""
        return self._given_back(out, self._fmt.open, self._held)

    def _given_back(self, out: list[Delta], text: str, rest: str = "") -> bool:
        """Text held as a possible call that is none: content, with the whitespace before it."""
        self._content(out, self._gap + text)
        self._gap, self._held, self._state = "", rest, "text"
        return True

    def _open_call(self, out: list[Delta], name: str) -> None:
        call = _Call(_new_id(), name)
        self.calls.append(call)
        out.append(_opening(len(self.calls) - 1, call))

    def _content(self, out: list[Delta], text: str) -> None:
        if text:
            self.content.append(text)
            self._line_start = text.endswith("\n")
            out.append(Delta(content=text))

    def _arguments(self, out: list[Delta], text: str) -> None:
        if text:
            self.calls[-1].arguments.append(text)
            out.append(
                Delta(tool_calls=[ToolCallDelta(index=len(self.calls) - 1, function=FunctionDelta(arguments=text))])
            )


def _opening(index: int, call: _Call) -> Delta:
    return Delta(
        tool_calls=[
            ToolCallDelta(
                index=index, id=call.id, type="function", function=FunctionDelta(name=call.name, arguments="")
            )
        ]
    )


def _parses(text: str) -> bool:
    try:
        json_depth.loads(text)
    except ValueError:
        return False
    return True


def _merged(deltas: list[Delta]) -> list[Delta]:
    """Neighbouring pieces of the same kind as one delta: content with content, a call's
    arguments with the same call's."""
    out: list[Delta] = []
    for d in deltas:
        last = out[-1] if out else None
        if last is not None and d.content is not None and last.content is not None:
            out[-1] = Delta(content=last.content + d.content)
        elif last is not None and _continues(last, d):
            lt, dt = last.tool_calls[0], d.tool_calls[0]  # type: ignore[index]
            piece = FunctionDelta(name=lt.function.name, arguments=lt.function.arguments + dt.function.arguments)
            out[-1] = Delta(tool_calls=[ToolCallDelta(index=lt.index, id=lt.id, type=lt.type, function=piece)])
        else:
            out.append(d)
    return out


def _continues(last: Delta, d: Delta) -> bool:
    """`d` carries more arguments of the call whose arguments `last` carries (never its opening,
    which OpenAI sends with arguments "")."""
    return bool(
        last.tool_calls
        and d.tool_calls
        and last.tool_calls[0].id is None
        and d.tool_calls[0].id is None
        and last.tool_calls[0].index == d.tool_calls[0].index
    )
