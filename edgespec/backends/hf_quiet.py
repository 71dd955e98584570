"""transformers kept off edgespec's stderr: its logging and progress bars silenced while it loads or
generates, its multi-line exception texts cut to the one line edgespec reports.

Shared by the backend, its loader, the GGUF conversion and the bench's `hf-assisted` peer; it
imports none of them, so none of them import one another to reach it.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def quiet_transformers():
    """Loading prints progress bars and advice to stderr, which edgespec keeps for its own output;
    errors still surface as exceptions."""
    from transformers.utils import logging as hf_logging  # optional dependency (the hf extra)

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def first_line(e: BaseException) -> str:
    """The first line of an exception's text (its type's name when it has none), for a one-line error."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
