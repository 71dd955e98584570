"""Ctrl-C (and SIGTERM, SIGHUP) in a process that spends most of its time inside C (llama.cpp, torch).

Python runs a SIGINT handler in the main thread between two bytecodes, and the default handler
raises KeyboardInterrupt wherever that is. Three kinds of place make that unsafe here:

- A callback C makes into Python (llama.cpp's log, load-progress and abort callbacks, through
  ctypes): ctypes prints the exception as "Exception ignored on calling ctypes callback function"
  and C carries on, so the Ctrl-C is lost. The handler runs at the callback's first bytecode, before
  any `try` in it could catch anything. So functions that C calls are wrapped with `c_callback`,
  and when the handler finds such a wrapper on the stack it does not raise: the callback asks C to
  stop where it can (`requested()`), and the Python code that made the C call raises the
  interrupt with `raise_pending()` once C has returned.
- Other places whose exceptions Python swallows and prints (a weakref callback in the import
  machinery, a `__del__`). The handler records every interrupt as pending before it raises it, so
  one swallowed there is raised again at the next `raise_pending()`, and the program's
  `sys.unraisablehook` keeps it from being printed.
- Clean-up: a second KeyboardInterrupt that lands in the middle of freeing C objects leaves them
  half freed for `__del__` to free again (glibc aborts: "double free or corruption"). The
  program's handler raises only the first interrupt. A second one flushes stdout and stderr and
  ends the process at once with 130 (or the first signal's status, below; `os._exit`), so no
  Python clean-up runs to race C's. The
  first one ends the same way once the command's own clean-up has run (`exit_interrupted`). Once
  the command has returned, Ctrl-C is ignored (`finishing`).

SIGTERM (what service managers, containers and `kill` send) and SIGHUP (the terminal went away) stop
a command the same way: the same handler, the same KeyboardInterrupt and clean-up, no partial files;
only the exit status (128 + the signal's number: 130, 143, 129) and the line ("edgespec:
interrupted", "terminated", "hung up") name the signal that came first. An event loop, where a
KeyboardInterrupt raised between any two bytecodes would cut a task in half, takes a signal with
`deferred` instead: the signal is recorded for the exit status, the loop is asked to stop, and the
command raises it once the loop has returned (`raise_deferred`). It is not made pending: threads
that call `raise_pending` (an engine thread) and C callbacks that check `requested` go on until the
loop's own stopping ends their work.

Only the program entry (`edgespec.__main__`) installs the handler and the hook; code that embeds
edgespec (tests, click's CliRunner) keeps its own, and `c_callback` still turns a KeyboardInterrupt
raised inside a callback's body into a pending one.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, NoReturn

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a process Ctrl-C ended
MESSAGE = "edgespec: interrupted"
# The signals that stop a command, and the word its one line says for each.
SIGNALS: dict[int, str] = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}

_pending = False  # an interrupt not known to have reached the code that ends the command
_interrupted = False  # the program's handler has seen one of SIGNALS
_first_signal: int | None = None  # the first of SIGNALS seen by either handler; it names the exit
_installed = False  # this process is the edgespec program (install() ran)
_callback_codes: set[CodeType] = set()


def install() -> None:
    """Make SIGNALS follow the rules above; for the program's main thread, before anything slow."""
    global _installed
    _installed = True
    for signum in SIGNALS:
        signal.signal(signum, _on_signal)
    previous_hook = sys.unraisablehook

    def unraisable(info) -> None:
        if issubclass(info.exc_type, KeyboardInterrupt):
            _record()  # raised again at the next raise_pending()
        else:
            previous_hook(info)

    sys.unraisablehook = unraisable


def finishing() -> None:
    """The command has returned and set the exit status; only the interpreter's shutdown is left
    (engines are closed by then). A Ctrl-C (or SIGTERM, SIGHUP) from here is ignored: Python puts
    SIGINT's default action back part way through its shutdown, so no handler covers it to the end,
    and a signal after that would kill the process by signal instead of letting it exit with its
    status."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def c_callback(stopped: Any) -> Callable[[Callable], Callable]:
    """Decorate a Python function that C calls through ctypes: a KeyboardInterrupt raised in it is
    recorded as pending and the callback returns `stopped` (the value that asks C to stop, or None)."""

    def wrap(fn: Callable) -> Callable:
        def callback(*args):
            try:
                return fn(*args)
            except KeyboardInterrupt:
                _record()
                return stopped

        _callback_codes.add(callback.__code__)
        return functools.wraps(fn)(callback)

    return wrap


def deferred(stop: Callable[[], None]) -> Callable[[int, FrameType | None], None]:
    """A handler for SIGNALS while an event loop runs: it raises nothing, records the signal as
    the program's handler does and calls `stop` (which must only set flags: it runs between two
    bytecodes of the loop). A second signal ends the process at once, as it does anywhere else."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if _first_signal is not None and _installed:
            _exit_now()
        _first(signum)
        stop()

    return handler


def raise_deferred() -> None:
    """Raise a signal that a `deferred` handler took, once its loop has returned."""
    if _first_signal is not None:
        raise KeyboardInterrupt


def requested() -> bool:
    """Whether a signal asks the process to stop: what a C callback checks to abort C's work."""
    return _pending or _interrupted


def raise_pending() -> None:
    """Raise a recorded interrupt (once); call it after every C call that may call back."""
    global _pending
    if _pending:
        _pending = False
        raise KeyboardInterrupt


def exit_status() -> int:
    """128 + the number of the signal that stopped the command: 130 for Ctrl-C (also a
    KeyboardInterrupt that no signal of ours raised), 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + (_first_signal or signal.SIGINT)


def message() -> str:
    return f"edgespec: {SIGNALS[_first_signal or signal.SIGINT]}"


def exit_interrupted() -> NoReturn:
    """End a command that a signal stopped (its `finally` blocks have run): the one line on stderr
    and `exit_status()`. The program leaves at once, without the interpreter's shutdown: that would only
    add risk (the garbage collector freeing C objects in any order), and CPython 3.11 turns the exit
    status into death by SIGINT once a KeyboardInterrupt was raised inside exec() of a string (as
    dataclasses do while modules import), even a handled one. Embedded, it raises SystemExit."""
    if _installed:
        _exit_now()
    print(message(), file=sys.stderr, flush=True)
    sys.exit(exit_status())


def _record() -> None:
    global _pending
    _pending = True


def _first(signum: int) -> None:
    global _first_signal
    if _first_signal is None:
        _first_signal = signum


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _interrupted
    if _first_signal is not None:
        _exit_now()
    _first(signum)
    _interrupted = True
    _record()
    if not _inside_callback(frame):  # raising inside one would be swallowed by ctypes
        raise KeyboardInterrupt


def _inside_callback(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code in _callback_codes:
            return True
        frame = frame.f_back
    return False


def _exit_now() -> None:
    """Keep what was written, say why, and leave without running any clean-up."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a write the signal cut into (reentrant flush), or a closed pipe
            pass
    try:
        os.write(2, f"{message()}\n".encode())
    except OSError:  # stderr gone too (a hang-up closes the terminal)
        pass
    os._exit(exit_status())
