"""Structured suite lines: a `response_format` in OpenAI's shape, so a suite line reads like the
request an agent or an SDK sends (read as `serve` reads it: edgespec.constraints.response_format),
compiled and checked before any model loads; and the check of each reply against it after the run.

Every mode of such a prompt decodes under the constraint (`ar` under it is the baseline), and each
reply is parsed and validated with jsonschema: a validator independent of llguidance, which
enforced the constraint, so a bug in the mask or its rollback shows as an invalid reply instead of
being checked by the code that made it.
"""

from __future__ import annotations

import json
from typing import Annotated

import jsonschema
from pydantic import AfterValidator

from edgespec.constraints.guidance import ConstraintError, ConstraintSpec
from edgespec.constraints.response_format import ResponseFormat, format_constraint


def _checked(fmt: ResponseFormat) -> ResponseFormat:
    """A format read as the server reads it (edgespec.constraints.response_format), compiled; and a
    schema jsonschema can read, or the replies could not be checked afterwards."""
    if fmt.json_schema is not None:
        schema = fmt.json_schema.schema_
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as e:
            raise ValueError(f"not a valid JSON schema: {e.message}{_at(e.absolute_path)}") from None
    try:
        format_constraint(fmt)
    except ConstraintError as e:
        raise ValueError(str(e)) from None
    return fmt


CheckedFormat = Annotated[ResponseFormat, AfterValidator(_checked)]


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
