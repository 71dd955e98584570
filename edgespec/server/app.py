"""The HTTP surface: OpenAI's chat and text completions, the model list and a health check.

A request is checked (pydantic, and a `response_format` compiled: see structured.py) before
anything is queued, in a worker thread so that no request's checks hold the event loop
(request_body.py), queued for the engine (503 when the queue is full), and answered once the
engine has read its prompt: then the status is known (a prompt longer than the context is a 400,
not a broken stream). Streamed replies are server-sent events ending in `data: [DONE]`; the
figures (`usage`, `metrics.speculative_decoding`) come in the last chunk, as vLLM sends them. A
client that goes away, while its request waits or while it streams, cancels its generation (within
one target pass), so the next request is not kept waiting.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request, Response
from fastapi.sse import EventSourceResponse, format_sse_event
from pydantic import BaseModel
from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError, SimpleUser
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import ClientDisconnect

from edgespec.constraints.guidance import ConstraintSpec
from edgespec.decoding.events import Token
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.infill import DEFAULT_ORDER, Infill, Order
from edgespec.server import openai_errors
from edgespec.server.engine_worker import EngineWorker, Job
from edgespec.server.native_routes import add_native_routes, infill_tokens
from edgespec.server.openai_errors import APIError, unauthorized, unknown_model
from edgespec.server.queued import ClientGone, reading_of, request_settings, sent_tokens, start, while_connected
from edgespec.server.reach import LOOPBACK, Reach, ReachGuard
from edgespec.server.replies import ChatFormat, Reply, TextFormat, origins
from edgespec.server.request_body import body_model, checked
from edgespec.server.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    GenerationRequest,
    ModelCard,
    ModelList,
    PromptTokensDetails,
    ReadAhead,
    Usage,
)
from edgespec.server.structured import one_constraint, response_constraint
from edgespec.server.tool_choice import tool_plan

# An editor sends whole files, and a prompt longer than the context is refused anyway; this only
# keeps a runaway client from filling memory (a 32k-token context is about 128 KB of text). Over it:
# 413 (see openai_errors).
MAX_BODY_BYTES = 4 * 1024 * 1024
DONE = format_sse_event(data_str="[DONE]")


@dataclass(frozen=True)
class Checked:
    """A request that passed every check and is ready to queue: its body, how its reply is
    written, its prompt (token ids made on the engine thread), the request field that holds the
    prompt, and the constraint it decodes under."""

    body: GenerationRequest
    fmt: ChatFormat | TextFormat
    tokens: Callable[[Engine], list[int]]
    param: str
    constraint: ConstraintSpec | None = None


async def client_gone(request: Request, error: Exception) -> Response:
    return Response(status_code=499)  # nginx's "client closed request", for the access log; nobody reads it


class BearerKey(AuthenticationBackend):
    """`--api-key`: every endpoint but /health wants `Authorization: Bearer KEY`; checked before the
    body is read."""

    def __init__(self, key: str):
        self._key = key.encode()

    async def authenticate(self, conn):
        if conn.url.path == "/health":
            return None
        scheme, _, sent = conn.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not sent:
            raise AuthenticationError("missing")
        if not secrets.compare_digest(sent.strip().encode(), self._key):
            raise AuthenticationError("wrong")
        return AuthCredentials(["authenticated"]), SimpleUser("client")


def _guarded_app(api_key: str | None, reach: Reach) -> FastAPI:
    """An app with no routes yet: errors answered in OpenAI's shape, a client gone before its reply
    logged as such, with `api_key`, every endpoint but /health behind it, and in front of all, the
    Host and Origin checks of `reach` (reach.py; the Host check only without a key)."""
    app = FastAPI(title="edgespec", max_body_size=MAX_BODY_BYTES, openapi_url=None)
    openai_errors.install(app)
    app.add_exception_handler(ClientGone, client_gone)
    app.add_exception_handler(ClientDisconnect, client_gone)  # gone while its body was being read
    if api_key:
        app.add_middleware(
            AuthenticationMiddleware,
            backend=BearerKey(api_key),
            on_error=lambda conn, error: unauthorized(str(error) == "wrong").response(),
        )
    app.add_middleware(ReachGuard, reach=reach, check_host=not api_key)  # added last: runs first
    return app


def create_app(
    worker: EngineWorker,
    defaults: GenerateSettings,
    api_key: str | None = None,
    fim_order: Order = DEFAULT_ORDER,
    reach: Reach = LOOPBACK,
) -> FastAPI:
    """The app serving `worker`'s engine under its pair's name; `defaults`: the command line's decoding
    settings, which a request's sampling fields override; `fim_order`: the layout of a fill-in-the-middle
    prompt (engine/infill.py); `reach`: its address and the hosts and origins allowed (reach.py)."""
    served, started = worker.engine.pair.name, int(time.time())
    app = _guarded_app(api_key, reach)

    def checked_chat(raw: bytes, content_type: str | None) -> Checked:
        body = body_model(ChatCompletionRequest, raw, content_type)
        tools = tool_plan(body, served, worker.engine.pair.tool_format)
        messages = body.chat_messages()
        response = response_constraint(body.response_format)  # compiled now: a bad schema is a 400
        return Checked(
            body,
            ChatFormat(served, calls=tools.parser),
            lambda engine: engine.chat_tokens(messages, tools.rendered),
            "messages",
            one_constraint(response, tools.constraint),
        )

    def checked_completion(raw: bytes, content_type: str | None) -> Checked:
        """Special tokens in the prompt are read as such (as llama.cpp's server does), so editors'
        fill-in-the-middle prompts (<|fim_prefix|> ...) work. With a `suffix`, the prompt is the
        text before the insertion point, and the target fills in the middle (engine/infill.py)."""
        body = body_model(CompletionRequest, raw, content_type)
        text = body.text
        if body.suffix:
            prompt = infill_tokens(Infill(text, body.suffix), body.max_tokens, fim_order, "suffix")
            return Checked(body, TextFormat(served), prompt, "prompt")
        return Checked(body, TextFormat(served), lambda engine: engine.target.tokenize(text), "prompt")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await answer(request, await checked(request, checked_chat), worker, defaults)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(request, await checked(request, checked_completion), worker, defaults)

    add_native_routes(app, worker, defaults, fim_order)

    @app.get("/v1/models")
    async def models() -> Response:
        listing = ModelList(data=[ModelCard(id=served, created=started)])
        return Response(listing.model_dump_json(), media_type="application/json")

    @app.get("/health")
    async def health() -> dict:
        """200 once the server is ready; 503 while it measures its speed (EngineWorker.prepare)."""
        if not worker.ready.is_set():
            raise openai_errors.not_ready()
        return {"status": "ok", "model": served}

    return app


async def answer(
    request: Request, checked_request: Checked, worker: EngineWorker, defaults: GenerateSettings
) -> Response:
    """A checked request queued for the engine and answered, streamed or whole, while its client is
    connected."""
    body, fmt, served = checked_request.body, checked_request.fmt, worker.engine.pair.name
    if body.model != served:
        raise unknown_model(body.model, served)
    job = Job(
        checked_request.tokens,
        checked_request.param,
        request_settings(
            defaults, body, checked_request.constraint, body.edgespec.decode_again, body.edgespec.live_timings
        ),
        body.max_tokens,
    )
    started = await start(request, job, worker)
    if body.max_tokens == 0:
        return await read_only(request, job, fmt, body.stream, started.prompt_tokens)
    reply = Reply(body.stops, started.prompt_tokens)
    if body.stream:
        return EventSourceResponse(stream(job, reply, fmt, body))
    whole = await while_connected(request, job, collect(job, reply, fmt, body))
    return Response(whole.model_dump_json(), media_type="application/json")


async def read_only(
    request: Request, job: Job, fmt: ChatFormat | TextFormat, stream: bool, prompt_tokens: int
) -> Response:
    """A request with `max_tokens: 0` (an extension): the prompt read into the cache, no text; its
    usage, and what was read (`read_ahead`), whole or as one event before `[DONE]`."""
    reading = await reading_of(request, job)
    usage = Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=0,
        total_tokens=prompt_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=reading.cached),
    )
    figures = ReadAhead(
        ready_tokens=reading.ready, read_tokens=reading.read, read_s=reading.seconds, stopped=reading.stopped
    )
    whole = fmt.whole("", "length", usage=usage, read_ahead=figures)
    if not stream:
        return Response(whole.model_dump_json(), media_type="application/json")
    return Response(sse(whole) + DONE, media_type="text/event-stream")


def sse(body: BaseModel) -> bytes:
    return format_sse_event(data_str=body.model_dump_json())


async def stream(job: Job, reply: Reply, fmt: ChatFormat | TextFormat, body: GenerationRequest) -> AsyncIterator[bytes]:
    """Server-sent events: an opening chunk (chat), the text as it comes, a chunk with the finish
    reason, the usage chunk when asked for, `[DONE]`. The figures go in the last chunk before
    `[DONE]`. When the client goes away, Starlette cancels this generator and `finally` cancels
    the generation."""
    try:
        opening = fmt.opening()
        if opening is not None:
            yield sse(opening)
        try:
            async for tokens in sent_tokens(job, reply):
                text = "".join(t.text for t in tokens)  # a token may end mid-character: no text yet
                for chunk in fmt.pieces(text, origins(tokens) if body.edgespec.sources else None):
                    yield sse(chunk)
            for chunk in fmt.last_pieces():
                yield sse(chunk)
        except APIError as error:  # the 200 has been sent: the error is a chunk of its own
            yield format_sse_event(data_str=json.dumps(error.body()))
            yield DONE
            return
        if body.include_usage:
            yield sse(fmt.ending(reply.finish_reason))
            yield sse(fmt.usage_chunk(usage=reply.usage(), metrics=reply.metrics()))
        else:
            yield sse(fmt.ending(reply.finish_reason, metrics=reply.metrics()))
        yield DONE
    finally:
        job.cancel.set()


async def collect(job: Job, reply: Reply, fmt: ChatFormat | TextFormat, body: GenerationRequest) -> BaseModel:
    """The whole reply as one body."""
    sent: list[Token] = []
    async for tokens in sent_tokens(job, reply):
        sent += tokens
    return fmt.whole(
        "".join(t.text for t in sent),
        reply.finish_reason,
        usage=reply.usage(),
        metrics=reply.metrics(),
        edgespec=origins(sent) if body.edgespec.sources else None,
    )
