"""The engine's own thread: where every call into a loaded engine runs."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor


class EngineThread:
    """One long-lived thread that loads an engine and runs every generation of it.

    llama.cpp's CPU backend runs on an OpenMP thread team that belongs to the OS thread calling
    it. Loading in one thread and generating in another decodes markedly slower than doing both on
    the same thread. A front end that generates off its main thread (the chat app) therefore sends
    all engine work here.
    """

    def __init__(self):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edgespec-engine")

    def call(self, fn, *args, **kwargs):
        """Run fn(*args, **kwargs) on the engine thread and return (or raise) its result."""
        return self.submit(fn, *args, **kwargs).result()

    def submit(self, fn, *args, **kwargs) -> Future:
        """Queue fn(*args, **kwargs) for the engine thread (first in, first out) without waiting."""
        return self._pool.submit(fn, *args, **kwargs)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
