"""Checks on text a user gives, made before any model loads: is it text a tokenizer can take, and
could it fit the pair's context at all.

Python hands over text that is not valid Unicode without complaint: command-line arguments and
file names carry bytes that are not UTF-8 as surrogate escapes (U+DC80..U+DCFF), and JSON's
`"\\ud800"` reads as a lone surrogate. Either fails only when the tokenizer encodes it, after the
pair has loaded. Every front end checks its input here first, so the user hears in one line which
argument or field is wrong.
"""

from __future__ import annotations

from edgespec.util.errors import UsageError

# The most bytes of text one token is taken to stand for: the longest token of the built-in pair's
# vocabulary is 128 bytes (a run of spaces), and twice that leaves room for other vocabularies.
# Input longer than this many bytes per token of the context is refused unread (it bounds what is
# read into memory); shorter input is tokenized and its length checked exactly.
MAX_TOKEN_BYTES = 256


def context_bytes(context_tokens: int) -> int:
    """Bytes of text past which input cannot fit a context of `context_tokens` tokens."""
    return context_tokens * MAX_TOKEN_BYTES


def text_problem(text: str, escapes: bool = True) -> str | None:
    """What keeps `text` from being UTF-8 text (a phrase to follow its name), or None. With
    `escapes`, the text came from bytes (argv, a file) and U+DC80..U+DCFF stand for bytes that were
    not UTF-8; without, it came from JSON, where every surrogate is one the client wrote."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        if escapes and 0xDC80 <= code <= 0xDCFF:
            return f"is not UTF-8 text (byte 0x{code - 0xDC00:02x} at character {e.start})"
        return f"is not valid Unicode (a lone surrogate U+{code:04X} at character {e.start})"


def check_text(text: str | None, name: str) -> None:
    """A usage error naming `text` (an argument: "PROMPT", "--system") unless it is UTF-8 text or None."""
    problem = None if text is None else text_problem(text)
    if problem:
        raise UsageError(f"{name} {problem}")
