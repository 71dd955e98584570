"""A request's body read into its model off the event loop.

Reading a body is cheap; checking it is not: a body at the size cap (MAX_BODY_BYTES) holds tens of
thousands of tools or messages, each validated, and a chat request's tools and `response_format`
are compiled into a constraint before it is queued. Done on the event loop, that work held every
other request, /health included, for seconds. So the body is parsed, validated and made ready to
queue in a worker thread (`checked`), while the loop goes on answering.

A thread is not enough on its own: the loop waits for Python's lock, and a check held it for
100-500 ms at a time. pydantic validates a whole list in one call (half a second for 80,000 tools),
so a long list field is validated in slices of SLICE items (`_sliced`), each call a few
milliseconds, up to the first slice that fails (only the first error is answered), and the model
then takes the validated items as they are. And the garbage collector, which hundreds of thousands
of new objects set off, scanned every object in the process at once: it is paused while a request is
checked, its constraint compiled included (a parsed body holds no cycles; it runs again after).

The body is read as FastAPI reads a body parameter (JSON only under a JSON content type; its
errors answered as edgespec.server.openai_errors answers FastAPI's), with one rule more: a body
nested more than MAX_DEPTH levels deep is a 400 before anything walks it (edgespec.util.json_depth
says why).
"""

from __future__ import annotations

import contextlib
import email.message
import functools
import gc
import json
import threading
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, cast

from fastapi import Request
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from edgespec.server.openai_errors import APIError, request_error
from edgespec.util import json_depth

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

SLICE = 500  # list items validated per pydantic call (a few milliseconds each)


async def checked(request: Request, check: Callable[[bytes, str | None], T]) -> T:
    """`check(body, content_type)` run in a worker thread, once the whole body has come."""
    raw = await request.body()
    return await run_in_threadpool(_paused, check, raw, request.headers.get("content-type"))


def _paused(check: Callable[[bytes, str | None], T], raw: bytes, content_type: str | None) -> T:
    with _collector_paused():
        return check(raw, content_type)


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
    data, errors = _sliced(model, data)
    try:
        checked = model.model_validate(data)
    except ValidationError as e:
        errors += e.errors()
    if errors:
        order = {field.alias or name: i for i, (name, field) in enumerate(model.model_fields.items())}
        errors.sort(key=lambda e: order.get(e["loc"][0], -1) if e["loc"] else -1)  # as one call orders them
        raise request_error([{**error, "loc": ("body", *error["loc"])} for error in errors]) from None
    return checked


def _sliced(model: type[BaseModel], data: Any) -> tuple[Any, list]:
    """`data` with each list field longer than SLICE validated item by item, a slice per call (the
    model accepts the items as they are), and the errors found there, located as the model's own."""
    if not isinstance(data, dict):
        return data, []
    out, errors = dict(data), []
    for name, field in model.model_fields.items():
        key = field.alias or name
        value, item = data.get(key), _list_item(field.annotation)
        if not isinstance(value, list) or len(value) <= SLICE or item is None:
            continue
        adapter, items = _list_adapter(item), []
        for start in range(0, len(value), SLICE):
            try:
                items += adapter.validate_python(value[start : start + SLICE])
            except ValidationError as e:
                # an item of the slice is located by its position in it: an int
                errors += [
                    {**err, "loc": (key, start + cast(int, err["loc"][0]), *err["loc"][1:])} for err in e.errors()
                ]
                break
        out[key] = items
    return out, errors


def _list_item(annotation: Any) -> Any:
    """X of a field typed `list[X]` or `list[X] | None`; None for any other type."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        lists = [a for a in typing.get_args(annotation) if typing.get_origin(a) is list]
        annotation = lists[0] if len(lists) == 1 else None
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is list else None


_pauses = 0
_pauses_lock = threading.Lock()


@contextlib.contextmanager
def _collector_paused():
    """The garbage collector off while any thread checks a body (counted: checks may overlap)."""
    global _pauses
    with _pauses_lock:
        _pauses += 1
        if _pauses == 1:
            gc.disable()
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0:
                gc.enable()


@functools.cache
def _list_adapter(item: Any) -> TypeAdapter:
    return TypeAdapter(list[item])


def _is_json(content_type: str | None) -> bool:
    """application/json or application/*+json, as FastAPI decides it; no content type is not JSON."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))
