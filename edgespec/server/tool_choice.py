"""What a chat request's `tools`, `tool_choice` and `parallel_tool_calls` ask of one generation:
which tools the chat template renders, the constraint decoding follows, and how the reply is read.

- "auto" (the default with tools): the template renders the tools, the model decides, and the
  reply is read for calls (edgespec.server.tool_call_parser), in the format's markup or, for a tool
  that is not strict, as plain JSON (edgespec.server.json_calls). Decoding is free, unless a tool is
  `strict`: then a call, once the model opens one, is constrained to the tools offered, a strict
  tool's arguments to its parameters and another's to a JSON object (OpenAI's strict promise),
  while the text before it stays free.
- "none": the template renders no tools and the reply is not read for calls. OpenAI's "none" means
  "the model will not call any tool and instead generates a message"; a model shown the tools
  (Qwen2.5's template then instructs it to answer calls in `<tool_call>` markup) writes that
  markup anyway, which would then reach the client as text. Without them it writes a message. The
  history's earlier calls and tool messages are still rendered.
- "required" and a named function: the template renders every tool (the model reads what it may
  call, as under OpenAI), and decoding is constrained to one call (several with
  `parallel_tool_calls`, OpenAI's default) of the tools allowed, its arguments valid against that
  tool's parameters: a schema llguidance cannot enforce is a 400 naming the tool and the feature.

A pair whose models.toml names no `tool_format` gets a 400 for tools and for a history with tool
calls: its template may render neither, and its replies could not be read.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgespec.constraints.guidance import ConstraintError, ConstraintSpec
from edgespec.constraints.tool_calls import FORMATS, call_constraint, parameters_schema
from edgespec.server.openai_errors import APIError
from edgespec.server.schemas import ChatCompletionRequest
from edgespec.server.tool_call_parser import ToolCallParser
from edgespec.server.tool_schemas import NamedToolChoice


@dataclass(frozen=True)
class ToolPlan:
    rendered: list[dict] | None = None  # the tools the chat template renders
    constraint: ConstraintSpec | None = None
    parser: ToolCallParser | None = None  # reads the reply for calls; None: the reply is plain text


def tool_plan(body: ChatCompletionRequest, pair: str, tool_format: str | None) -> ToolPlan:
    """The plan for `body` on `pair`, whose models.toml declares `tool_format`; APIError (400)
    for what cannot be done."""
    tools = body.tools or []
    if tool_format is None:
        if tools:
            raise _no_format(pair, "tools")
        for i, m in enumerate(body.messages):
            if m.tool_calls or m.role == "tool":
                raise _no_format(pair, f"messages.{i}")
        return ToolPlan()
    choice = body.tool_choice or "auto"
    if not tools or choice == "none":
        return ToolPlan()
    fmt = FORMATS[tool_format]
    parallel = body.parallel_tool_calls is not False
    schemas = {t.function.name: parameters_schema(t.function.parameters) for t in tools}
    if isinstance(choice, NamedToolChoice):
        schemas = {choice.function.name: schemas[choice.function.name]}
    rendered = [t.model_dump(exclude_none=True) for t in tools]
    strict = {t.function.name for t in tools if t.function.strict}
    try:
        if choice != "auto":
            constraint = call_constraint(fmt, schemas, parallel)
        elif strict:  # a call the model starts must be valid; the rest of its arguments only JSON objects
            loose = {name: schema if name in strict else {"type": "object"} for name, schema in schemas.items()}
            constraint = call_constraint(fmt, loose, parallel, after_text=True)
        else:
            constraint = None
    except ConstraintError as e:
        raise APIError(400, f"tools: {e}", param="tools", code="invalid_value") from None
    # under "auto" a call may come as plain JSON, unenforced: never one of a strict tool
    plain = [name for name in schemas if name not in strict] if choice == "auto" else []
    return ToolPlan(rendered, constraint, ToolCallParser(fmt, schemas, parallel, plain))


def _no_format(pair: str, param: str) -> APIError:
    return APIError(
        400,
        f"{param}: pair {pair!r} declares no tool-call format (tool_format in models.toml), so it takes no tools",
        param=param,
        code="unsupported_parameter",
    )
