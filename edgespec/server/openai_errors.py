"""Every error the server returns, in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.

Clients (the `openai` SDK, editors) read `error.message` and show it, so each message is one line
that says what was wrong and, where it helps, what to send instead. FastAPI's own errors (a body
that is not JSON, a missing or mistyped field, an unknown path) are rewritten into this shape with
the status OpenAI uses (400, not FastAPI's 422). One is not: a body over the size cap gets
Starlette's own 413 "Content Too Large" in plain text, which its body-limit middleware sends from
outside the app's error handlers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from edgespec.server.schemas import ErrorBody, ErrorDetail


class APIError(Exception):
    """An error answered to the client; `headers` such as Retry-After go with it."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.headers = status, headers
        self.detail = ErrorDetail(message=message, type=type, param=param, code=code)

    def body(self) -> dict:
        return ErrorBody(error=self.detail).model_dump()

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def unknown_model(asked: str, served: str) -> APIError:
    return APIError(
        404, f"model {asked!r} is not served here; this server runs {served!r}", param="model", code="model_not_found"
    )


def context_length_exceeded(prompt_tokens: int, n_ctx: int, param: str) -> APIError:
    return APIError(
        400,
        f"the prompt is {prompt_tokens} tokens but the model's context holds {n_ctx}; shorten it",
        param=param,
        code="context_length_exceeded",
    )


def engine_failure(error: Exception) -> APIError:
    """The engine failed on this request; the server goes on serving the next one."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return APIError(500, f"the engine failed: {text}", type="server_error", code="engine_failure")


def constraint_dead_end(error: Exception) -> APIError:
    """The reply's constraint allowed only the end of an incomplete document
    (edgespec.decoding.constraint): the reply failed, never a "stop" with a cut document."""
    return APIError(500, str(error), type="server_error", code="constraint_dead_end")


def queue_full(retry_after: int) -> APIError:
    return APIError(
        503,
        "the engine is busy and the queue of waiting requests is full; retry later",
        type="server_error",
        code="queue_full",
        headers={"Retry-After": str(retry_after)},
    )


def server_stopping() -> APIError:
    return APIError(
        503, "the server is shutting down; this request was not finished", type="server_error", code="server_stopping"
    )


def not_ready() -> APIError:
    """/health while the server measures the machine's speed, in the shape llama.cpp's server
    answers while it loads (503, type `unavailable_error`), which load balancers and clients that
    poll it already read; requests sent meanwhile wait their turn instead."""
    return APIError(
        503,
        "measuring this machine's speed before the first request; requests sent now wait for it",
        type="unavailable_error",
        code="loading",
    )


def unauthorized(sent: bool) -> APIError:
    message = "wrong API key" if sent else "missing API key: send the header 'Authorization: Bearer KEY'"
    return APIError(401, message, code="invalid_api_key")


# pydantic names the member of a union (`str | list[str]`) in an error's location; a field is named
# without it. No field of the request models is called like a type; a client's unknown field can be
# (`"list[x]"`, `"a-b"`), and is the last part of its location.
_UNION_MEMBER = re.compile(r"^(str|int|float|bool|list|dict)$|[\[\-]")


def _param(error: dict) -> str:
    parts = [str(part) for part in error["loc"][1:]]  # loc[0]: "body"
    unknown = parts[-1:] if error["type"] == "extra_forbidden" else []
    return ".".join([part for part in parts[: len(parts) - len(unknown)] if not _UNION_MEMBER.search(part)] + unknown)


def request_error(errors: list[dict]) -> APIError:
    """The first problem found in the request's body (pydantic's errors, located under "body" as
    FastAPI locates them), as one line naming the field. For a field of several types, the type
    that came closest: its error is not merely "not this type", and it may lie within the field
    (`content`'s list: `messages.0.content.1.text`). A body can hold tens of thousands of errors:
    the search stops at the first that fits."""
    first = _param(errors[0])

    def within(e: dict) -> bool:
        param = _param(e)
        return param == first or bool(first) and param.startswith(first + ".")

    e = next((e for e in errors if not e["type"].endswith("_type") and within(e)), errors[0])
    param = _param(e) or None
    kind, loc = e["type"], [part for part in (param or "").split(".") if part]
    if kind == "json_invalid":
        return APIError(400, f"the body is not valid JSON: {e.get('ctx', {}).get('error', e['msg'])}")
    if kind == "string_unicode":  # pydantic's own check, on a key (JSON can escape a lone surrogate)
        where = f"a key in {param}" if param else "a field name"
        return APIError(400, f"{where} is not valid Unicode", param=param, code="invalid_value")
    if not loc:  # empty, a JSON value that is not an object, or not sent as JSON
        return APIError(400, "the body must be a JSON object sent with 'Content-Type: application/json'")
    if kind == "missing":
        return APIError(400, f"missing field {param!r}", param=param, code="missing_required_parameter")
    if kind == "extra_forbidden":
        return APIError(
            400, f"unknown field {param!r}: edgespec does not support it", param=param, code="unknown_parameter"
        )
    if kind == "invalid_unicode":  # the message continues the field's name: "prompt is not valid Unicode (...)"
        return APIError(400, f"{param} {e['msg']}", param=param, code="invalid_value")
    code = "unsupported_parameter" if kind == "unsupported_parameter" else "invalid_value"
    return APIError(400, f"{param}: {e['msg']}" if param else e["msg"], param=param, code=code)


def install(app: FastAPI) -> None:
    """Answer every error in OpenAI's shape, never with a traceback."""

    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError) -> JSONResponse:
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        return request_error(list(error.errors())).response()

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        messages = {
            404: f"no such endpoint: {request.method} {request.url.path}",
            405: f"{request.method} is not allowed on {request.url.path}",
        }
        message = messages.get(error.status_code, str(error.detail))
        return APIError(error.status_code, message, headers=error.headers).response()

    @app.exception_handler(Exception)
    async def failure(request: Request, error: Exception) -> JSONResponse:
        return engine_failure(error).response()
