"""llama.cpp server's own endpoints, `/completion` and `/infill`, for editors' plugins.

llama.vim and llama.vscode ask `/infill` for inline completions and, in idle time, send chunks of
recent files with `n_predict: 0` so that the next completion finds them read. Continue's, Tabby's
and Twinny's llama.cpp providers send `/completion`. Both are queued for the one engine like the
OpenAI endpoints (engine_worker.py): a read only yields to any request that generates, and a
suggestion is a reply like any other, drafted from its suffix, the extra files and the history.
The request and reply bodies: native_schemas.py and native_replies.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request, Response
from fastapi.sse import EventSourceResponse, format_sse_event

from edgespec.decoding.events import Token
from edgespec.engine.engine import Engine, GenerateSettings
from edgespec.engine.infill import Infill, NoInfill, Order, fim_marks, infill_prompt
from edgespec.engine.read_ahead import Reading
from edgespec.server.engine_worker import EngineWorker, Job
from edgespec.server.line_limits import LineLimits
from edgespec.server.native_replies import NativeFormat
from edgespec.server.native_schemas import InfillRequest, NativeCompletionRequest, NativeRequest
from edgespec.server.openai_errors import APIError, unknown_model
from edgespec.server.queued import reading_of, request_settings, sent_tokens, start, while_connected
from edgespec.server.replies import Reply
from edgespec.server.request_body import body_model, checked

# Tokens of the context kept for the reply when a prompt is cut to fit: at least this many (a
# quarter of a smaller context), whatever the request's length, so that a read only (`n_predict`
# 0) cuts the prompt where the requests after it do and its chunks are theirs.
DEFAULT_ROOM = 256


@dataclass
class Prompt:
    """A request's prompt, made on the engine thread; `truncated` is known once it is made."""

    make: Callable[[Engine], list[int]]
    truncated: bool = False
    param: str = "prompt"

    def __call__(self, engine: Engine) -> list[int]:
        return self.make(engine)


def infill_tokens(infill: Infill, max_tokens: int | None, order: Order, param: str) -> Prompt:
    """The fill-in-the-middle prompt of `infill` (engine/infill.py) for a reply of at most
    `max_tokens` (None: no set length), a 400 naming `param` when the target has no
    fill-in-the-middle tokens."""

    def make(engine: Engine) -> list[int]:
        try:
            marks = fim_marks(engine.target)
        except NoInfill as e:
            raise APIError(400, f"{e}: it cannot fill in the middle", param=param) from None
        room = max(max_tokens or 0, min(DEFAULT_ROOM, engine.n_ctx // 4))
        made = infill_prompt(engine.target, marks, infill, room, order)
        prompt.truncated = made.truncated
        return made.tokens

    prompt = Prompt(make, param=param)
    return prompt


def checked_infill(order: Order) -> Callable[[bytes, str | None], tuple[InfillRequest, Prompt]]:
    def check(raw: bytes, content_type: str | None) -> tuple[InfillRequest, Prompt]:
        body = body_model(InfillRequest, raw, content_type)
        return body, infill_tokens(body.infill(), body.max_tokens, order, "input_prefix")

    return check


def checked_completion(raw: bytes, content_type: str | None) -> tuple[NativeCompletionRequest, Prompt]:
    """Special tokens in the prompt are read as such, as llama.cpp's server reads them."""
    body = body_model(NativeCompletionRequest, raw, content_type)
    text = body.text
    return body, Prompt(lambda engine: engine.target.tokenize(text))


def add_native_routes(app: FastAPI, worker: EngineWorker, defaults: GenerateSettings, order: Order) -> None:
    """POST /completion and /infill on `app`, answered from `worker`'s engine."""

    @app.post("/completion")
    async def completion(request: Request) -> Response:
        return await answer_native(request, await checked(request, checked_completion), worker, defaults)

    @app.post("/infill")
    async def infill(request: Request) -> Response:
        return await answer_native(request, await checked(request, checked_infill(order)), worker, defaults)


async def answer_native(
    request: Request, checked: tuple[NativeRequest, Prompt], worker: EngineWorker, defaults: GenerateSettings
) -> Response:
    """A `/completion` or `/infill` request queued and answered, whole or streamed."""
    body, prompt = checked
    served = worker.engine.pair.name
    # llama.vim sends its `model_fim` setting, "" unless set; llama.cpp takes "" as its own model
    if body.model and body.model != served:
        raise unknown_model(body.model, served)
    job = Job(prompt, prompt.param, request_settings(defaults, body), body.max_tokens)
    started = await start(request, job, worker)
    fmt = NativeFormat(served, started.prompt_tokens, prompt.truncated, _fields(body))
    if body.max_tokens == 0:
        reading: Reading = await reading_of(request, job)
        return _json(fmt.read_only(reading))
    t_max = body.t_max_predict_ms / 1000 if body.t_max_predict_ms and body.t_max_predict_ms > 0 else None
    reply = Reply(body.stops, started.prompt_tokens, LineLimits(body.n_indent, t_max))
    if body.stream:
        return EventSourceResponse(_stream(job, reply, fmt))
    text = await while_connected(request, job, _collect(job, reply))
    return _json(fmt.final(text, reply.summary, reply.sent, _stop_type(reply), reply.cut.word))


def _fields(body: NativeRequest) -> tuple[str, ...] | None:
    return tuple(body.response_fields) if body.response_fields is not None else None


def _json(body: dict) -> Response:
    # compact, as llama.cpp writes it: llama.vim takes a reply only where `"content"\s*:"` matches
    return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")


async def _collect(job: Job, reply: Reply) -> str:
    sent: list[Token] = []
    async for tokens in sent_tokens(job, reply):
        sent += tokens
    return "".join(t.text for t in sent)


async def _stream(job: Job, reply: Reply, fmt: NativeFormat) -> AsyncIterator[bytes]:
    """A piece per batch of tokens, then the last piece with the figures; an error after the 200
    is an event of its own. `finally` stops the generation when the client goes away."""
    try:
        try:
            async for tokens in sent_tokens(job, reply):
                text = "".join(t.text for t in tokens)
                yield format_sse_event(data_str=json.dumps(fmt.piece(text, reply.sent.tokens)))
        except APIError as error:
            yield format_sse_event(data_str=json.dumps(error.body()))
            return
        yield format_sse_event(data_str=json.dumps(fmt.final("", reply.summary, reply.sent, _stop_type(reply))))
    finally:
        job.cancel.set()


def _stop_type(reply: Reply) -> str:
    """llama.cpp's words: "word" at a stop string, "eos" at the end of the text, else "limit"."""
    if reply.cut.met:
        return "word"
    return "eos" if reply.summary.stop_reason == "eos" and not reply.ended else "limit"
