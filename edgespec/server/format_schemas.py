"""`response_format`, typed as OpenAI's structured outputs send it; what edgespec does with it:
edgespec.server.structured."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from edgespec.server.schema_base import Strict

_FORMAT_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _format_name(value: str) -> str:
    if not _FORMAT_NAME.fullmatch(value):
        raise PydanticCustomError("invalid_value", "must be 1 to 64 letters a-z, A-Z, digits, underscores or dashes")
    return value


class JsonSchemaFormat(Strict):
    """`response_format.json_schema` as OpenAI's structured outputs send it (the openai client's
    `parse` helper among them). What `strict` means here: edgespec.server.structured."""

    name: Annotated[str, AfterValidator(_format_name)]
    schema_: dict = Field(alias="schema")  # "schema" would shadow a BaseModel method
    description: str | None = None
    strict: bool | None = None


class ResponseFormat(Strict):
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
