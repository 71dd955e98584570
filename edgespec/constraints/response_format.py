"""`response_format`, as OpenAI's structured outputs send it, and the constraint it asks for: one
reading for every front end that takes it (a request to `serve`, a bench suite line).

`{"type": "json_object"}` asks for one JSON object; `{"type": "json_schema", ...}` for one JSON
document valid against the schema. edgespec always decodes under the schema, whatever `strict`
says: masking the target's logits keeps speculation lossless and costs little, so there is no
reason to let a reply stray (OpenAI treats a schema without `strict: true` as a hint). `strict:
true` adds what a client moving from OpenAI's strict mode counts on, the rules OpenAI checks there
and refuses: the root is an object, and every object sets `additionalProperties: false` and lists
all its properties in `required` (the openai client's `parse` helper writes schemas so). OpenAI's
size limits (nesting depth, number of properties) are not applied.

`format_constraint` checks all of it and compiles the schema, so a bad one is refused before
anything is decoded (a `ConstraintError` naming the strict-mode rule and where it is broken, or the
feature llguidance cannot enforce), never a constraint silently dropped.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from edgespec.constraints.guidance import ConstraintError, ConstraintSpec, check
from edgespec.constraints.json_schemas import subschemas


class _Strict(BaseModel):
    """Fields of the wrong type are refused, not coerced; unknown fields are refused by name."""

    model_config = ConfigDict(extra="forbid", strict=True)


_FORMAT_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _format_name(value: str) -> str:
    if not _FORMAT_NAME.fullmatch(value):
        raise PydanticCustomError("invalid_value", "must be 1 to 64 letters a-z, A-Z, digits, underscores or dashes")
    return value


class JsonSchemaFormat(_Strict):
    """`response_format.json_schema` as OpenAI's structured outputs send it (the openai client's
    `parse` helper among them). What `strict` means here: edgespec.server.structured."""

    name: Annotated[str, AfterValidator(_format_name)]
    schema_: dict = Field(alias="schema")  # "schema" would shadow a BaseModel method
    description: str | None = None
    strict: bool | None = None


class ResponseFormat(_Strict):
    """`{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema", "json_schema": {...}}`."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_with_its_type(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise PydanticCustomError("invalid_value", "type 'json_schema' needs the field 'json_schema'")
        if self.type != "json_schema" and self.json_schema is not None:
            raise PydanticCustomError("invalid_value", "the field 'json_schema' goes with type 'json_schema' only")
        return self


def format_constraint(fmt: ResponseFormat | None) -> ConstraintSpec | None:
    """The constraint `fmt` asks for (None for plain text), checked and compiled: ConstraintError
    saying what cannot be enforced."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.json_schema is None:  # type json_object (ResponseFormat pairs json_schema with its type)
        spec, what = ConstraintSpec("json_object"), "the JSON object mode"
    else:
        schema, name = fmt.json_schema.schema_, fmt.json_schema.name
        what = f"invalid schema for response_format {name!r}"
        try:
            spec = ConstraintSpec.json_schema(schema)  # its depth first: strict_problem walks it
        except ConstraintError as e:
            raise ConstraintError(f"{what}: {e}") from None
        problem = strict_problem(schema) if fmt.json_schema.strict else None
        if problem:
            raise ConstraintError(f"{what} (strict): {problem}")
    try:
        check(spec)
    except ConstraintError as e:
        raise ConstraintError(f"{what}: {e}") from None
    return spec


def strict_problem(schema: dict) -> str | None:
    """The first of OpenAI's strict-mode rules that `schema` breaks, saying where (a JSON pointer);
    None when it keeps them all."""
    if schema.get("type") != "object":
        return "the root must be an object ('type': 'object'), not anyOf or another type"
    for where, node in subschemas(schema):
        if not isinstance(node, dict) or not _is_object(node):
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
