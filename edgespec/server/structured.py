"""Structured output: a chat request's `response_format` as the constraint its reply decodes under.

`{"type": "json_object"}` asks for one JSON object; `{"type": "json_schema", ...}` for one JSON
document valid against the schema. edgespec always decodes under the schema, whatever `strict`
says: masking the target's logits keeps speculation lossless and costs little, so there is no
reason to let a reply stray (OpenAI treats a schema without `strict: true` as a hint). `strict:
true` adds what a client moving from OpenAI's strict mode counts on, the rules OpenAI checks there
and refuses with a 400: the root is an object, and every object sets `additionalProperties: false`
and lists all its properties in `required` (the openai client's `parse` helper writes schemas so).
OpenAI's size limits (nesting depth, number of properties) are not applied.

Everything is checked, and the schema compiled, before the request is queued, so a bad schema is a
400 naming what is wrong (a strict-mode rule with where it is broken, or the feature llguidance
cannot enforce), never a stream that fails, and never a constraint silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterator

from edgespec.constraints.guidance import ConstraintError, ConstraintSpec, grammar_of
from edgespec.server.format_schemas import ResponseFormat
from edgespec.server.openai_errors import APIError

# keywords whose value is a schema, a list of schemas, or a name -> schema map
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")
_LIST = ("items", "prefixItems", "anyOf", "allOf", "oneOf")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def response_constraint(fmt: ResponseFormat | None) -> ConstraintSpec | None:
    """The constraint `fmt` asks for (None for plain text), checked and compiled: APIError 400
    with param "response_format" when it cannot be enforced."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.json_schema is None:  # type json_object (ResponseFormat pairs json_schema with its type)
        spec = ConstraintSpec("json_object")
        what = "response_format"
    else:
        schema, name = fmt.json_schema.schema_, fmt.json_schema.name
        what = f"invalid schema for response_format {name!r}"
        if fmt.json_schema.strict:
            problem = strict_problem(schema)
            if problem:
                raise _refused(f"{what} (strict): {problem}")
        spec = ConstraintSpec.json_schema(schema)
    try:
        grammar_of(spec)
    except ConstraintError as e:
        raise _refused(f"{what}: {e}") from None
    return spec


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


def strict_problem(schema: dict) -> str | None:
    """The first of OpenAI's strict-mode rules that `schema` breaks, saying where (a JSON pointer);
    None when it keeps them all."""
    if schema.get("type") != "object":
        return "the root must be an object ('type': 'object'), not anyOf or another type"
    for where, node in _subschemas(schema, ""):
        if not _is_object(node):
            continue
        at = where or "the root"
        if node.get("additionalProperties") is not False:
            return f"at {at}, 'additionalProperties' must be given and be false"
        properties = node.get("properties", {})
        required = node.get("required", [])
        missing = [key for key in properties if key not in required] if isinstance(required, list) else list(properties)
        if missing:
            return f"at {at}, 'required' must list every property; missing {', '.join(map(repr, missing))}"
    return None


def _is_object(node: dict) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _subschemas(node: dict, where: str) -> Iterator[tuple[str, dict]]:
    """`node` and every schema within it, each with its JSON pointer."""
    yield where, node
    for key in dict.fromkeys(_ONE + _LIST + _MAP):
        value = node.get(key)
        if isinstance(value, dict) and key in _MAP:
            children = [(f"{where}/{key}/{_escaped(name)}", child) for name, child in value.items()]
        elif isinstance(value, dict):
            children = [(f"{where}/{key}", value)]
        elif isinstance(value, list) and key in _LIST:
            children = [(f"{where}/{key}/{i}", child) for i, child in enumerate(value)]
        else:
            continue
        for pointer, child in children:
            if isinstance(child, dict):
                yield from _subschemas(child, pointer)


def _escaped(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _refused(message: str) -> APIError:
    return APIError(400, message, param="response_format", code="invalid_value")
