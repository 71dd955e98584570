"""Stopping the server on SIGINT, SIGTERM or SIGHUP, with requests in flight.

uvicorn's own handlers take SIGINT and SIGTERM only, wait for replies in flight, cancel what is
left after the graceful timeout (a traceback per request cut), and then raise the signal again,
which ends the process by the signal's default action or a KeyboardInterrupt in the event loop.
Here the three signals are recorded as edgespec.util.interrupts records any signal (`deferred`), and
stopping tells every request in flight at once (`on_stop`, EngineWorker.stop: a streamed reply
ends with an error event and `data: [DONE]`, one not streamed yet gets a 503), so the replies end
within one target pass and the process exits well inside the graceful timeout. The command then
raises the recorded signal: one line and 130 / 143 / 129, as every other command.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

import uvicorn

from edgespec.util import interrupts


class StoppingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]):
        super().__init__(config)
        self._on_stop = on_stop

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():  # a test's server in a thread
            yield
            return
        handler = interrupts.deferred(self._ask_to_exit)
        previous = {signum: signal.signal(signum, handler) for signum in interrupts.SIGNALS}
        try:
            yield
        finally:
            for signum, old in previous.items():
                signal.signal(signum, old)

    def _ask_to_exit(self) -> None:
        self.should_exit = True  # the main loop sees it within 0.1 s and calls shutdown

    async def shutdown(self, sockets=None) -> None:
        self._on_stop()
        await super().shutdown(sockets)
