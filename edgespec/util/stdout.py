"""stdout that fails: one rule for every command.

- The reader went away (a closed pipe, EPIPE: `edgespec run ... | head -c 5`): the command stops
  writing, quietly, and still does the rest of what it was asked (`run`'s --stats line on stderr
  and --stats-json, `bench`'s --json and --plot); then it exits 1, as click ends a command whose
  pipe closed.
- Any other failure (stdout closed, `>&-`; a full disk, ENOSPC; EBADF, EIO): one line on stderr,
  "edgespec: error: cannot write to stdout: ...", and exit 1.

`install` (the program entry, edgespec.__main__) wraps sys.stdout, so that a failed write or flush
raises one of the two exceptions below whoever writes (edgespec, click's --help and --version,
rich's tables), instead of an OSError that reads like a bug. After the first failure, file
descriptor 1 points at /dev/null: a flush in a `finally`, or Python's own at exit, cannot fail a
second time, while a write of more text raises again. A closed descriptor 1 is pointed at
/dev/null at once, so that no file edgespec or llama.cpp opens can take its number and receive
what is meant for stdout.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TextIO

from edgespec.util.errors import EdgespecError


class PipeClosed(Exception):
    """stdout's reader has gone; the command ends quietly with exit 1 (see the module's rule)."""

    exit_code = 1


class StdoutFailed(EdgespecError):
    """stdout cannot be written for another reason: one line, exit 1."""

    def __init__(self, reason: str):
        super().__init__(f"cannot write to stdout: {reason}")


class _GuardedStdout:
    """sys.stdout with the rule above applied to write and flush; the rest is the real stream's.
    `fd`: the descriptor it writes to (1, or its private copy after `text_only`)."""

    def __init__(self, stream: TextIO, closed: bool):
        self._stream = stream
        self.fd = 1
        self.failed: Exception | None = StdoutFailed("it is closed") if closed else None

    def write(self, text: str) -> int:
        self._guard(lambda: self._stream.write(text), bool(text))
        return len(text)

    def flush(self) -> None:
        self._guard(self._stream.flush, False)

    def _guard(self, call, content: bool) -> None:
        """Once stdout has failed, a write of text raises again (the writer should stop), while a
        flush or an empty write (a probe: click writes "" to learn the stream's kind) does nothing."""
        if self.failed is None:
            try:
                call()
                return
            except BrokenPipeError:
                self.failed = PipeClosed()
            except (OSError, ValueError) as e:  # ValueError: the stream itself was closed
                self.failed = StdoutFailed(getattr(e, "strerror", None) or str(e))
            _to_devnull(self.fd)
            raise self.failed
        if content:
            raise self.failed

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _to_devnull(fd: int = 1) -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd, inheritable=fd == 1)
        os.close(null)


def text_only() -> None:
    """For a command whose stdout carries only its reply (`run`), from now on to the process's
    end: sys.stdout writes to a private copy of descriptor 1, and descriptor 1 becomes stderr's.
    What native code prints there (llama.cpp, ggml's abort with the backtrace its debugger writes,
    a CUDA library's warning) then lands on stderr, never in the pipe. Nothing changes where
    sys.stdout is not the process's own (a test's CliRunner)."""
    out = sys.stdout
    if not isinstance(out, _GuardedStdout) or out.fd != 1 or out.failed is not None:
        return
    stream = out._stream
    stream.flush()
    private = os.dup(1)  # not inherited by child processes: a debugger ggml starts writes to stderr
    os.dup2(2, 1)
    buffering = 1 if stream.line_buffering else -1
    out._stream = open(private, "w", buffering, stream.encoding, stream.errors)  # noqa: SIM115 (to the end)
    out.fd = private


def install() -> None:
    """Apply the rule to sys.stdout; for the program's entry, before any command runs."""
    closed = sys.stdout is None
    if closed:
        _to_devnull()
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 (the program's stdout)
    sys.stdout = _GuardedStdout(sys.stdout, closed)


def check_open() -> None:
    """A StdoutFailed now when stdout was closed from the start: a command that only writes to
    stdout says so before it loads anything."""
    failed = getattr(sys.stdout, "failed", None)
    if isinstance(failed, StdoutFailed):
        raise failed


def write_or_defer(write: Callable[[], None]) -> PipeClosed | None:
    """Call `write` (to stdout); a closed pipe is returned instead of raised, for the command to
    raise once it has written its files too."""
    try:
        write()
    except PipeClosed as closed:
        return closed
    return None
