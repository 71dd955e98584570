"""The one engine behind the server: all of its work on one thread, and a bounded FIFO in front of it.

llama.cpp runs every call of a loaded pair on the thread that loaded it (see EngineThread), so
requests take turns: each is queued as it arrives and runs once those before it are done. One runs
and at most `queue_size` wait; a request beyond that is refused at once (503 with Retry-After)
instead of waiting for minutes. The prompt is tokenized on the engine thread too, so a prompt
longer than the context is found when its turn comes.

A job's events (Started, then the engine's Token / Step / Summary, or a Reading for a read-only
job, or Failed; Finished last: the first Finished ends what is read) come back to the event loop
one by one through an asyncio queue, so a reply streams while it is generated. `cancel` stops a
generation within one target pass; a job cancelled while it waited (its client left) frees its
place in the queue at once and is skipped without reading its prompt. A read-only job
(`max_tokens` 0) yields to every generating job that comes: it stops at its next read chunk,
answered with what it read.
When the server stops (`stop`), every job queued or running ends with a 503 (server_stopping)
instead, and a new one is refused with it.

Before the first job, `prepare` measures the engine's speed on the same thread (the first
request once did, for minutes on a busy machine, saying nothing): jobs queue behind it, and
`ready` tells /health when it is over.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from edgespec.decoding.constraint import ConstraintDeadEnd
from edgespec.decoding.costs.keeper import CalibrationStopped
from edgespec.decoding.events import Summary
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.engine_thread import EngineThread
from edgespec.server.openai_errors import (
    APIError,
    constraint_dead_end,
    context_length_exceeded,
    engine_failure,
    queue_full,
    server_stopping,
)


@dataclass(frozen=True)
class Started:
    """The prompt fits the context; generation begins (the HTTP status can now be sent)."""

    prompt_tokens: int


@dataclass(frozen=True)
class Failed:
    error: APIError


class Finished:
    """The job is over: nothing more will come from the engine thread."""


FINISHED = Finished()


class Job:
    """One request's generation: its prompt (token ids made from the engine), its settings for a
    reply of a given length (`settings(max_tokens)`), the reply's length it asks for (None: up to the
    context; 0: read only), its cancel flag, and the queue its events come back on. Made on the
    event loop's thread."""

    def __init__(
        self,
        tokens: Callable[[Engine], list[int]],
        param: str,
        settings: Callable[[int], GenerateSettings],
        max_tokens: int | None,
    ):
        self.tokens, self.param, self.settings, self.max_tokens = tokens, param, settings, max_tokens
        self.cancel = threading.Event()
        self.stopped = False  # cancelled because the server stops, not by its client
        self.yielded = False  # a read only, cancelled because a generating request came: answered all the same
        self.taken = False  # the engine thread has begun it (set under the worker's lock)
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue = asyncio.Queue()

    def put(self, item) -> None:
        """From the engine thread: hand an item to the event loop."""
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, item)
        except RuntimeError:  # the event loop has closed (the server stopped): nobody is listening
            self.cancel.set()

    async def next(self):
        return await self._events.get()

    def ready(self) -> list:
        """The items already waiting, without waiting for more."""
        items = []
        while not self._events.empty():
            items.append(self._events.get_nowait())
        return items


def _holds_a_place(job: Job) -> bool:
    """Whether `job` counts against the queue's bound: not a read that yielded (it is answered with
    what it read), nor a job cancelled before the engine took it (its client left): it is skipped
    unread when its turn comes, so its place is free at once, not once the job ahead of it ends."""
    return not job.yielded and (job.taken or not job.cancel.is_set())


