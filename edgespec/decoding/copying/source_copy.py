"""Drafts for the start of a value under a constraint: the prompt's text where the last copy ended.

An extraction (a log line into fields, an email into a meeting, a request into a tool's arguments)
writes values that copy the prompt, mostly in the prompt's own order, each after a key the
constraint forces. Token lookup (`ngram.py`) cannot draft a value's first tokens: what
precedes them is the reply's syntax (`": "`), which the prompt does not hold, and the prompt spells
the value after a space (` payments`) where the reply spells it after a quote (`payments`). So at a
value's start this drafter reads text: it finds the reply's values so far in the prompt, in order
(the cursor), and proposes the first word after the cursor that the constraint allows there,
spelled afresh. Once that word is out, token lookup copies the rest: inside a value the two
spellings agree again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from edgespec.decoding.backend import Backend
from edgespec.decoding.constraint import Constraint
from edgespec.decoding.drafters import Draft

# where a value starts in JSON written as the constraints lay it out (`": "`, `", "`, `[`)
_VALUE_STARTS = ('": "', '": ', "[", '["', "[ ", '[ "', ', "')
_TAIL = 4  # tokens that hold any of those
# the reply, piece by piece: a closed string, or the syntax (and bare numbers) up to the next quote
_PIECE = re.compile(r'"(?:[^"\\]|\\.)*"|[^"]+')
_BARE = re.compile(r"-?[0-9][0-9.eE+-]*|true|false")
_WORD = re.compile(r"[\w@~^$/.+-]+")  # a value's first word: an identifier, a version, a path


class SourceCopy:
    """The prompt as text; `propose` drafts a value's first word from where the reply has got to in
    it. Stateless between calls but for the prompt: the decoder asks after text that verification
    may still reject, so the cursor is found afresh each time (a scan of the reply's text)."""

    WORDS_AHEAD = 8  # word starts after the cursor tried for one the constraint allows
    NEAR = 40  # characters: a key or a one-character value moves the cursor only if this close

    def __init__(self, backend: Backend):
        self._backend = backend
        self._prompt_len = 0
        self._prompt_text = ""  # the prompt's text

    def begin(self, prompt: Sequence[int]) -> None:
        self._prompt_len = len(prompt)
        self._prompt_text = self._text(prompt)

    def propose(self, context: Sequence[int], k: int, constraint: Constraint) -> Draft:
        """The first word after the cursor that `constraint` allows, at most k tokens, when the reply
        (the context after the prompt) is at a value's start; else nothing."""
        if k <= 0 or len(context) < self._prompt_len or not self._prompt_text:
            return Draft()
        if not self._text(context[max(self._prompt_len, len(context) - _TAIL) :]).endswith(_VALUE_STARTS):
            return Draft()
        reply = self._text(context[self._prompt_len :])
        cursor = self._cursor(reply)
        if cursor is None:
            return Draft()
        for n, word in enumerate(_WORD.finditer(self._prompt_text, cursor)):
            if n == self.WORDS_AHEAD:
                break
            ids = self._backend.tokenize(word.group(), special=False)[:k]
            allowed = constraint.allowed_prefix(ids)
            if allowed:
                return Draft(ids[:allowed], [None] * allowed, [1.0] * allowed)
        return Draft()

    def _text(self, tokens: Sequence[int]) -> str:
        return b"".join(self._backend.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    def _cursor(self, reply: str) -> int | None:
        """Where the reply has got to in the prompt: past each complete scalar of the reply, in order,
        found in the prompt after the one before (None: none was). Keys count too, if near: a key
        the prompt also names (`status=402`) stands just before its value; a far one is more
        likely a word of other text."""
        cursor, pos = None, 0
        while pos < len(reply):
            piece = _PIECE.match(reply, pos)
            if piece is None or piece.end() == len(reply):
                break  # an open string, or text that may go on (a number, a string not yet a key)
            text = piece.group()
            if text.startswith('"'):
                cursor = self._past(cursor, _unescaped(text[1:-1]), near=reply.startswith(":", piece.end()))
            else:
                for bare in _BARE.finditer(text):
                    cursor = self._past(cursor, bare.group(), near=False)
            pos = piece.end()
        return cursor

    def _past(self, cursor: int | None, text: str, near: bool) -> int | None:
        """The cursor past `text`'s first occurrence after it (a short text, or a `near` one, only if
        close); unmoved where it is not found."""
        if not text:
            return cursor
        start = cursor or 0
        found = self._prompt_text.find(text, start)
        if found < 0 or ((near or len(text) == 1) and found - start > self.NEAR):
            return cursor
        return found + len(text)


def _unescaped(body: str) -> str:
    """A JSON string's text from its body between the quotes."""
    try:
        return json.loads(f'"{body}"')
    except ValueError:
        return body
