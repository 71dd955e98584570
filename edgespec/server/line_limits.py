"""The two stops llama.cpp's server gives an inline completion, which its editor plugins rely on.

- `n_indent`: once the reply has a new line, a line that starts with less indentation than the
  cursor's line (a blank one too) ends the suggestion there: it would leave the current block. The
  text is cut after that line's indentation, as llama.cpp cuts it. A line's tokens are held back
  until its first other character shows its indentation.
- `t_max_predict_ms`: once the reply holds a new line, a new line that comes after the time limit
  (counted from the first token) ends it. The suggestion ends on a whole line, never mid-line.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from edgespec.decoding.events import Token


class LineLimits:
    def __init__(self, n_indent: int = 0, t_max_s: float | None = None, clock: Callable[[], float] = time.perf_counter):
        self.n_indent, self.t_max_s, self.clock = n_indent, t_max_s, clock
        self.met = False
        self._text = ""  # what was released
        self._held: list[Token] = []
        self._started: float | None = None

    def feed(self, tokens: list[Token]) -> list[Token]:
        """The tokens of `tokens` (and of those held before) that can be sent now."""
        out: list[Token] = []
        for token in tokens:
            if self.met:
                break
            if self._started is None:
                self._started = self.clock()
            out += self._one(token)
        return out

    def flush(self) -> list[Token]:
        """The reply ended: what was held back (a line of whitespace only)."""
        held, self._held = self._held, []
        return [] if self.met else held

    def _one(self, token: Token) -> list[Token]:
        self._held.append(token)
        whole = self._text + "".join(t.text for t in self._held)
        first_newline = whole.find("\n")
        if not self.n_indent or first_newline < 0:  # the first line is never checked
            return self._release_before(len(whole))
        # every line from the one the sent text ends in (the first line excepted)
        pos = max(whole.rfind("\n", 0, len(self._text)) + 1, first_newline + 1)
        while pos < len(whole):
            end = whole.find("\n", pos)
            line = whole[pos:] if end < 0 else whole[pos : end + 1]
            body = line.lstrip(" \t")
            if not body:  # whitespace so far: its indentation is not known yet
                return self._release_before(pos)
            if len(line) - len(body) < self.n_indent:  # a blank line too, as llama.cpp has it
                self.met = True
                return self._release_before(pos + len(line) - len(body))
            if end < 0:
                break
            pos = end + 1
        return self._release_before(len(whole))

    def _release_before(self, end: int) -> list[Token]:
        """Release the held tokens before character `end` of the whole text; the one that spans it
        is cut there when the reply ends at `end`, else held."""
        out, pos, cut = [], len(self._text), self.met
        while self._held and pos < end:
            t = self._held[0]
            if pos + len(t.text) > end:
                if not cut:
                    break
                t = Token(t.id, t.text[: end - pos], t.source)
            self._held.pop(0)
            out.append(t)
            pos += len(t.text)
            self._text += t.text
            if self._past_time_limit(t.text):
                self.met = True
                break
        if self.met:
            self._held = []
        return out

    def _past_time_limit(self, text: str) -> bool:
        """llama.cpp's rule: a new line after the time limit, once the reply has had one, ends it."""
        if self.t_max_s is None or self._started is None or "\n" not in text:
            return False
        return self.clock() - self._started > self.t_max_s