class EngineWorker:
    """Owns the engine and its thread (anything else that touches the engine runs there too);
    `submit` queues a job or refuses it when the queue is full."""

    def __init__(self, engine: Engine, engine_thread: EngineThread, queue_size: int):
        self.engine, self.queue_size = engine, queue_size
        self.engine_thread = engine_thread
        self._lock = threading.Lock()
        self._jobs: set[Job] = set()  # queued or running
        self._stopping = threading.Event()  # set once: the server stops (a calibration too)
        self._mean_job_s = 2.0  # running mean of how long a job holds the engine, for Retry-After
        self.ready = threading.Event()  # clear while `prepare` runs
        self.ready.set()

    def prepare(self, settings: GenerateSettings) -> None:
        """Queue ahead of every job what the first generation under `settings` would do first:
        restore or measure the cost curve (`Engine.cost_model`, within its time limit, said on
        stderr), when they price passes by it; a provisional curve is measured again here, before
        any request waits for it (a quiet moment). `ready` is clear until it is over. A server that
        stops meanwhile stops it within a pass, keeping none of it (the next start measures)."""
        if settings.policy.cost_aware:
            self.ready.clear()
            self.engine_thread.submit(self._prepare)

    def _prepare(self) -> None:
        try:
            self.engine.cost_model(stop=self._stopping, quiet=True)
        except CalibrationStopped:
            pass
        except Exception as e:  # said here, where the log shows it; the first request tries again
            self.engine.notice(f"could not measure this machine's speed: {engine_failure(e).detail.message}")
        finally:
            self.ready.set()

    def submit(self, job: Job) -> None:
        """Queue `job`. A generating job makes every read only (`max_tokens` 0) queued or running
        yield: a running read stops at its next read chunk, keeping what it read; a queued one
        reads nothing. Each is answered with what it read, and no longer counts in the queue."""
        with self._lock:
            if self._stopping.is_set():
                raise server_stopping()
            if job.max_tokens != 0:
                for other in self._jobs:
                    if other.max_tokens == 0:
                        other.yielded = True
                        other.cancel.set()
            if sum(map(_holds_a_place, self._jobs)) > self.queue_size:  # one running, queue_size waiting
                raise queue_full(self.retry_after())
            self._jobs.add(job)
        self.engine_thread.submit(self._run, job)

    def retry_after(self) -> int:
        """Seconds until the engine is likely to take another request: about one request's time."""
        return max(1, math.ceil(self._mean_job_s))

    def _run(self, job: Job) -> None:
        start = time.perf_counter()
        with self._lock:
            job.taken = True
        try:
            if job.stopped:
                raise server_stopping()
            if job.yielded or not job.cancel.is_set():
                self._generate(job)
        except APIError as e:
            job.put(Failed(e))
        except ConstraintDeadEnd as e:
            job.put(Failed(constraint_dead_end(e)))
        except Exception as e:  # a failure of the engine fails this request, not the server
            job.put(Failed(engine_failure(e)))
        finally:
            job.put(FINISHED)
            with self._lock:
                self._jobs.discard(job)
                self._mean_job_s += 0.3 * (time.perf_counter() - start - self._mean_job_s)

    def _generate(self, job: Job) -> None:
        engine = self.engine
        ids = job.tokens(engine)
        if not ids:
            raise APIError(400, "the prompt is empty", param=job.param)
        room = engine.n_ctx - len(ids)
        if room <= 0:
            raise context_length_exceeded(len(ids), engine.n_ctx, job.param)
        job.put(Started(len(ids)))
        if job.max_tokens == 0:
            job.put(engine.read_ahead(ids, job.cancel))
            return
        max_tokens = job.max_tokens if job.max_tokens is not None else room  # None: up to the context
        for event in engine.generate_tokens(ids, job.settings(max_tokens), job.cancel):
            if job.stopped and isinstance(event, Summary) and event.stop_reason == "cancelled":
                raise server_stopping()  # instead of the ending of a reply cut short
            job.put(event)

    def stop(self) -> None:
        """The server stops: refuse new jobs, and end those queued or running with a 503 (a job
        that its client or a stop string already cancelled ends as it would have).

        The 503 is handed to each reply here, on the event loop, rather than when the engine
        thread gets round to the job: on a loaded machine that took longer than uvicorn waits for
        replies to end (2 s), and uvicorn then cancelled them, a traceback each and a stream cut
        mid-body. The engine thread still stops the job within one target pass; what it sends
        after this comes after FINISHED, where nobody reads."""
        with self._lock:
            self._stopping.set()
            for job in self._jobs:
                if not job.cancel.is_set():
                    job.stopped = True
                    job.cancel.set()
                    job.put(Failed(server_stopping()))
                    job.put(FINISHED)

    def close(self) -> None:
        """Cancel what is queued or running, then free the engine on its own thread."""
        self._stopping.set()
        with self._lock:
            for job in self._jobs:
                job.cancel.set()
        try:
            self.engine_thread.call(self.engine.close)
        finally:
            self.engine_thread.shutdown()
