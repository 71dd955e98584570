"""What edgespec keeps only to be faster next time, and does without where it cannot write.

The model hash record, the speed calibration, the noise floor and the prompt cache live in the
home (`paths.home()`). A home the user cannot write (a read-only mount, a shared install) must not
stop read-only use (run, chat, serve, models list): each of those writes goes on without saving,
and the first failure in a process is said in one line; the others fail the same way for the same
reason, so repeating it would only fill the screen. Commands that exist to write (models pull,
models tune) check their folder first and stop instead (`Store.check_writable`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

KEPT = "model hash records, speed calibration, prompt cache"  # what a home holds for speed

_said = False


def _to_stderr(message: str) -> None:
    print(f"edgespec: warning: {message}", file=sys.stderr, flush=True)


say: Callable[[str], None] = _to_stderr  # where the line goes; the chat app shows it as a notification


def cannot_save(what: str, folder: Path, error: OSError, to: Callable[[str], None] | None = None) -> None:
    """`what` could not be saved in `folder`: say so (to `to`, else `say`) if nothing was said yet."""
    global _said
    if _said:
        return
    _said = True
    (to or say)(
        f"cannot save the {what} in {folder} ({error.strerror or error}); going on without saving "
        f"it, nor anything else this run cannot save ({KEPT})"
    )


def forget() -> None:
    """Say the next failure again (a new process does; tests call this between cases)."""
    global _said
    _said = False
