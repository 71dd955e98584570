"""What every endpoint does with a queued job: wait for the engine to take it, read what it sends,
and give up when the client goes away (the app's endpoints and llama.cpp's, native_routes.py);
and a request's decoding settings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import partial

from fastapi import Request

from edgespec.constraints.guidance import ConstraintSpec
from edgespec.decoding.events import Token
from edgespec.engine.engine import GenerateSettings, Sampled
from edgespec.engine.read_ahead import Reading
from edgespec.server.engine_worker import FINISHED, EngineWorker, Failed, Job, Started
from edgespec.server.replies import Reply


def request_settings(
    defaults: GenerateSettings,
    body: Sampled,
    constraint: ConstraintSpec | None = None,
    decode_again: bool = False,
    live_timings: bool = False,
) -> Callable[[int], GenerateSettings]:
    """A request's decoding settings for a reply of `max_tokens` tokens (known once the engine has
    read the prompt, where the request gives none: `Job`): the command line's `defaults` (the drafter,
    K and sampling) with the request's sampling fields (OpenAI's bodies and llama.cpp's alike) laid
    over them; `decode_again`: the request asks to decode a greedy request asked before again (as
    --decode-again); `live_timings`: it asks auto to choose draft lengths from its own timings (as
    --live-timings)."""
    again = defaults.decode_again or decode_again
    return partial(
        GenerateSettings.build,
        sampling=defaults.sampling,
        draft=defaults.draft,
        policy=defaults.policy,
        constraint=constraint,
        given=body,
        decode_again=again,
        live_timings=defaults.live_timings or live_timings,
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
