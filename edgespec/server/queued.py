"""What every endpoint does with a queued job: wait for the engine to take it, read what it sends,
and give up when the client goes away (the app's endpoints and llama.cpp's, native_routes.py);
and a request's decoding settings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from fastapi import Request

from edgespec.constraints.guidance import ConstraintSpec
from edgespec.decoding.events import Token
from edgespec.decoding.sampling import sampling_from_flags
from edgespec.engine.engine import GenerateSettings
from edgespec.engine.read_ahead import Reading
from edgespec.server.engine_worker import FINISHED, EngineWorker, Failed, Job, Started
from edgespec.server.replies import Reply


class Sampled(Protocol):
    """A request's sampling fields (OpenAI's bodies and llama.cpp's alike); None where not given."""

    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_p: float | None

    @property
    def sampling_seed(self) -> int | None: ...


def request_settings(
    defaults: GenerateSettings, body: Sampled, constraint: ConstraintSpec | None = None, decode_again: bool = False
) -> GenerateSettings:
    """A request's decoding settings: the command line's `defaults`, its sampling fields over them;
    `decode_again`: the request asks to decode a greedy request asked before again (as --decode-again)."""
    sampling = sampling_from_flags(
        defaults.sampling, body.temperature, body.top_p, body.top_k, body.min_p, body.sampling_seed
    )
    again = defaults.decode_again or decode_again
    return GenerateSettings(
        sampling=sampling, draft=defaults.draft, policy=defaults.policy, constraint=constraint, decode_again=again
    )


class ClientGone(Exception):
    """The client closed the connection before its reply was ready."""


async def start(request: Request, job: Job, worker: EngineWorker) -> Started:
    """Queue `job` and wait, while its client is connected, until the engine has taken it and
    read its prompt's length (the status is known then)."""
    worker.submit(job)
    started_item = await while_connected(request, job, job.next())
    if isinstance(started_item, Failed):
        raise started_item.error
    if started_item is FINISHED:  # skipped: cancelled while it waited
        raise ClientGone
    return started_item


async def reading_of(request: Request, job: Job) -> Reading:
    """What a read-only job read (it is answered even when a generating request stopped it)."""
    item = await while_connected(request, job, job.next())
    if isinstance(item, Failed):
        raise item.error
    return item


async def sent_tokens(job: Job, reply: Reply) -> AsyncIterator[list[Token]]:
    """The tokens to send, a batch per wake-up (what the engine produced meanwhile), until the job
    has finished; a stop string cancels the generation, and the rest is only counted."""
    finished = False
    while not finished:
        out: list[Token] = []
        for item in [await job.next(), *job.ready()]:
            if isinstance(item, Failed):
                raise item.error
            if item is FINISHED:
                finished = True
            else:
                out += reply.add(item)
        if reply.ended:
            job.cancel.set()
        if out:
            yield out


async def while_connected(request: Request, job: Job, work):
    """Await `work`; if the client closes the connection first, cancel the job and raise ClientGone.
    (The body has been read, so the next ASGI message can only be the disconnect.)"""

    async def disconnect() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task, gone = asyncio.ensure_future(work), asyncio.ensure_future(disconnect())
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        left = not task.done()
        if left:  # the client left, or the server is stopping: stop the generation
            task.cancel()
            job.cancel.set()
    if left:
        raise ClientGone
    return task.result()
