"""Is this text something a tokenizer can read? One predicate for every way text comes in.

A Python str can hold what no UTF-8 encoder accepts: a lone surrogate (`"\\ud800"`, which JSON can
spell as an escape) or, from a command line or file read with `surrogateescape`, a byte that was not
UTF-8. Tokenizers encode to UTF-8 and fail on it deep inside generation; checking first lets the
caller refuse the input as the client's mistake, naming where it was.
"""

from __future__ import annotations


def unicode_problem(text: str) -> str | None:
    """None when `text` encodes as UTF-8; otherwise a short phrase to follow the field's name, e.g.
    "is not valid Unicode (a lone surrogate at offset 1)" (offset in characters)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # surrogates are the only code points UTF-8 refuses
        return f"is not valid Unicode (a lone surrogate at offset {e.start})"
    return None
