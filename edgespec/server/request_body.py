"""A request's body read into its model off the event loop.

Reading a body is cheap; checking it is not: a body at the size cap (MAX_BODY_BYTES) holds tens of
thousands of tools or messages, each validated, and a chat request's tools and `response_format`
are compiled into a constraint before it is queued. Done on the event loop, that work held every
other request, /health included, for seconds. So the body is parsed, validated and made ready to
queue in a worker thread (`checked`), while the loop goes on answering.

The body is read as FastAPI reads a body parameter (JSON only under a JSON content type; its
errors answered as edgespec.server.openai_errors answers FastAPI's), with one rule more: a body
nested more than MAX_DEPTH levels deep is a 400 before anything walks it (edgespec.util.json_depth
says why).
"""

from __future__ import annotations

import email.message
import json
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from edgespec.server.openai_errors import APIError, request_error
from edgespec.util import json_depth

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


async def checked(request: Request, check: Callable[[bytes, str | None], T]) -> T:
    """`check(body, content_type)` run in a worker thread, once the whole body has come."""
    raw = await request.body()
    return await run_in_threadpool(check, raw, request.headers.get("content-type"))


def body_model(model: type[M], raw: bytes, content_type: str | None) -> M:
    """`raw` as a `model`, or an APIError (400): where FastAPI would raise a RequestValidationError,
    the error its handler would answer (made here, off the loop: a body may hold tens of
    thousands of errors), and for a body nested too deeply or not UTF-8."""
    data: Any = raw or None
    if raw and _is_json(content_type):
        try:
            data = json_depth.loads(raw)
        except json.JSONDecodeError as e:
            error = {"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error"}
            raise request_error([{**error, "ctx": {"error": e.msg}}]) from None
        except json_depth.TooDeep as e:
            raise APIError(400, f"the body is {e}", code="invalid_value") from None
        except UnicodeDecodeError:
            raise APIError(400, "the body is not valid JSON: it is not UTF-8 text") from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise request_error([{**error, "loc": ("body", *error["loc"])} for error in e.errors()]) from None


def _is_json(content_type: str | None) -> bool:
    """application/json or application/*+json, as FastAPI decides it; no content type is not JSON."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))
