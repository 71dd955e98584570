"""Structured suite lines: a `response_format` in OpenAI's shape, so a suite line reads like the
request an agent or an SDK sends, compiled and checked before any model loads; and the check of
each reply against it after the run.

Every mode of such a prompt decodes under the constraint (`ar` under it is the baseline), and each
reply is parsed and validated with jsonschema: a validator independent of llguidance, which
enforced the constraint, so a bug in the mask or its rollback shows as an invalid reply instead of
being checked by the code that made it.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, model_validator

from edgespec.constraints.guidance import ConstraintError, ConstraintSpec, grammar_of


class JsonSchemaFormat(BaseModel):
    """`response_format.json_schema` as OpenAI's API takes it. `strict` may only be true: the bench
    always decodes under the schema, and an unconstrained reply is not what a structured suite
    measures."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    schema_: Annotated[dict, Field(alias="schema")]
    strict: Literal[True] | None = None


class ResponseFormat(BaseModel):
    """`{"type": "json_object"}` (any JSON object) or `{"type": "json_schema", "json_schema": {...}}`.
    Unknown keys are refused: a misspelt key would otherwise leave a prompt unconstrained."""

    model_config = ConfigDict(strict=True, extra="forbid")

    type: Literal["json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _enforceable(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError('type "json_schema" needs a "json_schema" object')
        if self.type == "json_object" and self.json_schema is not None:
            raise ValueError('type "json_object" takes no "json_schema" (use type "json_schema")')
        if self.json_schema is not None:
            schema = self.json_schema.schema_
            try:  # a schema jsonschema cannot read could not check the replies afterwards
                jsonschema.validators.validator_for(schema).check_schema(schema)
            except jsonschema.SchemaError as e:
                raise ValueError(f"not a valid JSON schema: {e.message}{_at(e.absolute_path)}") from None
        try:
            grammar_of(self.constraint())
        except ConstraintError as e:
            raise ValueError(str(e)) from None
        return self

    def constraint(self) -> ConstraintSpec:
        if self.json_schema is None:
            return ConstraintSpec("json_object")
        return ConstraintSpec.json_schema(self.json_schema.schema_)


def reply_problem(spec: ConstraintSpec, text: str, stop_reason: str) -> str | None:
    """Why `text`, a reply decoded under `spec`, does not parse or validate (one line), or None when
    it does. `stop_reason` (the Summary's) tells a reply cut at its token budget from a bad one."""
    cut = " (cut at max_tokens)" if stop_reason == "length" else ""
    try:
        value = json.loads(text)
    except ValueError as e:
        return f"not JSON{cut}: {e}"
    if spec.kind == "json_object":
        return None if isinstance(value, dict) else f"not a JSON object but {type(value).__name__}"
    schema = json.loads(spec.text)
    error = jsonschema.exceptions.best_match(jsonschema.validators.validator_for(schema)(schema).iter_errors(value))
    return None if error is None else f"does not validate: {error.message}{_at(error.absolute_path)}"


def _at(path) -> str:
    """Where in a document an error is, as a JSON path ("" at the root)."""
    parts = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return f" at ${parts}" if parts else ""
