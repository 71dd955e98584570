"""Structured output in a chat request: its `response_format` as the constraint the reply decodes
under (what each form means, and what `strict` adds: edgespec.constraints.response_format), checked
and compiled before the request is queued, so a bad schema is a 400 naming what is wrong, never a
stream that fails."""

from __future__ import annotations

from edgespec.constraints.guidance import ConstraintError, ConstraintSpec
from edgespec.constraints.response_format import ResponseFormat, format_constraint
from edgespec.server.openai_errors import APIError


def response_constraint(fmt: ResponseFormat | None) -> ConstraintSpec | None:
    """The constraint `fmt` asks for (None for plain text): APIError 400 with param
    "response_format" when it cannot be enforced."""
    try:
        return format_constraint(fmt)
    except ConstraintError as e:
        raise APIError(400, str(e), param="response_format", code="invalid_value") from None


def one_constraint(response: ConstraintSpec | None, tools: ConstraintSpec | None) -> ConstraintSpec | None:
    """The one constraint a reply is decoded under. A `response_format` document and a call that
    `tool_choice` requires (or a strict tool) cannot both be the reply: a 400, not one of them
    silently dropped."""
    if response is not None and tools is not None:
        raise APIError(
            400,
            "response_format and tool_choice both constrain the reply (a document, or a call of the tools): "
            "send one of them",
            param="response_format",
        )
    return response or tools
