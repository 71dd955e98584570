"""Tool calls written as plain JSON instead of the format's markup, which `tool_choice` "auto"
also takes (edgespec.server.tool_call_parser reads them).

Small models shown Hermes' template often leave out the `<tool_call>` tags: the built-in 1.5B
coder, asked for the weather with a weather tool offered, writes a Markdown block (seen here,
greedy: ```` ```json\n{\n  "name": "get_weather",\n  "arguments": {...}\n}\n``` ````).
llama.cpp's server reads Hermes calls after an optional ```` ```json ```` / ```` ```xml ```` fence,
inside any of several other tags or none. We go less far, because every text taken for a call is
a call the client may act on, and text wrongly taken is lost to the user:

- A fenced block, ```` ``` ```` or ```` ```json ```` at the start of a line (text may come before
  it, as before the markup), that holds one call object or a JSON list of them, and nothing else.
  Other tags are not read: no model here has been seen writing them.
- A bare call object (or list) that is the whole reply, whitespace aside: a reply that is nothing
  but `{"name": <a tool offered>, "arguments": {...}}` has no other reading. A bare object inside
  prose is not taken: prose that shows a call's JSON is as likely an example as a call.
- A call object has exactly the keys "name" and "arguments", "name" first (as the template's
  example writes it, so that text can be told from a call early while streaming), the name one
  the reader was given (a tool offered, not strict: a strict tool's call must come in the markup,
  which decoding enforces), and an object for arguments.

Anything else (another fence language, another key, a name not offered, a block never closed, as
when max_tokens cuts it) stays content as written. A candidate is held back only while it is still
the beginning of a call's opening (fence, `{"name": "NAME", "arguments":` with NAME offered), so
code blocks that are not calls stream as soon as they differ from it. Once the opening is read,
the block is held whole until its closing fence (a bare call: until the reply ends), and only then
taken as calls or given back as text: no call delta goes out for a block that may turn out to be
none, so a streamed reply reads as the whole one does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any, NamedTuple

from edgespec.util import json_depth

FENCE = "```"
_WS = " \t\n\r"  # JSON's whitespace
# A call's opening as steps: None is any JSON whitespace, a tuple is one of its strings (the first
# that the text starts with; "" makes a step optional).
_Step = tuple[str, ...] | None


def _head(names: Collection[str]) -> tuple[_Step, ...]:
    quoted = tuple(json.dumps(n) for n in names)
    return (None, ("[", ""), None, ("{",), None, ('"name"',), None, (":",), None, quoted, None, (",",), None,
            ('"arguments"',), None, (":",))  # fmt: skip


PARTIAL = -1  # what _opening_end says of text that ends inside an opening


def _opening_end(text: str, steps: tuple[_Step, ...]) -> int | None:
    """Where the opening `steps` describe ends in `text` read from its start; PARTIAL where the
    text ends before the opening does (all of it may still begin one), None where it departs."""
    pos = 0
    for step in steps:
        if step is None:
            while pos < len(text) and text[pos] in _WS:
                pos += 1
            continue
        rest = text[pos:]
        hit = next((s for s in step if rest.startswith(s)), None)
        if hit is None:
            return PARTIAL if any(s.startswith(rest) for s in step) else None
        pos += len(hit)
    return pos


class Opening(NamedTuple):
    start: int
    end: int | None  # None: the text ends inside the opening
    fenced: bool


class Openings:
    """Finds where a call in plain JSON may open in held text."""

    def __init__(self, names: Collection[str]):
        head = _head(names)
        self._fenced = ((FENCE,), ("json\n", "\n"), *head)
        self._bare = head
        self.enabled = bool(names)

    def find(self, text: str, line_start: bool, bare: bool) -> Opening | None:
        """The first call's opening in `text`, whole or cut by the text's end; None where there is
        none. A fence counts at the start of a line (`line_start`: text[0] is one); a bare call,
        with `bare`, only at the start of `text`."""
        if not self.enabled:
            return None
        if bare:
            end = _opening_end(text, self._bare)
            if end is not None:
                return Opening(0, None if end == PARTIAL else end, False)
        line_starts = [m.end() for m in re.finditer("\n", text)]
        for start in [0, *line_starts] if line_start else line_starts:
            end = _opening_end(text[start:], self._fenced)
            if end is not None:
                return Opening(start, None if end == PARTIAL else start + end, True)
        return None


def fence_close(text: str, scan_from: int, body_from: int) -> int | None:
    """Where the closing fence of the block opened in `text` starts, searched from `scan_from`:
    the first FENCE at the start of a line (Markdown's close; a JSON string holds no raw newline,
    so none hides there), or one right after a body (`text[body_from:]` up to it) that is whole
    JSON, as in ```` }``` ````. A FENCE inside a JSON string is neither."""
    at = text.find(FENCE, scan_from)
    while at >= 0:
        if text[at - 1] == "\n" or json_value(text[body_from:at]) is not None:
            return at
        at = text.find(FENCE, at + 1)
    return None


def json_calls(body: str, names: Collection[str]) -> list[tuple[str, str]] | None:
    """(name, arguments as JSON) of each call `body` holds, one call object or a non-empty list of
    them; None where it is anything else."""
    value = json_value(body)
    items = value if isinstance(value, list) and value else [value]
    calls = [call_of(item, names) for item in items]
    return None if None in calls else calls  # type: ignore[return-value]


def call_of(value: Any, names: Collection[str]) -> tuple[str, str] | None:
    """(name, arguments as JSON) of a parsed call object `{"name": NAME, "arguments": {...}}`
    naming one of `names`, or None."""
    if not (isinstance(value, dict) and set(value) == {"name", "arguments"} and value["name"] in names):
        return None
    if not isinstance(value["arguments"], dict):
        return None
    return value["name"], json.dumps(value["arguments"], ensure_ascii=False)


def json_value(text: str) -> Any:
    """The JSON value of `text`, or None where it is not JSON (or is null, which no call is, or
    nested too deeply to read: edgespec.util.json_depth)."""
    try:
        return json_depth.loads(text)
    except ValueError:
        return None
