"""Stop strings cut the reply at their text, as OpenAI's API does: the reply ends just before the
first place where any of them occurs, the stop string itself is not sent, and the generation stops.

A stop string may span tokens, so text that could be the start of one is held back until the next
tokens show whether it is; everything before it streams at once. Tokens are released whole, except
the one in which a stop string begins: its text is cut there (its id and origin go with the part
that was sent).
"""

from __future__ import annotations

from edgespec.decoding.events import Token


class StopCut:
    def __init__(self, stops: tuple[str, ...]):
        self.stops = stops
        self.met = False  # a stop string has occurred: nothing more is released
        self.word = ""  # the stop string that occurred
        self._held: list[Token] = []  # tokens whose text may begin a stop string

    def feed(self, token: Token) -> list[Token]:
        """The tokens that can be sent now that `token` has come."""
        if self.met:
            return []
        if not self.stops:
            return [token]
        self._held.append(token)
        text = "".join(t.text for t in self._held)
        found = [(i, s) for i, s in ((text.find(s), s) for s in self.stops) if i >= 0]
        if found:
            self.met = True
            at, self.word = min(found)
            return self._release(at, cut=True)
        return self._release(len(text) - self._longest_partial(text), cut=False)

    def flush(self) -> list[Token]:
        """The generation ended without a stop string: whatever was held back."""
        held, self._held = self._held, []
        return [] if self.met else held

    def _longest_partial(self, text: str) -> int:
        """Length of the longest end of `text` that is the beginning of a stop string."""
        return max(
            (k for s in self.stops for k in range(min(len(s) - 1, len(text)), 0, -1) if text.endswith(s[:k])), default=0
        )

    def _release(self, end: int, cut: bool) -> list[Token]:
        """Release the held tokens before character `end` of their joined text. With `cut`, the
        stop string starts at `end`: the token it starts in is cut there and the rest dropped."""
        out, pos = [], 0
        for i, t in enumerate(self._held):
            if pos + len(t.text) <= end:
                out.append(t)
            elif cut and pos < end:
                out.append(Token(t.id, t.text[: end - pos], t.source))
            else:
                self._held = [] if cut else self._held[i:]
                return out
            pos += len(t.text)
        self._held = []
        return out
