"""The request side of tool calls in the OpenAI API: the tools offered, the choice among them, and
the calls of earlier turns that a conversation's history carries back."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from edgespec.server.schema_base import Strict, Text
from edgespec.util import json_depth

ToolName = Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]  # OpenAI's rule for a function's name


class CalledFunction(Strict):
    name: ToolName
    arguments: Text  # JSON, as the model wrote it


class ToolCall(Strict):
    """A call the assistant made: in an earlier turn of the history, and in a reply's message."""

    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


def arguments_value(call: ToolCall) -> Any:
    """A call's arguments as the chat template takes them: an object (templates write it with
    `tojson`), or the text as it came where it is not JSON or is nested too deeply to read
    (edgespec.util.json_depth)."""
    try:
        return json_depth.loads(call.function.arguments)
    except ValueError:
        return call.function.arguments


class FunctionDefinition(Strict):
    name: ToolName
    description: Text | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema of the arguments object; none: no arguments
    strict: bool | None = None


class Tool(Strict):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(Strict):
    name: str


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: FunctionName


# A string or an object; tagged so that an error names the field (the tags are type names, which
# error messages leave out) and speaks only of the form that was sent.
ToolChoice = Annotated[
    Annotated[Literal["none", "auto", "required"], Tag("str")] | Annotated[NamedToolChoice, Tag("dict")],
    Discriminator(lambda v: "str" if isinstance(v, str) else "dict"),
]
